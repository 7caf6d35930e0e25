"""``HwdecompEngine``: dask's pyarrow Parquet engine with batched decompression.

It overrides four methods of
:class:`dask.dataframe.io.parquet.arrow.ArrowDatasetEngine` (listed, with
why, in :data:`DASK_SEAMS`):

- :meth:`multi_support` is True, so dask hands all pieces of an output
  partition to one :meth:`read_partition` call;
- :meth:`_collect_dataset_info` puts the options in force at
  ``dd.read_parquet`` time into the graph;
- :meth:`read_partition` decompresses every page of those pieces in one
  batch (:mod:`dask_hwdecomp.engine.prepare`), then lets the parent build
  the pandas partition exactly as it would;
- :meth:`_read_table` calls the parent's with the filesystem replaced by an
  :class:`~dask_hwdecomp.engine.imagefs.ImageFileSystem`, which serves the
  piece's uncompressed in-memory image where dask opens the file, and the
  row groups renumbered to the image's. dask's own code then reads it, so
  columns, filters, index, categories, partitions and dtype backends behave
  as with ``engine="pyarrow"``. Where the image carries columns decoded on
  the GPU, :func:`~dask_hwdecomp.engine.gputable.image_table` returns the
  same table, pyarrow decoding only the other columns.

With ``backend="auto"`` on a machine where no GPU backend can run,
:meth:`read_partition` is the parent's, untouched: pyarrow reads and
decompresses, and the report names the backend ``pyarrow (no GPU)``.
"""

from __future__ import annotations

from typing import NamedTuple

from dask.dataframe.io.parquet.arrow import ArrowDatasetEngine

from ..options import as_option_dict, current_options, graph_options
from ..readpath.assemble import ImageTable
from ..readpath.batch import DECODE_CPU, FALLBACK, NO_GPU_BACKEND
from ..readpath.decode_report import account_pyarrow_columns
from ..readpath.filters import filter_columns
from ..readpath.passthrough import account_chosen_read, account_pyarrow_read, local_footer
from ..readpath.sequence import decode_image
from ..report import ReadReport, publish
from ..routing.router import pyarrow_reads
from . import metrics
from .gputable import image_table
from .imagefs import ImageFileSystem
from .prepare import current_choices, current_images, needed_columns, piece_key, prepared_images

__all__ = ["HwdecompEngine", "DASK_SEAMS", "DaskSeam"]


_ENGINE = "ArrowDatasetEngine"
_ARROW_MODULE = "dask.dataframe.io.parquet.arrow"


class DaskSeam(NamedTuple):
    """A name of dask's that the engine relies on.

    ``where`` is ``"ArrowDatasetEngine"`` for a classmethod of dask's
    engine, else the module of a function.
    """

    name: str
    parameters: tuple[str, ...]
    why: str
    where: str = _ENGINE


# Every name of dask's the engine uses besides the public
# dd.read_parquet arguments, with the parameters it relies on; a test
# compares them with the installed dask, so an upgrade that changes one
# fails loudly rather than reading wrongly.
DASK_SEAMS: tuple[DaskSeam, ...] = (
    DaskSeam(
        "multi_support",
        ("cls",),
        "public engine hook: True hands all pieces of an output partition to one read_partition call",
    ),
    DaskSeam(
        "read_partition",
        ("cls", "fs", "pieces", "columns", "index", "dtype_backend", "categories", "partitions", "filters",
         "schema", "kwargs"),
        "public engine hook: decompresses the partition's pieces in one batch around the parent's read",
    ),
    DaskSeam(
        "_collect_dataset_info",
        ("cls", "paths", "fs", "categories", "index", "gather_statistics", "filters", "split_row_groups",
         "blocksize", "aggregate_files", "ignore_metadata_file", "metadata_task_size", "parquet_file_extension",
         "kwargs"),
        "private: the one call that runs in the caller's context at dd.read_parquet time, where the options "
        "in force are put into the graph",
    ),
    DaskSeam(
        "_read_table",
        ("cls", "path_or_frag", "fs", "row_groups", "columns", "schema", "filters", "partitions",
         "partition_keys", "kwargs"),
        "private: called once per piece by read_partition; the override only swaps in the image's filesystem "
        "and row-group numbers (or times pyarrow's read without a GPU) and calls the parent; with columns "
        "decoded on the GPU, engine/gputable.py reproduces its branches",
    ),
    DaskSeam(
        "_need_filtering",
        ("filters", "partition_keys"),
        "private: whether _read_table reads through a fragment (row filters on non-partition columns); "
        "engine/gputable.py takes the same branch",
        where=_ARROW_MODULE,
    ),
    DaskSeam(
        "_filters_to_expression",
        ("filters", "propagate_null", "nan_is_null"),
        "private: the filter expression _read_table hands the fragment; engine/gputable.py filters with it",
        where=_ARROW_MODULE,
    ),
    DaskSeam(
        "_process_kwargs",
        ("partitioning", "kwargs"),
        "private: the dataset arguments _read_table builds the piece's fragment with",
        where=_ARROW_MODULE,
    ),
    DaskSeam(
        "_frag_subset",
        ("old_frag", "row_groups"),
        "private: the row-group subset of the fragment _read_table reads",
        where=_ARROW_MODULE,
    ),
)


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
            token = _pyarrow_report.set(_Passthrough(report, DECODE_CPU if options.decode == "cpu" else NO_GPU_BACKEND))
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
        parent = super()._read_table

        def own_read():  # pyarrow's own read of the piece, as the parent engine does it
            return parent(path_or_frag, fs, row_groups, columns, schema, filters, partitions, partition_keys, **kwargs)

        passthrough = _pyarrow_report.get()
        if passthrough is not None:
            with passthrough.report.stage("pyarrow"):
                table = own_read()
            if isinstance(path_or_frag, str):
                # dask's read keeps the footer to itself: a local one is read again.
                with passthrough.report.stage("scan"):
                    footer = local_footer(fs, path_or_frag)
                account_pyarrow_read(passthrough.report, table, footer, row_groups, _read_columns(columns, filters),
                                     passthrough.why, _partition_names(partitions))
            else:
                account_pyarrow_columns(passthrough.report, table, row_groups, passthrough.why,
                                        _partition_names(partitions))
            return table
        key = piece_key(path_or_frag, row_groups) if isinstance(path_or_frag, str) else None
        images = current_images()
        image = images.get(key) if images is not None and key is not None else None
        chosen = current_choices().get(key) if key is not None else None
        if chosen is not None:
            # auto found pyarrow's own read the faster way for this piece (it has no image).
            report = _report.get(None) or ReadReport()
            with report.stage("pyarrow"):
                table = own_read()
            account_chosen_read(report, chosen, table, _partition_names(partitions))
            return table
        if image is None:
            # Not prepared here (a fallback file, or a call from outside
            # read_partition): pyarrow reads it, as the parent does.
            table = own_read()
            fallen = _report.get(None)
            if fallen is not None:
                account_pyarrow_columns(fallen, table, row_groups, FALLBACK, _partition_names(partitions))
            return table
        # dask reads the piece from its image: ImageFileSystem serves the
        # image where dask opens the path, and the row groups are the
        # image's own (row group i of the image is image.row_groups[i]).
        local_rgs = row_groups if list(row_groups) == [None] else list(range(len(image.row_groups)))
        read = dict(kwargs.get("read", {}))
        # Precaching fetches byte ranges of a remote file; the image is in memory.
        read.pop("open_file_options", None)
        report = _report.get(None) or ReadReport()
        image_fs = ImageFileSystem(fs, path_or_frag, image.buffer)

        def decode() -> ImageTable:
            if image.decoded:
                return image_table(
                    path_or_frag, image_fs, local_rgs, columns, schema, filters, partitions, partition_keys,
                    image.decoded, **{**kwargs, "read": read},
                )
            return ImageTable(parent(path_or_frag, image_fs, local_rgs, columns, schema, filters, partitions,
                                     partition_keys, **{**kwargs, "read": read}), ())

        return decode_image(image, report, _partition_names(partitions), decode)


def _partition_names(partitions) -> set:
    """Names of the hive partition columns dask's ``partitions`` holds (list or Partitioning)."""
    if not partitions:
        return set()
    if isinstance(partitions, (list, tuple)):
        return {p.name for p in partitions}
    return set(partitions.partition_names)


def _read_columns(columns, filters):
    """The names pyarrow reads for ``columns`` (None: all) and ``filters``."""
    if columns is None:
        return None
    return [c for c in columns if c is not None] + sorted(filter_columns(filters) if filters else ())


import contextvars  # noqa: E402

# The report of the partition being read; no default, so that no shared
# report collects figures outside a read_partition.
_report: contextvars.ContextVar[ReadReport] = contextvars.ContextVar("hwdecomp_report")


class _Passthrough(NamedTuple):
    """A partition pyarrow reads itself: its report, and why pyarrow decodes it."""

    report: ReadReport
    why: str


# The partition pyarrow reads itself (no GPU), else None.
_pyarrow_report: contextvars.ContextVar[_Passthrough | None] = contextvars.ContextVar(
    "hwdecomp_pyarrow_report", default=None
)
