"""Decompressing the pages of many pieces as one batch.

:func:`decompress_pieces` fetches the chunks of a group of planned pieces
into one host buffer, walks their pages, lays out the uncompressed image of
every piece in one destination buffer, hands all jobs to the router in one
call, and yields a :class:`DecompressedBatch` whose images pyarrow decodes.
The batch owns its host buffers and frees them on ``close``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from ..decompress.routing import Router
from ..errors import LimitExceededError, PageLocation
from ..format.fastlayout import ChunkSpec, FileSpec, ImagePlan, lay_out_batch, reference_layout
from ..format.footer import Footer
from ..options import Options
from ..report import ReadReport
from .fetch import Range, coalesce, fetch_into
from .plan import PiecePlan

__all__ = ["Image", "DecompressedBatch", "decompress_pieces", "group_by_budget"]

_ALIGN = 64

# The compiled scan and layout (False: the Python reference path, for tests
# comparing the two).
FAST_SCAN = True


@dataclass
class Image:
    """The uncompressed in-memory copy of one piece.

    ``buffer`` holds an uncompressed Parquet file with the piece's row
    groups in order: row group ``i`` of the image is ``row_groups[i]`` of
    the original file.
    """

    plan: PiecePlan
    buffer: pa.Buffer
    row_groups: list[int]


class DecompressedBatch:
    """Images of one batch; valid until :meth:`close`."""

    def __init__(self, images: list[Image], buffers: list):
        self.images = images
        self._buffers = buffers

    def close(self) -> None:
        self.images = []
        buffers, self._buffers = self._buffers, []
        for b in buffers:
            b.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def group_by_budget(plans: list[PiecePlan], budget: int) -> list[list[PiecePlan]]:
    """Split plans into groups whose estimated output fits ``budget`` bytes."""
    groups: list[list[PiecePlan]] = [[]]
    size = 0
    for plan in plans:
        est = plan.estimated_bytes
        if groups[-1] and size + est > budget:
            groups.append([])
            size = 0
        groups[-1].append(plan)
        size += est
    return [g for g in groups if g]


def decompress_pieces(
    fs, plans: list[PiecePlan], router: Router, options: Options, report: ReadReport
) -> DecompressedBatch:
    """Fetch, scan, lay out and decompress ``plans`` as one batch.

    Raises
    ------
    HwdecompError
        Any corrupt metadata or page, naming where.
    """
    backend = router.primary
    # 1. fetch every chunk, coalesced per file, into one host buffer
    with report.stage("io"):
        ranges: list[Range] = []
        chunk_src: dict[tuple[int, int], int] = {}
        pos = 0
        for i, plan in enumerate(plans):
            spans = coalesce([(c.rng.start, c.rng.length) for c in plan.chunks if c.rng.length])
            mine = [Range(plan.piece.path, start, length) for start, length in spans]
            for r in mine:
                r.dst = pos
                pos += r.length
            ranges.extend(mine)
            for j, chunk in enumerate(plan.chunks):
                rng = chunk.rng
                chunk_src[(i, j)] = 0  # empty chunks read nothing
                for r in mine:
                    if rng.length and r.start <= rng.start < r.start + r.length:
                        chunk_src[(i, j)] = r.dst + (rng.start - r.start)
                        break
        src_buf = backend.host_buffer(max(pos, 1))
        buffers = [src_buf]
        try:
            fetch_into(fs, ranges, src_buf.view)
        except BaseException:
            src_buf.close()
            raise
    try:
        src = src_buf.view
        # 2. walk pages, lay out every image
        with report.stage("scan"):
            files = [
                FileSpec(_footer(plan), list(plan.row_groups),
                         [ChunkSpec(c.row_group, c.column, c.rng, c.where, chunk_src[(i, j)])
                          for j, c in enumerate(plan.chunks)])
                for i, plan in enumerate(plans)
            ]
            lay_out = lay_out_batch if FAST_SCAN else reference_layout
            # Page CRCs are checked where the page is decoded (on the GPU for GPU batches).
            layout = lay_out(src, files, max_page_bytes=options.max_page_bytes,
                             verify_checksums=options.verify_checksums, align=_ALIGN)
            base = layout.size
            jobs = layout.jobs
        # 3. one batched call per backend
        _check_batch_size(base, layout.images, plans, options)
        try:
            dst_buf = backend.host_buffer(max(base, 1))
        except MemoryError:
            raise LimitExceededError(
                f"cannot allocate the {base}-byte uncompressed image of the batch "
                f"(lower the option max_batch_bytes, now {options.max_batch_bytes}, "
                "or batch_bytes to fail earlier or read less at once)",
                PageLocation(file=plans[0].piece.path) if len(plans) == 1 else None,
            ) from None
        buffers.append(dst_buf)
        dst = dst_buf.view
        with report.stage("decompress"):
            router.run(jobs, src, dst, report)
        with report.stage("scan"):
            layout.fill(dst, src)
        images = [
            Image(plan, pa.py_buffer(dst[image.base : image.base + image.size]), image.row_groups)
            for plan, image in zip(plans, layout.images)
        ]
        report.files += len(plans)
        return DecompressedBatch(images, buffers)
    except BaseException:
        for b in buffers:
            b.close()
        raise


def _footer(plan: PiecePlan) -> Footer:
    if plan.footer is None:  # the planner gives pyarrow the pieces without one
        raise ValueError(f"{plan.piece.path}: a piece without a footer has no pages to decompress")
    return plan.footer


def _check_batch_size(total: int, layouts: list[ImagePlan], plans: list[PiecePlan], options: Options) -> None:
    """Refuse a batch whose declared uncompressed size exceeds ``max_batch_bytes``.

    Raises
    ------
    LimitExceededError
        Naming the largest file of the batch and the option to raise.
    """
    if total <= options.max_batch_bytes:
        return
    largest = max(range(len(layouts)), key=lambda i: layouts[i].size)
    raise LimitExceededError(
        f"the uncompressed image of this batch would take {total} bytes "
        f"({layouts[largest].size} for this file), more than max_batch_bytes "
        f"{options.max_batch_bytes} (raise the option max_batch_bytes to read it)",
        PageLocation(file=plans[largest].piece.path),
    )


def iter_batches(fs, plans, router, options, report) -> Iterator[DecompressedBatch]:
    """Decompress ``plans`` in groups within ``options.batch_bytes``."""
    for group in group_by_budget(plans, options.batch_bytes):
        yield decompress_pieces(fs, group, router, options, report)
