"""Decompressing a *batch*: pieces of one partition, fetched and decompressed together.

A partition's pieces are cut into batches of at most ``batch_bytes`` (their
footers' uncompressed sizes, :mod:`dask_hwdecomp.budget`).
:func:`decompress_batch` runs one batch step by step, each step a function
of its own, handing named records to the next:

1. :func:`~dask_hwdecomp.readpath.fetch.plan_fetch`: the reads, and where each
   column chunk lands in one host buffer (a :class:`FetchPlan`);
2. :func:`~dask_hwdecomp.readpath.fetch.fetch_into`: the reads;
3. :func:`scan_and_lay_out`: the pages walked and every image laid out in one
   destination buffer, with the jobs that fill it (a
   :class:`~dask_hwdecomp.format.fastlayout.BatchLayout`);
4. :func:`allocate_images`: the destination buffer, and
   :func:`build_images`: one :class:`Image` per piece over it;
5. where the GPU service decodes: the headers and footers written and the
   decode planned before decompressing (:func:`_plan_before_decompressing`),
   its chunks' pages left on the device;
6. the router: every job, one ``decompress`` per backend;
7. ``BatchLayout.fill``: headers, stored bytes and footers around the outputs;
8. :func:`decode_columns`: the column chunks the GPU decodes, into each
   image's ``decoded`` (the GPU decoder's seam; pyarrow decodes the rest
   from the image); not where the GPU service was lost under the batch's
   decompression (the router kept the CPU's output): pyarrow decodes it
   all rather than wait for a fresh service.

The :class:`DecompressedBatch` owns both host buffers and frees them on
``close``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

from ..budget import split_by_budget
from ..errors import BackendUnavailableError, LimitExceededError, PageLocation
from ..format.fastlayout import BatchLayout, FileSpec, lay_out_batch, load_kernels, reference_layout
from ..options import Options
from ..report import ReadReport
from ..routing.router import Router
from .fetch import FetchPlan, fetch_into, plan_fetch
from .image import Image
from .plan import PiecePlan

__all__ = ["Image", "DecompressedBatch", "iter_batches", "decompress_batch", "scan_and_lay_out",
           "allocate_images", "build_images", "decode_columns", "cpu_decode_reason", "ColumnDecoder",
           "use_column_decoder", "DECODE_CPU", "NO_GPU_BACKEND", "NO_GPU_DECODER", "FALLBACK"]

_ALIGN = 64

# The compiled scan and layout (False: the Python reference path, for tests
# comparing the two).
FAST_SCAN = True


# Why pyarrow decodes every column of a batch (the report's wording).
DECODE_CPU = "decode='cpu'"
NO_GPU_BACKEND = "no GPU backend in use"
NO_GPU_DECODER = "no GPU decoder installed"
FALLBACK = "file read by pyarrow's own reader"

# Fills the images' ``decoded`` (and ``why_not_gpu``) for a batch the GPU
# decodes, timing its work into the report's ``gpu_decode`` stage.
ColumnDecoder = Callable[[list[Image], Options, ReadReport], None]
_column_decoder: ColumnDecoder | None = None


@contextlib.contextmanager
def use_column_decoder(decoder: ColumnDecoder | None, *, always: bool = False) -> Iterator[None]:
    """Install ``decoder`` as the GPU decoder of this process inside the block.

    Parameters
    ----------
    decoder : callable or None
        ``decoder(images, options, report)`` fills each image's ``decoded``.
    always : bool
        Call it for every batch, whatever ``decode`` and the backends say: for
        tests of the table building on a machine without a GPU, with a
        decoder that takes pyarrow's columns.
    """
    global _column_decoder, _always
    saved = _column_decoder, _always
    _column_decoder, _always = decoder, always
    try:
        yield
    finally:
        _column_decoder, _always = saved


_always = False


def cpu_decode_reason(options: Options, router: Router) -> str:
    """Why pyarrow decodes all of a batch routed by ``router``; "" when the GPU decodes.

    Raises
    ------
    BackendUnavailableError
        ``decode="gpu"`` and no GPU decoder is installed (the router itself
        raises where no GPU backend can run).
    """
    if options.decode == "cpu":
        return DECODE_CPU
    if not router.gpu_backends:
        return NO_GPU_BACKEND
    if _column_decoder is None and not _in_service(router):
        if options.decode == "gpu":
            raise BackendUnavailableError("decode='gpu' was requested but no GPU decoder is installed")
        return NO_GPU_DECODER
    return ""


def _in_service(router: Router) -> bool:
    """Whether the batch's GPU backend runs in the GPU service, which hosts the GPU decoder."""
    from .gpu_columns import decoder_of

    return decoder_of(router) is not None


def decode_columns(images: list[Image], router: Router, options: Options, report: ReadReport,
                   dst: memoryview | None = None, kept=None, planned=None) -> None:
    """Decode on the GPU the column chunks it supports, into each image's ``decoded``.

    Where the GPU decodes nothing, each image's ``cpu_reason`` says why.
    ``kept``: the batch's pages the GPU service kept on the device
    (``ServiceClient.keeping()``, opened by :func:`decompress_batch`);
    ``planned``: the decode plan made before decompressing, if any.
    """
    why = "" if _always and _column_decoder is not None else cpu_decode_reason(options, router)
    if why:
        for image in images:
            image.cpu_reason = why
        return
    with report.stage("gpu_decode"):
        if _column_decoder is not None:
            _column_decoder(images, options, report)
            return
        from .gpu_columns import decode_on_gpu, decoder_of

        backend = decoder_of(router)
        if backend is None or dst is None:
            raise BackendUnavailableError("the GPU decoder needs a GPU backend in the GPU service")
        decode_on_gpu(images, dst, backend, options, report, kept, planned)


class DecompressedBatch:
    """Images of one batch; valid until :meth:`close`.

    Parameters
    ----------
    images : list of Image
    buffers : contextlib.ExitStack
        Frees the host buffers the images lie in.
    """

    def __init__(self, images: list[Image], buffers: contextlib.ExitStack):
        self.images = images
        self._buffers = buffers

    def close(self) -> None:
        self.images = []
        self._buffers.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def iter_batches(fs, plans: list[PiecePlan], router: Router, options: Options,
                 report: ReadReport) -> Iterator[DecompressedBatch]:
    """Decompress ``plans`` in batches within ``options.batch_bytes``, in order.

    Raises
    ------
    BackendUnavailableError
        ``decode="gpu"`` with no GPU decoder, before anything is read.
    """
    cpu_decode_reason(options, router)
    for batch in split_by_budget(plans, _estimated_bytes, options.batch_bytes):
        yield decompress_batch(fs, batch, router, options, report)


def _estimated_bytes(plan: PiecePlan) -> int:
    return plan.estimated_bytes


def decompress_batch(fs, plans: list[PiecePlan], router: Router, options: Options,
                     report: ReadReport) -> DecompressedBatch:
    """Fetch, scan, lay out and decompress ``plans`` as one batch.

    Raises
    ------
    HwdecompError
        Any corrupt metadata or page, naming where.
    """
    backend = router.primary
    buffers = contextlib.ExitStack()  # the batch's host buffers: freed here on failure, else by the batch
    try:
        with report.stage("io"):
            fetch: FetchPlan = plan_fetch(plans)
            src_buf = backend.host_buffer(max(fetch.nbytes, 1))
            buffers.callback(src_buf.close)
            fetch_into(fs, fetch.ranges, src_buf.view)
        src = src_buf.view
        if FAST_SCAN:
            report.stages["kernel_load"] += load_kernels()  # once per process, not this batch's scan
        with report.stage("scan"):
            layout = scan_and_lay_out(src, fetch.files, options)
        dst_buf = allocate_images(backend, layout, plans, options)
        buffers.callback(dst_buf.close)
        dst = dst_buf.view
        images = build_images(plans, layout, dst)
        # The pages the GPU service decompresses stay on the device for the
        # decode, until the batch is decoded (only where it decodes on the GPU).
        with _keeping(router, options) as kept:
            planned = None
            if kept is not None:
                planned = _plan_before_decompressing(images, layout, src, dst, kept, report)
            with report.stage("decompress"):
                lost = router.run(layout.jobs, src, dst, report)
            with report.stage("scan"):
                layout.fill(dst, src)
            restore = None
            if kept is not None and kept.host_lacks:
                restore = _Restore(layout.jobs, kept.device_only, src, dst)
            if lost:
                # The GPU service was lost under this batch and restarts (seconds): pyarrow decodes it,
                # from pages all on the host.
                if restore is not None:
                    restore()
                why = (cpu_decode_reason(options, router)
                       or f"the GPU service was lost under this batch's decompression ({lost[0]})")
                for image in images:
                    image.cpu_reason = why
            else:
                for image in images:
                    image.restore = restore
                decode_columns(images, router, options, report, dst, kept, planned)
    except BaseException:
        buffers.close()
        raise
    report.files += len(plans)
    return DecompressedBatch(images, buffers)


def _keeping(router: Router, options: Options):
    """Around a batch's decompression and decode: its pages kept on the device where the GPU service decodes it.

    Yields the :class:`~dask_hwdecomp.service.keeping.KeptRuns` of
    ``ServiceClient.keeping()``, or None where nothing is kept.
    """
    if _column_decoder is not None or cpu_decode_reason(options, router):
        return contextlib.nullcontext(None)
    from .gpu_columns import decoder_of

    backend = decoder_of(router)
    return contextlib.nullcontext(None) if backend is None else backend.keeping()


def _plan_before_decompressing(images: list[Image], layout: BatchLayout, src: memoryview, dst: memoryview,
                               kept, report: ReadReport):
    """The batch's GPU decode plan, made from its page headers before the pages are decompressed.

    The images' headers, stored pages and footers are written first (the
    plan reads nothing else; they are written again after decompressing,
    since a GPU backend's copies back cross the bytes between outputs).
    The chunks the plan decodes become ``kept.device_only``: where the
    GPU service keeps their pages on the device, it does not copy them
    back to the host.
    """
    from .gpu_columns import plan_decode

    with report.stage("scan"):
        layout.fill(dst, src)
    planned = plan_decode(images, dst)
    kept.device_only = merged_ranges(planned.ranges[:, 0], planned.ranges[:, 1]) if len(planned.ranges) else \
        np.zeros((0, 2), np.int64)
    return planned


def merged_ranges(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Byte ranges ``[start, start + size)`` as sorted, disjoint (start, end) int64 rows (touching ones joined)."""
    starts = np.asarray(starts, np.int64)
    ends = starts + np.asarray(sizes, np.int64)
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    if not len(starts):
        return np.zeros((0, 2), np.int64)
    reach = np.maximum.accumulate(ends)
    new = np.r_[True, starts[1:] > reach[:-1]]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(starts) - 1]
    return np.stack([starts[first], reach[last]], axis=1)


class _Restore:
    """Decompresses on the host, once, the jobs whose outputs lie in ranges only the GPU service received.

    pyarrow then reads the whole image (where the GPU decode failed, or
    the assembly could not use a decoded column).
    """

    def __init__(self, jobs, device_only: np.ndarray, src: memoryview, dst: memoryview) -> None:
        self._jobs, self._only, self._src, self._dst = jobs, device_only, src, dst
        self._lock = threading.Lock()
        self._done = False

    def __call__(self) -> None:
        with self._lock:
            if self._done:
                return
            from ..decompress.cpu import decompress_one
            from ..jobs import as_table

            table = as_table(self._jobs)
            rows = table.rows
            lo, hi = rows["dst_offset"], rows["dst_offset"] + rows["dst_size"]
            at = np.searchsorted(self._only[:, 1], lo, side="right")  # the first range ending after lo
            inside = np.zeros(len(rows), bool)
            ok = at < len(self._only)
            inside[ok] = self._only[at[ok], 0] < hi[ok]
            for i in np.flatnonzero(inside).tolist():
                decompress_one(table.job(i), self._src, self._dst)
            self._done = True


def scan_and_lay_out(src, files: list[FileSpec], options: Options) -> BatchLayout:
    """Walk every page of the fetched chunks and lay out every image of the batch.

    Page CRC-32s (``verify_checksums``) go with the jobs, to be checked
    where each page is decoded (on the GPU for GPU backends).

    Raises
    ------
    CorruptMetadataError, CorruptPageError, ChecksumError, LimitExceededError, UnsupportedFeatureError
    """
    lay_out = lay_out_batch if FAST_SCAN else reference_layout
    return lay_out(src, files, max_page_bytes=options.max_page_bytes,
                   verify_checksums=options.verify_checksums, align=_ALIGN)


def allocate_images(backend, layout: BatchLayout, plans: list[PiecePlan], options: Options):
    """The host buffer the batch's images are decompressed into, from ``backend``.

    Raises
    ------
    LimitExceededError
        The images would exceed ``max_batch_bytes`` (naming the largest
        piece's file), or the buffer cannot be allocated.
    """
    if layout.size > options.max_batch_bytes:
        plan, image = max(zip(plans, layout.images), key=lambda piece: piece[1].size)  # the first largest
        raise LimitExceededError(
            f"the uncompressed image of this batch would take {layout.size} bytes "
            f"({image.size} for this file), more than max_batch_bytes "
            f"{options.max_batch_bytes} (raise the option max_batch_bytes to read it)",
            PageLocation(file=plan.piece.path),
        )
    try:
        return backend.host_buffer(max(layout.size, 1))
    except MemoryError:
        raise LimitExceededError(
            f"cannot allocate the {layout.size}-byte uncompressed image of the batch "
            f"(lower the option max_batch_bytes, now {options.max_batch_bytes}, "
            "or batch_bytes to fail earlier or read less at once)",
            PageLocation(file=plans[0].piece.path) if len(plans) == 1 else None,
        ) from None


def build_images(plans: list[PiecePlan], layout: BatchLayout, dst: memoryview) -> list[Image]:
    """One :class:`Image` per piece, over its bytes of the filled ``dst``."""
    return [
        Image(plan, pa.py_buffer(dst[image.base : image.base + image.size]), image.row_groups)
        for plan, image in zip(plans, layout.images)
    ]
