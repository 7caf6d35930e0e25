"""Definition levels: per-row validity, per-page value counts and value positions.

One block per page. The block checks the page against its chunk and the
data buffer, finds its value section (``vstart``/``vend``: after the v1
4-byte length and levels, or after the v2 ``def_bytes``), expands the
levels into ``valid`` (all rows valid where ``max_def`` is 0), then scans
them: ``vindex`` gives each non-null row its value's index in the page's
value stream, ``vrow`` the inverse (value ``k`` -> row offset in the page),
``row_page`` each row's page, and the page's ``nonnull`` is the count.
"""

from __future__ import annotations

import numpy as np

from ..gpu.cuda_jit import cuda
from .kernels_hybrid import block_hybrid, read_u32
from .tables import PageError, PageKind

__all__ = ["levels_kernel", "set_error", "SCAN_SLOTS"]

# Shared scan buffer: blocks of this kernel run with at most this many threads.
SCAN_SLOTS = 256
# The tile scan's two halves (a shared array's shape must be a constant, not an expression).
_SCAN_BOTH = 2 * SCAN_SLOTS

_LEVELS = int(PageError.LEVELS)
_VALUES = int(PageError.VALUES)
_COUNT = int(PageError.COUNT)
_DICT = int(PageKind.DICTIONARY)
_V1 = int(PageKind.DATA_V1)


@cuda.jit(device=True, cache=True)
def set_error(pages, p, code):
    """Record ``code`` on page ``p`` unless it has an error already (the first wins)."""
    if pages[p]["error"] == 0:
        pages[p]["error"] = code


@cuda.jit(device=True, cache=True)
def _check_page(data, chunks, pages, p, vstart, vend, valid_rows):
    """Check page ``p`` against its chunk and ``data``; set its value section. Returns the level bytes' end or -1."""
    c = pages[p]["chunk"]
    if c < 0 or c >= chunks.shape[0]:
        set_error(pages, p, _COUNT)
        return np.int64(-1), np.int64(-1)
    off = pages[p]["offset"]
    size = pages[p]["size"]
    if off < 0 or size < 0 or off + size > data.shape[0]:
        set_error(pages, p, _VALUES)
        return np.int64(-1), np.int64(-1)
    n = np.int64(pages[p]["num_values"])
    rs = pages[p]["row_start"]
    base = chunks[c]["row_base"]
    if n < 0 or base < 0 or rs < base or rs + n > base + chunks[c]["num_rows"] or rs + n > valid_rows:
        set_error(pages, p, _COUNT)
        return np.int64(-1), np.int64(-1)
    end = off + size
    pos = off
    lend = off
    if pages[p]["kind"] == _V1:
        if chunks[c]["max_def"] > 0:
            length = read_u32(data, off, end)
            if length < 0 or length > end - off - 4:
                set_error(pages, p, _LEVELS)
                return np.int64(-1), np.int64(-1)
            pos = off + 4
            lend = pos + length
        else:
            lend = off
    else:
        db = np.int64(pages[p]["def_bytes"])
        if db < 0 or db > size:
            set_error(pages, p, _LEVELS)
            return np.int64(-1), np.int64(-1)
        lend = off + db
    vstart[p] = lend
    vend[p] = end
    return pos, lend


@cuda.jit(device=True, cache=True)
def _number_rows(valid, vindex, vrow, row_page, rs, n, p, shared, scan):
    """Number the page's rows from ``valid``: ``vindex``, ``vrow``, ``row_page``; returns the non-null count.

    Called by every thread of the block. A thread takes rows ``tid, tid +
    nthreads, ...``, so every load and store of a warp is one contiguous
    run. A page without nulls (the common case) numbers its rows as they
    are; otherwise the block scans ``valid`` a tile of ``nthreads`` rows at
    a time. ``shared[6]`` is free here; ``scan`` holds ``2 * nthreads``.
    """
    tid = cuda.threadIdx.x
    nthreads = cuda.blockDim.x
    if tid == 0:
        shared[6] = 0
    cuda.syncthreads()
    # int64 throughout: the simulator's NumPy keeps uint8 + uint8 a uint8, which wraps at 256.
    count = np.int64(0)
    for k in range(tid, n, nthreads):
        count += np.int64(valid[rs + k])
    if count:
        cuda.atomic.add(shared, 6, count)
    cuda.syncthreads()
    total = shared[6]
    if total == n:
        for k in range(tid, n, nthreads):
            vindex[rs + k] = k
            vrow[rs + k] = k
            row_page[rs + k] = p
        return total
    carry = np.int64(0)
    for t0 in range(0, n, nthreads):
        k = t0 + tid
        v = np.int64(0)
        if k < n:
            v = np.int64(valid[rs + k])
        # inclusive scan of the tile, Hillis-Steele between the two halves of ``scan``
        src = 0
        scan[tid] = v
        cuda.syncthreads()
        off = 1
        while off < nthreads:
            x = np.int64(scan[src * nthreads + tid])
            if tid >= off:
                x += scan[src * nthreads + tid - off]
            scan[(1 - src) * nthreads + tid] = x
            src = 1 - src
            off *= 2
            cuda.syncthreads()
        e = carry + scan[src * nthreads + tid] - v
        whole = np.int64(scan[src * nthreads + nthreads - 1])
        if k < n:
            vindex[rs + k] = e
            row_page[rs + k] = p
            if v:
                vrow[rs + e] = k
        carry += whole
        cuda.syncthreads()  # the tile's scan is read; the next may overwrite it
    return total


@cuda.jit(cache=True)
def levels_kernel(data, chunks, pages, valid, vindex, vrow, row_page, vstart, vend):
    shared = cuda.shared.array(8, np.int64)
    scan = cuda.shared.array(_SCAN_BOTH, np.int32)
    tid = cuda.threadIdx.x
    nthreads = cuda.blockDim.x
    for p in range(cuda.blockIdx.x, pages.shape[0], cuda.gridDim.x):
        cuda.syncthreads()
        if tid == 0:
            shared[6] = -1
            shared[7] = -1
            if pages[p]["kind"] != _DICT:
                pos, lend = _check_page(data, chunks, pages, p, vstart, vend, valid.shape[0])
                shared[6] = pos
                shared[7] = lend
            else:
                vstart[p] = 0
                vend[p] = 0
        cuda.syncthreads()
        pos = shared[6]
        lend = shared[7]
        if pos < 0:
            continue
        c = pages[p]["chunk"]
        n = np.int64(pages[p]["num_values"])
        rs = pages[p]["row_start"]
        if chunks[c]["max_def"] == 0:
            for k in range(tid, n, nthreads):
                valid[rs + k] = 1
        else:
            status = block_hybrid(data, pos, lend, 1, n, shared, valid, rs, vrow, 0, 2, 1)
            if status != 0:
                if tid == 0:
                    set_error(pages, p, _LEVELS)
                continue
        cuda.syncthreads()  # every row's ``valid`` is written
        nonnull = _number_rows(valid, vindex, vrow, row_page, rs, n, p, shared, scan)
        if tid == 0:
            pages[p]["nonnull"] = nonnull
