"""Counting, per column, where a piece's columns were decoded into Arrow."""

from __future__ import annotations

from collections.abc import Collection

import pyarrow as pa

from ..format.structs import RowGroup
from ..names import field_names
from ..report import ReadReport
from .image import Image

__all__ = ["account_image_columns", "account_pyarrow_columns", "UNUSABLE"]

# A column the GPU decoded that the read could not take as it is (a nested
# field path projected, a dataset schema that casts it): pyarrow read it.
UNUSABLE = "decoded on the GPU but not usable by this read (projection or dataset type)"


def _rows(image: Image) -> int:
    """Rows of the image's row groups (before any row filter)."""
    footer = image.plan.footer
    if footer is None:
        return 0
    return sum(footer.row_groups[rg].get_value(RowGroup.num_rows, 0) for rg in image.row_groups)


def account_image_columns(report: ReadReport, image: Image, table: pa.Table, used: Collection[str],
                          skip: Collection[str] = ()) -> None:
    """Count the columns of ``image`` a read took decoded (``used``), and those of ``table`` pyarrow decoded.

    ``skip`` names columns not read from the file (hive partition keys).
    """
    chunks = len(image.row_groups)
    rows = _rows(image)
    for name in dict.fromkeys(used):
        column = image.decoded[name]
        report.add_decode(name, "gpu", column.num_chunks, len(column), column.nbytes)
    for name, column in _columns(table, skip):
        if name not in used:
            why = UNUSABLE if name in image.decoded else image.reason(name)
            report.add_decode(name, "pyarrow", chunks, rows, column.nbytes, why)


def account_pyarrow_columns(report: ReadReport, table: pa.Table, row_groups, why: str,
                            skip: Collection[str] = (), rows: int | None = None) -> None:
    """Count each column of ``table``, read by pyarrow's own reader, as decoded by pyarrow for ``why``.

    ``row_groups``: those read (their count is the chunks), or None or
    ``[None]`` for a whole file (the column's Arrow chunks are counted, an
    estimate: pyarrow may return a file's row groups as one chunk).
    ``rows``: those row groups' rows from the footer (None: the table's,
    after any row filter).
    """
    known = row_groups is not None and list(row_groups) != [None]
    for name, column in _columns(table, skip):
        chunks = len(row_groups) if known else column.num_chunks
        report.add_decode(name, "pyarrow", chunks, table.num_rows if rows is None else rows, column.nbytes, why)


def _columns(table: pa.Table, skip: Collection[str]):
    """``(name, column)`` of the table's columns, once per name, without ``skip``.

    Names are as pyarrow prints them (:func:`~dask_hwdecomp.names.field_name`):
    a name that is not UTF-8 is counted, not refused.
    """
    names = field_names(table.schema)
    # pyarrow's column accessors decode the name as well: the columns come
    # from the table under these names (a new schema, the same arrays).
    named = table.rename_columns(names)
    seen = set(skip)
    for i, name in enumerate(names):
        if name not in seen:
            seen.add(name)
            yield name, named.column(i)
