"""``read_table``: the read path without Dask."""

from __future__ import annotations

import os
import warnings

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.core import url_to_fs

from ..decompress.routing import Router
from ..errors import PageLocation, UnsupportedFeatureError
from ..options import Options, current_options
from ..report import ReadReport, publish
from .batch import iter_batches
from .decode import decode_errors
from .plan import Piece, PiecePlan, plan_piece

__all__ = ["read_table", "HwdecompFallbackWarning", "resolve_fs", "fallback"]


class HwdecompFallbackWarning(UserWarning):
    """A file was read by pyarrow's own reader; the message says why."""


def resolve_fs(source, filesystem=None, storage_options=None):
    """(fsspec filesystem, path) for a path or URL."""
    if filesystem is not None:
        return filesystem, source
    fs, path = url_to_fs(os.fspath(source), **(storage_options or {}))
    return fs, path


def fallback(plan: PiecePlan, options: Options, report: ReadReport) -> None:
    """Record (and warn about, or refuse) a piece pyarrow must read itself.

    Raises
    ------
    UnsupportedFeatureError
        ``options.on_unsupported == "raise"``.
    """
    if options.on_unsupported == "raise":
        raise UnsupportedFeatureError(
            f"{plan.unsupported}; set on_unsupported='warn' to read it with pyarrow",
            PageLocation(file=plan.piece.path),
        ) from None
    warnings.warn(
        f"dask_hwdecomp: {plan.piece.path!r} is read by pyarrow's own reader: {plan.unsupported}",
        HwdecompFallbackWarning,
        stacklevel=3,
    )
    report.fallbacks.append((plan.piece.path, plan.unsupported))


def read_table(
    source,
    columns=None,
    row_groups=None,
    filters=None,
    *,
    filesystem: fsspec.AbstractFileSystem | None = None,
    storage_options: dict | None = None,
    report: ReadReport | None = None,
    use_threads: bool = True,
    **options,
) -> pa.Table:
    """Read one Parquet file into a :class:`pyarrow.Table`, decompressing on the chosen backend.

    The result equals ``pyarrow.parquet.read_table(source, columns=columns,
    filters=filters)`` (or ``ParquetFile(source).read_row_groups(row_groups,
    columns)`` when ``row_groups`` is given).

    Parameters
    ----------
    source : str or os.PathLike
        A local path or an fsspec URL.
    columns : list of str, optional
        Columns to read (a name selects a nested field and all below it).
    row_groups : list of int, optional
        Row groups to read, in this order.
    filters : list or pyarrow.compute.Expression, optional
        Row filters in pyarrow's DNF form, applied row-wise.
    filesystem : fsspec.AbstractFileSystem, optional
    storage_options : dict, optional
        For ``fsspec`` when ``filesystem`` is not given.
    report : ReadReport, optional
        Filled with what the read did.
    use_threads : bool
        Let pyarrow decode with several threads.
    **options
        Any field of :class:`~dask_hwdecomp.options.Options`.

    Returns
    -------
    pyarrow.Table

    Raises
    ------
    CorruptMetadataError, CorruptPageError, ChecksumError, LimitExceededError
        Broken input, naming file, row group, column and page.
    CorruptDataError
        pyarrow refused the decompressed data (its error is chained).
    BackendUnavailableError
        The requested backend cannot run here.
    UnsupportedFeatureError
        A file this path cannot serve, with ``on_unsupported="raise"``.
    """
    opts = current_options(**options)
    fs, path = resolve_fs(source, filesystem, storage_options)
    local = ReadReport()
    router = Router(opts)
    with local.stage("scan"):
        plan = plan_piece(fs, Piece(path, None if row_groups is None else tuple(row_groups)), _needed(columns, filters))
    try:
        if plan.unsupported is not None:
            fallback(plan, opts, local)
            with local.stage("decode"):
                if row_groups is not None:
                    with fs.open(path, "rb") as f:
                        return pq.ParquetFile(f).read_row_groups(row_groups, columns=columns, use_threads=use_threads)
                return pq.read_table(path, filesystem=fs, columns=columns, filters=filters, use_threads=use_threads)
        batches = list(iter_batches(fs, [plan], router, opts, local))
        assert len(batches) == 1
        with batches[0] as batch:
            image = batch.images[0]
            with local.stage("decode"), decode_errors(path, image.row_groups, image.buffer):
                reader = pa.BufferReader(image.buffer)
                if row_groups is not None:
                    return pq.ParquetFile(reader).read_row_groups(
                        list(range(len(image.row_groups))), columns=columns, use_threads=use_threads
                    )
                return pq.read_table(reader, columns=columns, filters=filters, use_threads=use_threads)
    finally:
        publish(local)
        if report is not None:
            report += local


def _needed(columns, filters):
    """Column names to decompress: the requested ones plus those filtered on."""
    if columns is None:
        return None
    names = set(columns)
    if filters is not None:
        names |= filter_columns(filters)
    return sorted(names)


def filter_columns(filters) -> set:
    """Names a filter refers to (DNF list, or a pyarrow expression)."""
    if isinstance(filters, pa.compute.Expression):
        expr = str(filters)
        # pyarrow prints field refs as bare names; cheap and safe: take all
        # identifiers, unknown ones select nothing.
        import re

        return set(re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", expr))
    out = set()
    stack = [filters]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple) and len(item) == 3 and isinstance(item[0], str):
            out.add(item[0])
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return out
