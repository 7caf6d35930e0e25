"""Tables from an uncompressed image with some columns already decoded (on the GPU).

:func:`read_row_groups` and :func:`fragment_to_table` return what
``ParquetFile.read_row_groups`` and ``ParquetFileFragment.to_table`` return
for an image, when some of its columns come already decoded: pyarrow reads
only the other columns from the image, and the two are put together in the
order, schema and metadata that pyarrow gives the whole read. The schema is
taken from the same read over no row groups, so field metadata, pandas
metadata and index columns are pyarrow's own.

A decoded column is used only where it stands for a whole top-level column
of the read with the type pyarrow would give it; any other column (a nested
field path, a type the dataset schema casts, a duplicate name) is read by
pyarrow as before.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple

import pyarrow as pa
import pyarrow.dataset as pa_ds
import pyarrow.parquet as pq

__all__ = ["read_row_groups", "fragment_to_table", "ImageTable"]

logger = logging.getLogger("dask_hwdecomp")


class ImageTable(NamedTuple):
    """A piece's table and which of its columns came decoded.

    Attributes
    ----------
    table : pyarrow.Table
        What dask's ``_read_table`` returns for the piece.
    used : tuple of str
        The decoded columns the read took (those the table holds, and
        those only a row filter needed); pyarrow decoded the others.
    """

    table: pa.Table
    used: tuple[str, ...]


def _unique(names) -> list:
    return list(dict.fromkeys(names))


def _of_length(decoded: Mapping[str, pa.ChunkedArray], names, rows: int) -> set:
    """The decoded columns of ``names`` that hold ``rows`` rows; pyarrow decodes the others.

    A column chunk whose pages hold other than its row group's rows (a
    corrupt footer or page header) decodes to another length on the GPU;
    pyarrow, reading it from the image, gives the read pyarrow's own
    result or error, and the report counts it as decoded but not usable.
    """
    wrong = {n: len(decoded[n]) for n in names if len(decoded[n]) != rows}
    for name, got in wrong.items():
        logger.warning("GPU-decoded column %r holds %d rows, the row groups read hold %d: pyarrow decodes it",
                       name, got, rows)
    return {n for n in names if n not in wrong}


def read_row_groups(
    buffer: pa.Buffer,
    row_groups: Sequence,
    columns,
    decoded: Mapping[str, pa.ChunkedArray],
    *,
    use_pandas_metadata: bool = True,
    use_threads: bool = False,
    **read_kwargs,
) -> ImageTable:
    """``ParquetFile(buffer).read_row_groups(row_groups, columns, ...)`` with ``decoded`` columns.

    Parameters
    ----------
    buffer : pyarrow.Buffer
        An uncompressed Parquet file (a piece's image).
    row_groups : sequence of int, or ``[None]``
        Row groups of ``buffer`` to read; ``[None]``: all (``ParquetFile.read``).
    columns : list of str or None
    decoded : mapping of str to pyarrow.ChunkedArray
        Columns already decoded for exactly those row groups, by name.
    use_pandas_metadata, use_threads, **read_kwargs
        As for ``ParquetFile.read_row_groups``.

    A decoded column whose length is not the row groups' row count is
    decoded by pyarrow instead (see :func:`_of_length`).
    """
    pf = pq.ParquetFile(pa.BufferReader(buffer))
    rgs = list(range(pf.metadata.num_row_groups)) if list(row_groups) == [None] else list(row_groups)
    # The read over no row groups: pyarrow's own schema, order and metadata.
    empty = pf.read_row_groups([], columns=columns, use_threads=use_threads,
                               use_pandas_metadata=use_pandas_metadata, **read_kwargs)
    names = empty.schema.names
    rows = sum(pf.metadata.row_group(i).num_rows for i in rgs)
    used = _of_length(decoded, _usable(decoded, empty.schema, columns), rows)
    if not used:
        return ImageTable(
            pf.read_row_groups(rgs, columns=columns, use_threads=use_threads,
                               use_pandas_metadata=use_pandas_metadata, **read_kwargs),
            (),
        )
    wanted = list(pf.schema_arrow.names) if columns is None else list(columns)
    if use_pandas_metadata:
        # The index columns pyarrow would add, named explicitly so that a
        # decoded one is not read again.
        wanted += [n for n in names if n not in wanted]
    rest = pf.read_row_groups(rgs, columns=[c for c in _unique(wanted) if c not in used],
                              use_threads=use_threads, use_pandas_metadata=False, **read_kwargs)
    arrays = [decoded[f.name] if f.name in used else rest.column(f.name) for f in empty.schema]
    return ImageTable(pa.Table.from_arrays(arrays, schema=empty.schema), tuple(n for n in names if n in used))


def _usable(decoded: Mapping[str, pa.ChunkedArray], schema: pa.Schema, columns) -> set:
    """Decoded columns that stand for a whole top-level field of ``schema`` of the same type."""
    names = schema.names
    if not decoded or len(set(names)) != len(names):
        return set()
    if columns is not None and any(
        isinstance(c, str) and c not in names and c.split(".", 1)[0] in names for c in columns
    ):
        return set()  # a nested field path: pyarrow's projection, not a whole column
    return {n for n in names if n in decoded and decoded[n].type == schema.field(n).type}


def fragment_to_table(
    fragment: pa_ds.ParquetFileFragment,
    schema: pa.Schema,
    columns,
    filter,
    decoded: Mapping[str, pa.ChunkedArray],
    filtered_on: Collection[str] = (),
    *,
    use_threads: bool = False,
) -> ImageTable:
    """``fragment.to_table(schema=schema, columns=columns, filter=filter)`` with ``decoded`` columns.

    pyarrow reads the other columns the projection and the filter need
    (partition columns and columns missing from the file included, as the
    fragment gives them); the filter then runs over the whole in-memory
    table with pyarrow's own expression evaluation. ``filtered_on`` names
    the columns ``filter`` refers to, as the image was planned with them
    (a column the image does not hold reads as no rows).

    A decoded column whose length is not the fragment's row count is
    decoded by pyarrow instead (see :func:`_of_length`).
    """
    empty = fragment.subset(row_group_ids=[]).to_table(
        schema=schema, columns=columns, filter=filter, use_threads=use_threads
    )
    physical = set(fragment.physical_schema.names)
    # The fields the read gives: the dataset's, else the file's.
    fields = fragment.physical_schema if schema is None else schema
    projected = list(fields.names) if columns is None else list(columns)
    needed = _unique(projected + ([n for n in fields.names if n in filtered_on] if filter is not None else []))
    used = {n for n in _usable(decoded, fields, needed) if n in physical and n in needed}
    if not used or any(c not in fields.names for c in needed):
        return ImageTable(fragment.to_table(schema=schema, columns=columns, filter=filter, use_threads=use_threads), ())
    rest = fragment.to_table(schema=schema, columns=[n for n in needed if n not in used], use_threads=use_threads)
    fitting = _of_length(decoded, used, rest.num_rows)
    if fitting != used:
        return fragment_to_table(fragment, schema, columns, filter, {n: decoded[n] for n in fitting}, filtered_on,
                                 use_threads=use_threads)
    whole = rest
    for name in needed:
        if name in used:
            whole = whole.append_column(fields.field(name), decoded[name])
    out = pa_ds.dataset(whole).to_table(columns=projected, filter=filter, use_threads=use_threads)
    return ImageTable(_as_schema(out, empty.schema), tuple(n for n in needed if n in used))


def _as_schema(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table``'s columns under ``schema``, keeping the row count of a table without columns."""
    if schema.names:
        return pa.Table.from_arrays(table.columns, schema=schema)
    # A table of no columns built from none has no rows; this one keeps them.
    holder = pa.table({"rows": pa.nulls(table.num_rows)}, metadata=schema.metadata)
    return holder.drop_columns(["rows"])
