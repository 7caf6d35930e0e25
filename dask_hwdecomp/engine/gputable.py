"""The table dask's engine reads for a piece whose columns are partly decoded (on the GPU).

dask's ``ArrowDatasetEngine._read_table`` reads a piece in one of two ways:
a *path* read (``ParquetFile.read_row_groups`` with the pandas index
columns) or, when rows must be filtered or hive partition keys discovered, a
*fragment* read (``ParquetFileFragment.to_table`` with the dataset schema and
the filter); then it appends the hive partition columns. :func:`image_table`
takes the same branches over a piece's uncompressed image, with the two
reads replaced by :mod:`dask_hwdecomp.readpath.assemble`'s, which use the
decoded columns and let pyarrow decode the rest.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pa_ds
from dask.dataframe.io.parquet.arrow import (
    _filters_to_expression,
    _frag_subset,
    _need_filtering,
    _process_kwargs,
)

from ..readpath.assemble import ImageTable, fragment_to_table, read_row_groups
from ..readpath.filters import filter_columns
from .imagefs import ImageFileSystem

__all__ = ["image_table", "ImageTable"]


def image_table(
    path: str,
    fs: ImageFileSystem,
    row_groups: list,
    columns,
    schema,
    filters,
    partitions,
    partition_keys,
    decoded: Mapping[str, pa.ChunkedArray],
    **kwargs,
) -> ImageTable:
    """What ``ArrowDatasetEngine._read_table(path, fs, row_groups, ...)`` returns, with ``decoded`` columns.

    dask's branches, reproduced: the fragment read where filters touch
    columns that are not partition keys or partition information is
    missing (partition keys then taken from the fragment's partition
    expression, ordered as ``partitions``), else the path read; then the
    hive partition columns appended as dask appends them. ``columns`` is
    changed in place where dask's changes it (an index placeholder ``None``).

    Parameters
    ----------
    path : str
        The piece's path as dask names it.
    fs : ImageFileSystem
        Serves the piece's image at ``path``.
    row_groups : list
        The image's row groups (``[None]``: all).
    decoded : mapping of str to pyarrow.ChunkedArray
        Columns already decoded for exactly those row groups.
    columns, schema, filters, partitions, partition_keys, **kwargs
        As dask passes them to ``_read_table``.
    """
    frag = None
    partitioning = kwargs.get("dataset", {}).get("partitioning", None)
    missing_partitioning_info = (partitions and partition_keys is None) or (
        partitioning and not isinstance(partitioning, (str, list))
    )
    if missing_partitioning_info or _need_filtering(filters, partition_keys):
        ds = pa_ds.dataset(path, filesystem=fs, **_process_kwargs(**kwargs.get("dataset", {})))
        frags = list(ds.get_fragments())
        if len(frags) != 1:
            raise ValueError(f"{path}: the image's dataset holds {len(frags)} fragments, not 1")
        frag = _frag_subset(frags[0], row_groups) if row_groups != [None] else frags[0]
        raw_keys = pa_ds.get_partition_keys(frag.partition_expression)
        partition_keys = [(hive_part.name, raw_keys[hive_part.name]) for hive_part in partitions]
    if frag is not None:
        cols = []
        for name in columns:
            if name is None:
                if "__index_level_0__" in schema.names:
                    columns.append("__index_level_0__")  # dask's in-place change, kept
            else:
                cols.append(name)
        result = fragment_to_table(
            frag, schema, cols, _filters_to_expression(filters) if filters else None, decoded,
            filter_columns(filters) if filters else (),
        )
    else:
        read = dict(kwargs.get("read", {}))
        # File-opening and pre-buffering options change nothing for a buffer in memory.
        read.pop("open_file_options", None)
        read.pop("pre_buffer", None)
        result = read_row_groups(fs.image, row_groups, columns, decoded, **read)
    table = result.table
    if partitions and isinstance(partitions, list):
        keys_dict = {k: v for (k, v) in partition_keys}
        for partition in partitions:
            if partition.name not in table.schema.names:
                cat = keys_dict.get(partition.name, None)
                if not len(partition.keys):
                    arr = pa.array(np.full(len(table), cat))
                else:
                    cat_ind = np.full(len(table), partition.keys.get_loc(cat), dtype="i4")
                    arr = pa.DictionaryArray.from_arrays(cat_ind, pa.array(partition.keys))
                table = table.append_column(partition.name, arr)
    return ImageTable(table, result.used)
