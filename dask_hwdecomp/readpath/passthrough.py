"""Reads pyarrow does itself, and what their report can honestly say.

Two kinds of read go to pyarrow's own reader: a file the page path cannot
serve (an encrypted one, see :func:`~dask_hwdecomp.readpath.reader.fallback`), and
every read of ``backend="auto"`` on a machine where no GPU backend can run
(:func:`~dask_hwdecomp.decompress.routing.pyarrow_reads`): there the CPU
pool would only repeat pyarrow's decompression, plus a page scan and an
uncompressed copy of the data.

pyarrow does not say what it decompressed. For a local file the footer is
read again (a few kilobytes, from the page cache) and its column chunk
sizes are reported per codec (UNCOMPRESSED included, so that every file
pyarrow read shows); pages are not counted. For a file on another
filesystem that would cost a request, so the report says the codecs and
sizes are unknown.
"""

from __future__ import annotations

import pyarrow.parquet as pq

from ..report import PYARROW_NO_GPU, UNKNOWN_CODEC, ReadReport
from .fetch import is_local

__all__ = ["account_footer"]


def account_footer(report: ReadReport, fs, path: str, row_groups, columns) -> None:
    """Add one file that pyarrow read to ``report`` under ``PYARROW_NO_GPU``.

    Parameters
    ----------
    report : ReadReport
    fs : fsspec.AbstractFileSystem
    path : str
    row_groups : list of int, [None] or None
        The row groups read (None or ``[None]``: all).
    columns : list of str or None
        Column names read (None: all); a name selects its leaves.
    """
    report.files += 1
    if not is_local(fs):
        report.add_jobs(PYARROW_NO_GPU, UNKNOWN_CODEC, 0, 0, 0, 0, 0.0)
        return
    md = pq.read_metadata(fs._strip_protocol(path))
    rgs = range(md.num_row_groups) if row_groups is None or list(row_groups) == [None] else row_groups
    names = None if columns is None else [c for c in columns if isinstance(c, str)]
    for rg in rgs:
        group = md.row_group(rg)
        for i in range(group.num_columns):
            chunk = group.column(i)
            leaf = chunk.path_in_schema
            if names is not None and not any(leaf == n or leaf.startswith(n + ".") for n in names):
                continue
            report.add_jobs(
                PYARROW_NO_GPU, chunk.compression, 0, 0, chunk.total_compressed_size, chunk.total_uncompressed_size, 0.0
            )
