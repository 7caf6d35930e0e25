"""Scanning and laying out a whole batch with the compiled kernels.

:func:`lay_out_batch` turns the fetched column chunks of a batch into the
uncompressed images' plan (:class:`BatchLayout`): the jobs to decompress,
and a :meth:`BatchLayout.fill` that writes headers, stored bytes and
footers around their outputs. The per-page work runs compiled, in
:func:`~dask_hwdecomp.format.scan_kernels.scan_chunks` and
:func:`~dask_hwdecomp.format.place_kernels.place` (two calls per batch,
GIL released); Python runs per chunk (footer entries) and per file
(footers); the jobs are a :class:`~dask_hwdecomp.jobs.JobTable` built in
array operations, no ``Job`` record per page.

The Python path (:func:`~dask_hwdecomp.format.pages.scan_chunk` and
:func:`~dask_hwdecomp.format.layout.build_layout`) is the reference:
:func:`reference_layout` runs it for the whole batch whenever a kernel
reports an error, so errors keep exactly their type, message and order
(file, row group, column, page); a chunk whose headers a byte copy could not
re-encode as the reference does (unusual but valid Thrift) is scanned by
the reference alone.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..errors import HwdecompError, PageLocation
from ..jobs import ALGOS, JOB_DTYPE, Job, JobTable
from ..rounding import round_up
from .codecs import plan_body
from .footer import Footer
from .layout import (
    ChunkPages,
    ChunkPlacement,
    FileLayout,
    GroupPlacement,
    build_layout,
    image_footer,
    page_header,
)
from .pages import DECODED_PAGE_TYPES, ChunkRange, scan_chunk
from .structs import RowGroup
from .thrift import Limits

__all__ = ["ChunkSpec", "FileSpec", "ImagePlan", "BatchLayout", "lay_out_batch", "reference_layout", "load_kernels"]

# Indexed by the kernels' algorithm codes (codec_kernels.A_*).
_ALGO_CODE = {a: i for i, a in enumerate(ALGOS)}


@dataclass(frozen=True)
class ChunkSpec:
    """A fetched column chunk: ``src[src_base : src_base + rng.length]``."""

    row_group: int
    column: int
    rng: ChunkRange
    where: PageLocation
    src_base: int


@dataclass(frozen=True)
class FileSpec:
    """One image to build: the file's footer, the row groups in image order, its chunks."""

    footer: Footer
    row_groups: list[int]
    chunks: list[ChunkSpec]


@dataclass(frozen=True)
class ImagePlan:
    """Where an image lies in the batch destination, and its row groups (original ids)."""

    base: int
    size: int
    row_groups: list[int]


@dataclass
class BatchLayout:
    """The images of a batch, the jobs that fill them, and how to write the rest.

    Attributes
    ----------
    images : list of ImagePlan
    jobs : JobTable or list of Job
        A table from the compiled kernels, records from the reference.
    size : int
        Bytes of destination buffer the batch needs.
    fast : bool
        Whether the compiled kernels laid it out (False: the reference).
    writer : callable
        ``writer(dst, src)`` writes everything but the jobs' outputs.
    """

    images: list[ImagePlan]
    jobs: JobTable | list[Job]
    size: int
    fast: bool
    writer: Callable[[memoryview, memoryview], None] = field(repr=False)

    def fill(self, dst, src) -> None:
        """Write headers, stored bytes and footers of every image, as
        :meth:`FileLayout.fill <dask_hwdecomp.format.layout.FileLayout.fill>`
        does for one (``dst``, ``src``: the batch's buffers); call after the jobs ran."""
        self.writer(dst, src)


class _ScanTables(NamedTuple):
    """What :func:`~dask_hwdecomp.format.scan_kernels.scan_chunks` returns (rows by its ``C_``, ``P_``, ``J_`` columns)."""

    chunks: np.ndarray  # per chunk: status, failing page, first page, end page
    pages: np.ndarray
    jobs: np.ndarray
    blob: np.ndarray  # the rewritten page headers


class _PlaceTables(NamedTuple):
    """What :func:`~dask_hwdecomp.format.place_kernels.place` returns."""

    slots: np.ndarray  # per slot (a chunk in image order): start, size, data and dictionary page offsets
    file_end: np.ndarray  # per file: the end of its last chunk, where its footer goes
    writes: np.ndarray
    copies: np.ndarray
    jobs: np.ndarray  # the jobs placed, with their page and slot


def _num_rows(footer: Footer, rg: int) -> int:
    """The row group's declared rows: a chunk's pages must hold at least as many values."""
    return footer.row_groups[rg].get_value(RowGroup.num_rows, 0)


def reference_layout(src, files: list[FileSpec], *, max_page_bytes: int, verify_checksums: bool,
                     align: int = 64) -> BatchLayout:
    """Scan and lay out every file with the Python reference path.

    With ``verify_checksums`` the page CRC-32s go with the jobs
    (``Job.page_crc``) to the backend that decodes each page; those of
    pages nothing decodes are checked here.

    Raises
    ------
    CorruptMetadataError, CorruptPageError, ChecksumError, LimitExceededError, UnsupportedFeatureError
    """
    layouts: list[FileLayout] = []
    base = 0
    for f in files:
        scanned: dict[int, list[ChunkPages]] = {}
        for ch in f.chunks:
            pages = scan_chunk(src[ch.src_base : ch.src_base + ch.rng.length], ch.rng, ch.where,
                               max_page_bytes=max_page_bytes, keep_crc=verify_checksums,
                               num_rows=_num_rows(f.footer, ch.row_group))
            scanned.setdefault(ch.row_group, []).append(ChunkPages(ch.column, ch.rng, pages, ch.src_base, ch.where))
        layout = build_layout(f.footer, [(rg, scanned.get(rg, [])) for rg in f.row_groups], src, base)
        layouts.append(layout)
        base = round_up(base + layout.size, align)

    def fill(dst, src):
        for layout in layouts:
            layout.fill(dst, src)

    images = [ImagePlan(lay.base, lay.size, lay.row_groups) for lay in layouts]
    return BatchLayout(images, [j for lay in layouts for j in lay.jobs], base, False, fill)


class _Refer(Exception):
    """The batch goes to the reference path."""


def lay_out_batch(src, files: list[FileSpec], *, max_page_bytes: int, verify_checksums: bool,
                  align: int = 64) -> BatchLayout:
    """Scan and lay out every file of a batch with the compiled kernels.

    Same parameters, result and errors as :func:`reference_layout`.
    """
    try:
        return _fast(src, files, max_page_bytes, verify_checksums, align)
    except _Refer:
        return reference_layout(src, files, max_page_bytes=max_page_bytes,
                                verify_checksums=verify_checksums, align=align)


def _as_array(buf) -> np.ndarray:
    return np.frombuffer(buf, dtype=np.uint8)


_kernels_loaded = False
_load_lock = threading.Lock()


def load_kernels() -> float:
    """Load the compiled kernels for the argument types :func:`lay_out_batch` passes; once per process.

    numba compiles a kernel, or loads it from its cache, when the module is
    imported (those with signatures) and on its first call with new
    argument types: most of a second on a process's first read, which is
    no part of scanning that read's pages. An empty batch laid out and
    filled calls every kernel with those types.

    Returns
    -------
    float
        The seconds it took: 0.0 once loaded, the wait for the load when
        another thread was loading.
    """
    global _kernels_loaded
    if _kernels_loaded:
        return 0.0
    t0 = time.perf_counter()
    with _load_lock:
        if not _kernels_loaded:
            src = memoryview(bytearray(1))  # writable bytes, as the batch's host buffers are
            _fast(src, [], 1, False, 64).fill(memoryview(bytearray(1)), src)
            _kernels_loaded = True
    return time.perf_counter() - t0


def _fast(src, files, max_page_bytes, verify_checksums, align) -> BatchLayout:
    # numba loads on first use, not with the package
    from .place_kernels import S_DATA, S_DICT, S_SIZE, S_START, place
    from .place_kernels import fill as fill_images
    from .scan_kernels import C_STATUS, scan_chunks
    from .thrift_kernels import ERROR, FALLBACK

    chunks = [ch for f in files for ch in f.chunks]
    rows = np.array([_num_rows(f.footer, ch.row_group) for f in files for ch in f.chunks], np.int64)
    src_np = _as_array(src)
    bases = np.array([c.src_base for c in chunks], np.int64)
    lengths = np.array([c.rng.length for c in chunks], np.int64)
    codecs = np.array([c.rng.codec for c in chunks], np.int64)
    num_values = np.array([c.rng.num_values for c in chunks], np.int64)
    scanned = _ScanTables(*scan_chunks(
        src_np, bases, lengths, codecs, num_values, rows, max_page_bytes, Limits.max_string, Limits.max_depth
    ))
    status = scanned.chunks[:, C_STATUS]
    if (status == ERROR).any():
        raise _Refer
    if (status == FALLBACK).any():
        scanned = _reference_chunks(src, chunks, rows, scanned, max_page_bytes)
    cres, pages = scanned.chunks, scanned.pages

    # slots: the chunks in image order (row groups as asked, columns by id)
    index = {}
    k = 0
    for fi, f in enumerate(files):
        for ch in f.chunks:
            index[(fi, ch.row_group, ch.column)] = k
            k += 1
    slot_chunk: list[int] = []
    slot_file: list[int] = []
    file_groups: list[list[tuple[int, list[tuple[int, int]]]]] = []  # per file: (rg, [(slot, column)])
    for fi, f in enumerate(files):
        groups = []
        by_rg: dict[int, list[int]] = {}
        for ch in f.chunks:
            by_rg.setdefault(ch.row_group, []).append(ch.column)
        for rg in f.row_groups:
            members = []
            for col in sorted(by_rg.get(rg, ())):
                members.append((len(slot_chunk), col))
                slot_chunk.append(index[(fi, rg, col)])
                slot_file.append(fi)
            groups.append((rg, members))
        file_groups.append(groups)
    slot_chunk_a = np.array(slot_chunk, np.int64)
    slot_file_a = np.array(slot_file, np.int64)
    if verify_checksums:
        _check_crcs(src, pages, cres, bases, set(slot_chunk))
    placed = _PlaceTables(*place(pages, scanned.jobs, slot_chunk_a, slot_file_a, cres, bases, codecs, len(files)))

    # footers, per file and chunk
    tails = []
    images = []
    base = 0
    slot_rows = placed.slots.tolist()
    for fi, f in enumerate(files):
        placed_groups: list[GroupPlacement] = []
        pos = 4
        for rg, members in file_groups[fi]:
            rg_start = pos
            placed_cols: dict[int, ChunkPlacement] = {}
            for s, col in members:
                row = slot_rows[s]
                start, size, dict_off = row[S_START], row[S_SIZE], row[S_DICT]
                placed_cols[col] = ChunkPlacement(start, size, row[S_DATA], None if dict_off < 0 else dict_off)
                pos = start + size
            placed_groups.append(GroupPlacement(rg, placed_cols, rg_start, pos))
        end = int(placed.file_end[fi])
        tail = image_footer(f.footer, placed_groups)
        tails.append((base + end, tail))
        images.append(ImagePlan(base, end + len(tail), list(f.row_groups)))
        base = round_up(base + end + len(tail), align)
    file_base = np.array([im.base for im in images], np.int64)

    # jobs
    job_list = _jobs(placed.jobs, pages, file_base, slot_file_a, slot_chunk_a, cres, bases, chunks, verify_checksums)

    def fill(dst, src_view):
        dst_np = _as_array(dst)
        fill_images(dst_np, _as_array(src_view), scanned.blob, placed.writes, placed.copies, file_base)
        for im in images:
            dst[im.base : im.base + 4] = b"PAR1"
        for off, tail in tails:
            dst[off : off + len(tail)] = tail

    return BatchLayout(images, job_list, base, True, fill)


class _JobLocations:
    """The page of each job of a fast layout, made when asked (errors name one page, reports none)."""

    __slots__ = ("where_of", "chunk", "ordinal")

    def __init__(self, where_of: list, chunk: np.ndarray, ordinal: np.ndarray):
        self.where_of, self.chunk, self.ordinal = where_of, chunk, ordinal

    def __len__(self) -> int:
        return len(self.chunk)

    def __getitem__(self, i: int) -> PageLocation:
        w = self.where_of[int(self.chunk[i])]
        return PageLocation(w.file, w.row_group, w.column, int(self.ordinal[i]))


def _jobs(placed, pages, file_base, slot_file, slot_chunk, cres, bases, chunks, verify_checksums) -> JobTable:
    """The job table of the placed jobs (array operations; no record per job).

    With ``verify_checksums`` the first job of a page carries the page's
    CRC-32 (``Job.page_crc``), as :func:`~dask_hwdecomp.format.layout.build_layout` gives it.
    """
    # numba loads on first use, not with the package
    from .codec_kernels import J_ALGO, J_CRC, J_DST, J_DSTSIZE, J_PRE, J_SRC, J_SRCSIZE
    from .place_kernels import PJ_PAGE, PJ_SLOT
    from .scan_kernels import C_PLO, P_BSTART, P_CRC, P_CSIZE, P_HASCRC

    n = len(placed)
    rows = np.zeros(n, dtype=JOB_DTYPE)
    if not n:
        return JobTable(rows, codecs=np.zeros(0, np.int64), locations=_JobLocations([], rows["algo"], rows["algo"]))
    slot = placed[:, PJ_SLOT]
    page = placed[:, PJ_PAGE]
    chunk = slot_chunk[slot]
    rows["algo"] = placed[:, J_ALGO]
    rows["src_offset"] = placed[:, J_SRC]
    rows["src_size"] = placed[:, J_SRCSIZE]
    rows["dst_offset"] = placed[:, J_DST] + file_base[slot_file[slot]]
    rows["dst_size"] = placed[:, J_DSTSIZE]
    rows["crc32"] = np.where(placed[:, J_CRC] < 0, -1, placed[:, J_CRC])
    rows["preamble"] = placed[:, J_PRE]
    rows["page_crc"] = -1
    # the jobs of one page (placed once per slot) are consecutive
    first = np.r_[True, (slot[1:] != slot[:-1]) | (page[1:] != page[:-1])]
    if verify_checksums:
        checked = np.flatnonzero(first & (pages[page, P_HASCRC] != 0))
        p, c = page[checked], chunk[checked]
        rows["page_crc_offset"][checked] = bases[c] + pages[p, P_BSTART]
        rows["page_crc_size"][checked] = pages[p, P_CSIZE]
        rows["page_crc"][checked] = pages[p, P_CRC]
    codecs = np.array([ch.rng.codec for ch in chunks], dtype=np.int64)[chunk]
    ordinal = page - cres[chunk, C_PLO]
    locations = _JobLocations([ch.where for ch in chunks], chunk, ordinal)
    return JobTable(rows, codecs=codecs, locations=locations, pages=np.cumsum(first) - 1)


def _check_crcs(src, pages, cres, bases, placed_chunks) -> None:
    """Page CRC-32s of the pages nothing decodes, as the reference checks them at layout.

    Those of pages with jobs go with the jobs. Any mismatch goes to the
    reference (which raises).
    """
    # numba loads on first use, not with the package
    from .scan_kernels import (
        C_PHI,
        C_PLO,
        P_BSTART,
        P_COMPRESSED,
        P_CRC,
        P_CSIZE,
        P_HASCRC,
        P_JHI,
        P_JLO,
        P_TYPE,
    )

    for c in sorted(placed_chunks):
        base = int(bases[c])
        for p in range(int(cres[c, C_PLO]), int(cres[c, C_PHI])):
            if not pages[p, P_HASCRC] or int(pages[p, P_TYPE]) not in DECODED_PAGE_TYPES:
                continue
            if pages[p, P_COMPRESSED] and pages[p, P_JHI] > pages[p, P_JLO]:
                continue
            start = base + int(pages[p, P_BSTART])
            if zlib.crc32(src[start : start + int(pages[p, P_CSIZE])]) != int(pages[p, P_CRC]):
                raise _Refer


def _reference_chunks(src, chunks, rows, scanned: _ScanTables, max_page_bytes) -> _ScanTables:
    """Scan the chunks the kernel handed back with the reference; append them to the tables.

    Raises
    ------
    _Refer
        The reference raised on one: the batch goes to the reference path,
        which raises the first error in order.
    """
    # numba loads on first use, not with the package
    from .codec_kernels import NJ
    from .scan_kernels import C_PHI, C_PLO, C_STATUS, NP
    from .thrift_kernels import FALLBACK, OK

    cres = scanned.chunks.copy()
    pages, jobs, blob = scanned.pages, scanned.jobs, scanned.blob
    page_rows = [pages]
    job_rows = [jobs]
    blob_parts = [blob]
    npg, nj, nb = len(pages), len(jobs), len(blob)
    for c, ch in enumerate(chunks):
        if cres[c, C_STATUS] != FALLBACK:
            continue
        try:
            found = scan_chunk(src[ch.src_base : ch.src_base + ch.rng.length], ch.rng, ch.where,
                               max_page_bytes=max_page_bytes, keep_crc=True, num_rows=int(rows[c]))
        except HwdecompError:
            raise _Refer from None
        prow = np.zeros((len(found), NP), np.int64)
        jrows = []
        cres[c, C_PLO] = npg
        for i, page in enumerate(found):
            jlo = nj
            header = b""
            if page.page_type in DECODED_PAGE_TYPES:
                header = page_header(page)
                if page.compressed:
                    value = ch.src_base + page.body_start + page.levels_size
                    body = src[value : ch.src_base + page.body_start + page.body_size]
                    try:
                        spans = plan_body(ch.rng.codec, body, page.uncompressed_size - page.levels_size,
                                          ch.where.with_(page=i))
                    except HwdecompError:
                        raise _Refer from None
                    for sp in spans:
                        jrows.append((_ALGO_CODE[sp.algo], value + sp.src_offset, sp.src_size, sp.dst_offset,
                                      sp.dst_size, -1 if sp.crc32 is None else sp.crc32, sp.preamble))
                        nj += 1
            crc = page.crc
            prow[i] = (page.page_type, page.header_start, page.body_start, page.body_size, page.uncompressed_size,
                       page.levels_size, int(page.compressed), nb, len(header), jlo, nj, int(crc is not None),
                       0 if crc is None else crc)
            blob_parts.append(np.frombuffer(header, np.uint8))
            nb += len(header)
        npg += len(found)
        cres[c, C_PHI] = npg
        cres[c, C_STATUS] = OK
        page_rows.append(prow)
        job_rows.append(np.array(jrows, np.int64).reshape(-1, NJ))
    return _ScanTables(cres, np.concatenate(page_rows), np.concatenate(job_rows), np.concatenate(blob_parts))
