"""The compiled placement of a batch's pages in the uncompressed images, and the fill.

:func:`place` lays out, from the tables of
:func:`~dask_hwdecomp.format.scan_kernels.scan_chunks`, every chunk of
every image as :func:`~dask_hwdecomp.format.layout.build_layout` does in
Python: the rewritten header of each page, its stored bytes copied or its
values decompressed into place, pages Parquet does not decode left out.
:func:`fill` then writes the headers and copies the stored bytes (the
decompression jobs write the rest).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .codec_kernels import J_DST, NJ
from .pagewalk import is_decoded
from .scan_kernels import (
    C_PHI,
    C_PLO,
    P_BSTART,
    P_COMPRESSED,
    P_CSIZE,
    P_HLEN,
    P_HOFF,
    P_HSTART,
    P_JHI,
    P_JLO,
    P_LEVELS,
    P_TYPE,
    P_USIZE,
)

__all__ = ["S_START", "S_SIZE", "S_DATA", "S_DICT", "W_BLOB", "W_DST", "W_LEN", "W_FILE", "PJ_PAGE", "PJ_SLOT", "NPJ",
           "place", "fill"]

# slot results: image-relative offsets
S_START, S_SIZE, S_DATA, S_DICT = 0, 1, 2, 3
# writes: blob offset, image offset, length, file; copies: source offset, image offset, length, file
W_BLOB, W_DST, W_LEN, W_FILE = 0, 1, 2, 3
# placed jobs: the job columns, then the page (global index) and the slot
PJ_PAGE, PJ_SLOT = NJ, NJ + 1
NPJ = NJ + 2


@njit(nogil=True, cache=True)
def place(pages, jobs, slot_chunk, slot_file, cres, bases, codecs, nfiles):
    """Lay out every slot (a chunk in image order) of every file image.

    Pages of UNCOMPRESSED chunks without index pages are copied as they are
    (headers untouched); other pages get their rewritten header and their
    value bytes copied or decompressed.

    Parameters
    ----------
    pages, jobs : int64 arrays
        The page and job tables of :func:`~dask_hwdecomp.format.scan_kernels.scan_chunks`.
    slot_chunk, slot_file : int64 arrays (nslots,)
        Per slot: its chunk (row of ``cres``) and its image.
    cres : int64 array (nchunks, 4)
        The chunk results of the scan (every status OK).
    bases, codecs : int64 arrays (nchunks,)
        Per chunk: its first byte in the batch source, its Parquet codec.
    nfiles : int
        The images.

    Returns
    -------
    slots : int64 (nslots, 4)
        By the ``S_`` columns.
    file_end : int64 (nfiles,)
        End of the last chunk of each image (where its footer goes).
    writes, copies : int64 (n, 4)
        By the ``W_`` columns: headers from the blob, stored bytes from the source.
    placed : int64 (n, NPJ)
        The jobs, their ``J_DST`` image-relative, with their page and slot.
    """
    ns = slot_chunk.shape[0]
    slots = np.empty((ns, 4), np.int64)
    file_end = np.full(nfiles, 4, np.int64)
    nw = 0
    ncp = 0
    npj = 0
    for s in range(ns):
        c = slot_chunk[s]
        nw += cres[c, C_PHI] - cres[c, C_PLO]
        ncp += 2 * (cres[c, C_PHI] - cres[c, C_PLO]) + 1
        for p in range(cres[c, C_PLO], cres[c, C_PHI]):
            npj += pages[p, P_JHI] - pages[p, P_JLO]
    writes = np.empty((nw, 4), np.int64)
    copies = np.empty((ncp, 4), np.int64)
    placed = np.empty((npj, NPJ), np.int64)
    nw = 0
    ncp = 0
    npj = 0
    for s in range(ns):
        c = slot_chunk[s]
        f = slot_file[s]
        lo = cres[c, C_PLO]
        hi = cres[c, C_PHI]
        base = bases[c]
        pos = file_end[f]
        start = pos
        data_off = -1
        dict_off = -1
        verbatim = codecs[c] == 0
        for p in range(lo, hi):
            if not is_decoded(pages[p, P_TYPE]):
                verbatim = False
        if verbatim and hi > lo:
            first = pages[lo, P_HSTART]
            last_end = pages[hi - 1, P_BSTART] + pages[hi - 1, P_CSIZE]
            for p in range(lo, hi):
                at = pos + pages[p, P_HSTART] - first
                if pages[p, P_TYPE] == 2:
                    if dict_off < 0:
                        dict_off = at
                elif data_off < 0:
                    data_off = at
            copies[ncp, 0] = base + first
            copies[ncp, 1] = pos
            copies[ncp, 2] = last_end - first
            copies[ncp, 3] = f
            ncp += 1
            pos += last_end - first
        elif not verbatim:
            for p in range(lo, hi):
                ptype = pages[p, P_TYPE]
                if not is_decoded(ptype):
                    continue  # index pages, unknown types: skipped, as pyarrow skips them
                if ptype == 2:
                    if dict_off < 0:
                        dict_off = pos
                elif data_off < 0:
                    data_off = pos
                hlen = pages[p, P_HLEN]
                writes[nw, W_BLOB] = pages[p, P_HOFF]
                writes[nw, W_DST] = pos
                writes[nw, W_LEN] = hlen
                writes[nw, W_FILE] = f
                nw += 1
                pos += hlen
                body_src = base + pages[p, P_BSTART]
                levels = pages[p, P_LEVELS]
                usize = pages[p, P_USIZE]
                if levels:
                    copies[ncp, 0] = body_src
                    copies[ncp, 1] = pos
                    copies[ncp, 2] = levels
                    copies[ncp, 3] = f
                    ncp += 1
                value_dst = pos + levels
                if not pages[p, P_COMPRESSED]:
                    if usize - levels:
                        copies[ncp, 0] = body_src + levels
                        copies[ncp, 1] = value_dst
                        copies[ncp, 2] = usize - levels
                        copies[ncp, 3] = f
                        ncp += 1
                else:
                    for j in range(pages[p, P_JLO], pages[p, P_JHI]):
                        for k in range(NJ):
                            placed[npj, k] = jobs[j, k]
                        placed[npj, J_DST] = value_dst + jobs[j, J_DST]
                        placed[npj, PJ_PAGE] = p
                        placed[npj, PJ_SLOT] = s
                        npj += 1
                pos += usize
        if data_off < 0:
            data_off = pos
        slots[s, S_START] = start
        slots[s, S_SIZE] = pos - start
        slots[s, S_DATA] = data_off
        slots[s, S_DICT] = dict_off
        file_end[f] = pos
    return slots, file_end, writes[:nw], copies[:ncp], placed[:npj]


@njit(nogil=True, cache=True)
def _copy(dst, d, src, s, n):
    # A plain loop over two slices: LLVM vectorizes it (a slice assignment,
    # or a loop indexing with offsets, runs several times slower).
    a = dst[d : d + n]
    b = src[s : s + n]
    for i in range(n):
        a[i] = b[i]


@njit(nogil=True, cache=True)
def fill(dst, src, blob, writes, copies, file_base):
    """Write the rewritten headers and copy the stored bytes into the images.

    Parameters
    ----------
    dst, src, blob : uint8 arrays
        The batch's images, its fetched source, the rewritten headers.
    writes, copies : int64 arrays (n, 4)
        From :func:`place`.
    file_base : int64 array (nfiles,)
        Where each image starts in ``dst``.
    """
    for i in range(writes.shape[0]):
        _copy(dst, file_base[writes[i, W_FILE]] + writes[i, W_DST], blob, writes[i, W_BLOB], writes[i, W_LEN])
    for i in range(copies.shape[0]):
        _copy(dst, file_base[copies[i, W_FILE]] + copies[i, W_DST], src, copies[i, W_BLOB], copies[i, W_LEN])
