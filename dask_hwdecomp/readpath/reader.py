"""``read_table``: the read path without Dask."""

from __future__ import annotations

import functools
from typing import NamedTuple

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..options import Options, as_option_dict, current_options
from ..report import ReadReport, publish
from ..routing.router import pyarrow_reads
from .assemble import ImageTable, fragment_to_table, read_row_groups
from .batch import DECODE_CPU, FALLBACK, NO_GPU_BACKEND
from .decode_report import account_pyarrow_columns
from .filters import filter_columns
from .passthrough import account_chosen_read, account_pyarrow_read
from .plan import Piece
from .sequence import HwdecompFallbackWarning, batches, decode_image, plan_pieces
from .sources import Source, resolve_source

__all__ = ["read_table", "HwdecompFallbackWarning", "filter_columns"]


def read_table(
    source,
    columns=None,
    row_groups=None,
    filters=None,
    *,
    filesystem=None,
    storage_options: dict | None = None,
    partitioning="hive",
    schema: pa.Schema | None = None,
    ignore_prefixes: list | None = None,
    report: ReadReport | None = None,
    use_threads: bool = True,
    hwdecomp_options: Options | dict | None = None,
    **options,
) -> pa.Table:
    """Read Parquet into a :class:`pyarrow.Table`, decompressing on the chosen backend.

    The result equals ``pyarrow.parquet.read_table(source, columns=columns,
    filters=filters, filesystem=filesystem, partitioning=partitioning,
    schema=schema, ignore_prefixes=ignore_prefixes)`` (or, for one file,
    ``ParquetFile(source).read_row_groups(row_groups, columns)`` when
    ``row_groups`` is given). pyarrow finds the files (hive partitions,
    ignored prefixes, the dataset schema); each file's pages go through
    the chosen backend.
    With ``backend="auto"`` on a machine where no GPU backend can run,
    pyarrow reads and decompresses every file itself, its exceptions pass
    through unchanged, and the report names the backend ``pyarrow (no
    GPU)``; ``backend="cpu"`` takes the project's page path (checksums,
    errors naming the page), and so does ``auto`` there with
    ``verify_checksums=True`` or a ``max_page_bytes`` or
    ``max_batch_bytes`` other than the default (pyarrow's read enforces
    neither).

    Parameters
    ----------
    source : str, os.PathLike, list, file-like, pyarrow.NativeFile or pyarrow.Buffer
        A file path or URL, a directory, a glob (expanded where the
        filesystem is an fsspec one, as local paths are), a list of paths,
        an open binary file, a ``NativeFile`` or a ``Buffer``.
    columns : list of str, optional
        Columns to read (a name selects a nested field and all below it;
        partition fields are columns too).
    row_groups : list of int, optional
        Row groups to read, in this order (one file only).
    filters : list or pyarrow.compute.Expression, optional
        Row filters in pyarrow's DNF form, applied row-wise (and to prune
        partitions).
    filesystem : pyarrow.fs.FileSystem or fsspec.AbstractFileSystem, optional
        Where the paths live; without it a URL's protocol picks an fsspec
        filesystem, and plain paths are local.
    storage_options : dict, optional
        For ``fsspec`` when ``filesystem`` is not given.
    partitioning, schema, ignore_prefixes
        As for :func:`pyarrow.parquet.read_table`.
    report : ReadReport, optional
        Filled with what the read did.
    use_threads : bool
        Let pyarrow decode with several threads.
    hwdecomp_options : Options or dict, optional
        Options for this read, as ``dd.read_parquet`` takes them.
    **options
        Any field of :class:`~dask_hwdecomp.options.Options`; wins over
        ``hwdecomp_options``.

    Returns
    -------
    pyarrow.Table

    Raises
    ------
    TypeError
        ``source`` is of a kind this function does not take (the message
        says which it takes).
    ValueError
        ``row_groups`` with a source of several files.
    FileNotFoundError
        A path or glob that names nothing.
    CorruptMetadataError, CorruptPageError, ChecksumError, LimitExceededError
        Broken input, naming file, row group, column and page.
    CorruptDataError
        pyarrow refused the decompressed data (its error is chained).
    BackendUnavailableError
        The requested backend cannot run here.
    UnsupportedFeatureError
        A file this path cannot serve, with ``on_unsupported="raise"``.
    """
    opts = current_options(**{**as_option_dict(hwdecomp_options), **options})
    src = resolve_source(
        source,
        filesystem,
        storage_options,
        partitioning=partitioning,
        schema=schema,
        filters=filters,
        ignore_prefixes=ignore_prefixes,
    )
    if row_groups is not None and len(src.files) != 1:
        raise ValueError(
            f"row_groups selects row groups of one file; this source holds {len(src.files)} files"
        )
    local = ReadReport()
    rgs = None if row_groups is None else tuple(row_groups)
    if pyarrow_reads(opts):
        # No GPU backend here: pyarrow decompresses as fast as the CPU pool
        # would, without the page scan and the uncompressed copy.
        try:
            with local.stage("pyarrow"):
                reads = [_pyarrow_read(f.fragment, src, columns, rgs, use_threads) for f in src.files]
            why = DECODE_CPU if opts.decode == "cpu" else NO_GPU_BACKEND
            for f, read in zip(src.files, reads):
                account_pyarrow_read(local, read.table, read.footer, rgs, _needed(columns, filters), why,
                                     _partition_fields(f.fragment))
        finally:
            publish(local)
            if report is not None:
                report += local
        parts = [read.table for read in reads]
        return _concat(parts) if parts else _empty(src, columns)
    tables: dict[int, pa.Table] = {}
    try:
        plans = plan_pieces(src.fs, [Piece(f.path, rgs) for f in src.files], _needed(columns, filters), opts, local)
        for i, (f, plan) in enumerate(zip(src.files, plans)):
            if plan.unsupported is not None:
                with local.stage("decode"):
                    tables[i] = _decode(f.fragment, src, columns, rgs, use_threads)
                account_pyarrow_columns(local, tables[i], rgs, FALLBACK, _partition_fields(f.fragment))
            elif plan.pyarrow_way is not None:
                with local.stage("pyarrow"):
                    tables[i] = _decode(f.fragment, src, columns, rgs, use_threads)
                account_chosen_read(local, plan, tables[i], _partition_fields(f.fragment))
        position = {id(plan): i for i, plan in enumerate(plans)}
        filtered_on = filter_columns(filters) if filters is not None else ()
        for batch in batches(src.fs, plans, opts, local):
            with batch:
                for image in batch.images:
                    i = position[id(image.plan)]
                    fragment = src.files[i].fragment
                    as_image = fragment.format.make_fragment(
                        pa.BufferReader(image.buffer), partition_expression=fragment.partition_expression
                    )
                    picked = None if rgs is None else tuple(range(len(image.row_groups)))
                    decode = functools.partial(_decode_image, image, as_image, src, columns, picked, use_threads,
                                               filtered_on)
                    tables[i] = decode_image(image, local, _partition_fields(fragment), decode)
    finally:
        publish(local)
        if report is not None:
            report += local
    if not tables:
        return _empty(src, columns)
    return _concat([tables[i] for i in range(len(src.files))])


def _concat(parts: list[pa.Table]) -> pa.Table:
    """The files' tables as one, keeping the row count of tables without columns."""
    if len(parts) == 1:
        return parts[0]
    if parts[0].num_columns == 0:
        # pyarrow's concat_tables drops the rows of tables without columns.
        rows = sum(p.num_rows for p in parts)
        # (replace_schema_metadata drops them too: the metadata goes in first.)
        holder = pa.table({"rows": pa.nulls(rows)}, metadata=parts[0].schema.metadata)
        return holder.drop_columns(["rows"])
    return pa.concat_tables(parts)


def _decode(fragment, src: Source, columns, row_groups, use_threads: bool) -> pa.Table:
    """One file's rows as pyarrow reads them within the dataset (or its row groups)."""
    if row_groups is not None:
        with fragment.open() as f:
            return pq.ParquetFile(f).read_row_groups(list(row_groups), columns=columns, use_threads=use_threads)
    return fragment.to_table(schema=src.schema, columns=columns, filter=src.filter, use_threads=use_threads)


class _PyarrowRead(NamedTuple):
    """One file read by pyarrow's own reader, and the footer that read holds."""

    table: pa.Table
    footer: pq.FileMetaData


def _pyarrow_read(fragment, src: Source, columns, row_groups, use_threads: bool) -> _PyarrowRead:
    """:func:`_decode`, with the footer pyarrow read for it (not read a second time)."""
    if row_groups is not None:
        with fragment.open() as f:
            file = pq.ParquetFile(f)
            return _PyarrowRead(file.read_row_groups(list(row_groups), columns=columns, use_threads=use_threads),
                                file.metadata)
    table = fragment.to_table(schema=src.schema, columns=columns, filter=src.filter, use_threads=use_threads)
    return _PyarrowRead(table, fragment.metadata)  # the fragment keeps the footer its scan read


def _decode_image(image, fragment, src: Source, columns, row_groups, use_threads: bool,
                  filtered_on) -> ImageTable:
    """:func:`_decode` of an image, with the columns it carries decoded already.

    ``filtered_on``: the columns the filters name, as the image was planned.
    """
    if not image.decoded:
        return ImageTable(_decode(fragment, src, columns, row_groups, use_threads), ())
    if row_groups is not None:
        return read_row_groups(image.buffer, list(row_groups), columns, image.decoded,
                               use_pandas_metadata=False, use_threads=use_threads)
    return fragment_to_table(fragment, src.schema, columns, src.filter, image.decoded, filtered_on,
                             use_threads=use_threads)


def _partition_fields(fragment) -> set:
    """Names of the columns the fragment's partition expression gives (not read from the file)."""
    import pyarrow.dataset as ds

    return set(ds.get_partition_keys(fragment.partition_expression))


def _empty(src: Source, columns) -> pa.Table:
    """What pyarrow returns for a dataset without files: no rows, the projected schema."""
    import pyarrow.dataset as ds

    empty = ds.FileSystemDataset([], schema=src.schema, format=ds.ParquetFileFormat(), filesystem=pafs.LocalFileSystem())
    return empty.to_table(columns=columns, filter=src.filter)


def _needed(columns, filters):
    """Column names to decompress: the requested ones plus those filtered on."""
    if columns is None:
        return None
    names = set(columns)
    if filters is not None:
        names |= filter_columns(filters)
    return sorted(names)
