"""Reads pyarrow does itself, and what their report can honestly say.

Three kinds of read go to pyarrow's own reader: a file the page path cannot
serve (an encrypted one, see :func:`~dask_hwdecomp.readpath.sequence.fallback`),
every read of ``backend="auto"`` on a machine where no GPU backend can run
(:func:`~dask_hwdecomp.routing.router.pyarrow_reads`): there the CPU
pool would only repeat pyarrow's decompression, plus a page scan and an
uncompressed copy of the data; and, with a GPU, a file for which ``auto``
found pyarrow's own read the faster way
(:func:`~dask_hwdecomp.routing.ways.choose`; :func:`account_chosen_read`,
from the plan the choice was made on).

pyarrow does not say what it decompressed; the file's footer does. Its
column chunk sizes are reported per codec (UNCOMPRESSED included, so that
every file pyarrow read shows; pages are not counted), and each column
counts one chunk per row group read and those row groups' rows, as the page
path counts them. ``read_table`` takes the footer pyarrow's read holds
already; ``dd.read_parquet``, where dask's read keeps it to itself, reads a
local file's footer again (a few kilobytes, from the page cache). For a
file on another filesystem that would cost a request, so there the report
says the codecs and sizes are unknown, and counts the columns' Arrow chunks
and the rows returned instead.
"""

from __future__ import annotations

from collections.abc import Collection

import pyarrow as pa
import pyarrow.parquet as pq

from ..format.structs import CODEC_NAMES, ColumnMetaData, RowGroup
from ..names import chunk_path
from ..report import PYARROW_CHOSEN, PYARROW_NO_GPU, UNKNOWN_CODEC, ReadReport
from .decode_report import account_pyarrow_columns
from .fetch import is_local
from .plan import PiecePlan

__all__ = ["account_pyarrow_read", "account_chosen_read", "local_footer", "parquet_codec"]

# pyarrow's names for the codecs whose Parquet names differ: it calls
# LZ4_RAW "LZ4", and has no name for Parquet's (Hadoop-framed) LZ4, the only
# codec of a file it reads that it calls "UNKNOWN".
_PARQUET_CODEC = {"LZ4": "LZ4_RAW", "UNKNOWN": "LZ4"}


def parquet_codec(pyarrow_name: str) -> str:
    """The Parquet name (``parquet.thrift``'s, as the page path reports it) of a codec pyarrow's metadata names."""
    return _PARQUET_CODEC.get(pyarrow_name, pyarrow_name)


def local_footer(fs, path: str) -> pq.FileMetaData | None:
    """The footer of ``path``, read again where that is cheap (a local file); None elsewhere."""
    if not is_local(fs):
        return None
    return pq.read_metadata(fs._strip_protocol(path))


def account_pyarrow_read(report: ReadReport, table: pa.Table, footer: pq.FileMetaData | None, row_groups,
                         columns, why: str, skip: Collection[str] = ()) -> None:
    """Add one file that pyarrow read to ``report``: its sizes under ``PYARROW_NO_GPU``, its columns.

    Parameters
    ----------
    report : ReadReport
    table : pyarrow.Table
        What the read returned.
    footer : pyarrow.parquet.FileMetaData or None
        The file's footer; None where it was not read (the codec is then
        ``UNKNOWN_CODEC``, and the columns count Arrow chunks and the rows
        returned).
    row_groups : list of int, [None] or None
        The row groups read (None or ``[None]``: all).
    columns : list of str or None
        Column names read (None: all); a name selects its leaves.
    why : str
        Why pyarrow, not the GPU, decoded the columns.
    skip : collection of str
        Columns not read from the file (hive partition keys).
    """
    report.files += 1
    if footer is None:
        report.add_jobs(PYARROW_NO_GPU, UNKNOWN_CODEC, 0, 0, 0, 0, 0.0)
        account_pyarrow_columns(report, table, row_groups, why, skip)
        return
    rgs = range(footer.num_row_groups) if row_groups is None or list(row_groups) == [None] else row_groups
    names = None if columns is None else [c for c in columns if isinstance(c, str)]
    rows = 0
    for rg in rgs:
        group = footer.row_group(rg)
        rows += group.num_rows
        for i in range(group.num_columns):
            chunk = group.column(i)
            leaf = chunk_path(chunk)
            if names is not None and not any(leaf == n or leaf.startswith(n + ".") for n in names):
                continue
            report.add_jobs(PYARROW_NO_GPU, parquet_codec(chunk.compression), 0, 0, chunk.total_compressed_size,
                            chunk.total_uncompressed_size, 0.0)
    account_pyarrow_columns(report, table, list(rgs), why, skip, rows=rows)


def account_chosen_read(report: ReadReport, plan: PiecePlan, table: pa.Table, skip: Collection[str] = ()) -> None:
    """Add one piece that ``auto`` chose to read with pyarrow (``plan.pyarrow_way``) to ``report``.

    Its planned column chunks' sizes go under ``PYARROW_CHOSEN`` by codec
    (from the footer the plan read; pages are not counted), and the
    columns of ``table`` as decoded by pyarrow, for the choice's reason.
    ``skip``: columns not read from the file (hive partition keys).
    """
    assert plan.footer is not None and plan.pyarrow_way is not None
    report.files += 1
    for chunk in plan.chunks:
        rng = chunk.rng
        claimed = rng.meta.get_value(ColumnMetaData.total_uncompressed_size, 0)
        report.add_jobs(PYARROW_CHOSEN, CODEC_NAMES.get(rng.codec, str(rng.codec)), 0, 0, rng.length,
                        claimed if isinstance(claimed, int) else 0, 0.0)
    rows = sum(plan.footer.row_groups[rg].get_value(RowGroup.num_rows, 0) for rg in plan.row_groups)
    account_pyarrow_columns(report, table, plan.row_groups, plan.pyarrow_way, skip, rows=rows)
