"""``HwdecompEngine``: dask's pyarrow Parquet engine with batched decompression.

It overrides three methods of
:class:`dask.dataframe.io.parquet.arrow.ArrowDatasetEngine`:

- :meth:`multi_support` is True, so dask hands all pieces of an output
  partition to one :meth:`read_partition` call;
- :meth:`read_partition` decompresses every page of those pieces in one
  batch (:mod:`dask_hwdecomp.engine.prepare`), then lets the parent build
  the pandas partition exactly as it would;
- :meth:`_read_table` reads a piece from its uncompressed in-memory image
  through the same pyarrow calls the parent makes on the file, so columns,
  filters, index, categories, partitions and dtype backends behave as with
  ``engine="pyarrow"``.

With ``backend="auto"`` on a machine where no GPU backend can run,
:meth:`read_partition` is the parent's, untouched: pyarrow reads and
decompresses, and the report names the backend ``pyarrow (no GPU)``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pa_ds
import pyarrow.parquet as pq
from dask.dataframe.io.parquet.arrow import (
    ArrowDatasetEngine,
    _filters_to_expression,
    _need_filtering,
    _process_kwargs,
    _wrapped_fs,
)

from ..decompress.routing import pyarrow_reads
from ..io.decode import decode_errors
from ..io.passthrough import account_footer
from ..io.reader import filter_columns
from ..options import as_option_dict, current_options, graph_options
from ..report import ReadReport, publish
from . import metrics
from .prepare import current_images, needed_columns, piece_key, prepared_images

__all__ = ["HwdecompEngine"]


class HwdecompEngine(ArrowDatasetEngine):
    """Pass as ``dd.read_parquet(path, engine=HwdecompEngine)``.

    Options go in ``hwdecomp_options=`` (a dict, or a
    :class:`dask_hwdecomp.options.Options`); a ``with
    dask_hwdecomp.options(...)`` block around the ``dd.read_parquet`` call
    applies too, wherever the graph computes. Every other argument is
    ``dd.read_parquet``'s. ``filesystem="arrow"`` is not supported (dask
    refuses it with custom engines); fsspec filesystems are.
    """

    @classmethod
    def multi_support(cls):
        return True

    @classmethod
    def _collect_dataset_info(cls, paths, fs, categories, index, gather_statistics, filters, split_row_groups,
                              blocksize, aggregate_files, ignore_metadata_file, metadata_task_size,
                              parquet_file_extension, kwargs):
        # Runs when dd.read_parquet is called, in the caller's context: the
        # options in force there go into the graph with the call's own.
        kwargs = dict(kwargs)
        kwargs["hwdecomp_options"] = graph_options(kwargs.get("hwdecomp_options"))
        return super()._collect_dataset_info(
            paths, fs, categories, index, gather_statistics, filters, split_row_groups, blocksize,
            aggregate_files, ignore_metadata_file, metadata_task_size, parquet_file_extension, kwargs,
        )

    @classmethod
    def read_partition(
        cls,
        fs,
        pieces,
        columns,
        index,
        dtype_backend=None,
        categories=(),
        partitions=(),
        filters=None,
        schema=None,
        **kwargs,
    ):
        """Read one output partition; see ``ArrowDatasetEngine.read_partition``.

        Raises
        ------
        HwdecompError
            Broken input, naming file, row group, column and page.
        BackendUnavailableError
            The requested backend cannot run here.
        """
        options = current_options(**as_option_dict(kwargs.pop("hwdecomp_options", None)))
        report = ReadReport()

        def parent_read():
            return super(HwdecompEngine, cls).read_partition(
                fs,
                pieces,
                columns,
                index,
                dtype_backend=dtype_backend,
                categories=categories,
                partitions=partitions,
                filters=filters,
                schema=schema,
                **kwargs,
            )

        if pyarrow_reads(options):
            # No GPU backend here: the parent reads as engine="pyarrow" does;
            # _read_table times each piece and reads its footer figures.
            token = _pyarrow_report.set(report)
            try:
                return parent_read()
            finally:
                _pyarrow_report.reset(token)
                publish(report)
                metrics.digest(report)
        plist = pieces if isinstance(pieces, list) else [pieces]
        cols = None if columns is None else list(columns)
        if cols is not None and not isinstance(partitions, (list, tuple)) and partitions:
            cols = cols + list(partitions.partition_names)
        wanted = needed_columns(cols, index, filters, schema)
        try:
            with prepared_images(fs, plist, wanted, options, report):
                token = _report.set(report)
                try:
                    return parent_read()
                finally:
                    _report.reset(token)
        finally:
            publish(report)
            metrics.digest(report)

    @classmethod
    def _read_table(
        cls,
        path_or_frag,
        fs,
        row_groups,
        columns,
        schema,
        filters,
        partitions,
        partition_keys,
        **kwargs,
    ):
        passthrough = _pyarrow_report.get()
        if passthrough is not None:
            with passthrough.stage("pyarrow"):
                table = super()._read_table(
                    path_or_frag, fs, row_groups, columns, schema, filters, partitions, partition_keys, **kwargs
                )
            if isinstance(path_or_frag, str):
                with passthrough.stage("scan"):
                    account_footer(passthrough, fs, path_or_frag, row_groups, _read_columns(columns, filters))
            return table
        images = current_images()
        image = None
        if images is not None and isinstance(path_or_frag, str):
            image = images.get(piece_key(path_or_frag, row_groups))
        if image is None:
            # Not prepared here (a fallback file, or a call from outside
            # read_partition): pyarrow reads it, as the parent does.
            return super()._read_table(
                path_or_frag, fs, row_groups, columns, schema, filters, partitions, partition_keys, **kwargs
            )
        report = _report.get(None) or ReadReport()
        with report.stage("decode"), decode_errors(image.plan.piece.path, image.row_groups, image.buffer):
            return cls._read_image(
                image, path_or_frag, fs, row_groups, columns, schema, filters, partitions, partition_keys, **kwargs
            )

    @classmethod
    def _read_image(
        cls, image, path, fs, row_groups, columns, schema, filters, partitions, partition_keys, **kwargs
    ):
        # Mirrors ArrowDatasetEngine._read_table, with the file replaced by
        # its uncompressed image (row group i of the image is row_groups[i]).
        local_rgs = list(range(len(image.row_groups)))
        whole = row_groups == [None]
        partitioning = kwargs.get("dataset", {}).get("partitioning", None)
        missing_partitioning_info = (partitions and partition_keys is None) or (
            partitioning and not isinstance(partitioning, (str, list))
        )
        if missing_partitioning_info or _need_filtering(filters, partition_keys):
            ds = pa_ds.dataset(path, filesystem=_wrapped_fs(fs), **_process_kwargs(**kwargs.get("dataset", {})))
            frags = list(ds.get_fragments())
            assert len(frags) == 1
            real = frags[0]
            frag = real.format.make_fragment(
                image.buffer,
                partition_expression=real.partition_expression,
                row_groups=None if whole else local_rgs,
            )
            raw_keys = pa_ds._get_partition_keys(real.partition_expression)
            partition_keys = [(p.name, raw_keys[p.name]) for p in partitions]
            cols = []
            for name in columns:
                if name is None:
                    if "__index_level_0__" in schema.names:
                        columns.append("__index_level_0__")
                else:
                    cols.append(name)
            table = frag.to_table(
                use_threads=False,
                schema=schema,
                columns=cols,
                filter=_filters_to_expression(filters) if filters else None,
            )
        else:
            read_kwargs = dict(kwargs.get("read", {}))
            read_kwargs.pop("open_file_options", None)
            read_kwargs.pop("pre_buffer", None)
            pf = pq.ParquetFile(pa.BufferReader(image.buffer))
            if whole:
                table = pf.read(columns=columns, use_threads=False, use_pandas_metadata=True, **read_kwargs)
            else:
                table = pf.read_row_groups(
                    local_rgs, columns=columns, use_threads=False, use_pandas_metadata=True, **read_kwargs
                )
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
        return table


def _read_columns(columns, filters):
    """The names pyarrow reads for ``columns`` (None: all) and ``filters``."""
    if columns is None:
        return None
    return [c for c in columns if c is not None] + sorted(filter_columns(filters) if filters else ())


import contextvars  # noqa: E402

# The report of the partition being read; no default, so that no shared
# report collects figures outside a read_partition.
_report: contextvars.ContextVar[ReadReport] = contextvars.ContextVar("hwdecomp_report")
# The report of a partition pyarrow reads itself (no GPU), else None.
_pyarrow_report: contextvars.ContextVar[ReadReport | None] = contextvars.ContextVar(
    "hwdecomp_pyarrow_report", default=None
)
