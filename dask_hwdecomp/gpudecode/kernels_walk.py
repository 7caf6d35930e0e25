"""Length-prefixed byte arrays walked a page a thread block: dictionary pages and PLAIN pages.

A PLAIN byte array is a 4-byte little-endian length and then the bytes,
value after value, so where value ``i + 1`` starts depends on every length
before it: the walk is serial by format. One thread following that chain
through global memory waits on a dependent load at every step (about 200
ns a value on the H200). Here the page's block stages it in shared memory
a *region* at a time and one thread (the *walker*) follows the chain there,
a shared-memory load a step (tens of cycles), while the block's other warps
load the next region into a second buffer:

1. the block loads the region holding the first length prefix;
2. the walker reads each prefix from the staged region, records the
   value's length and where its bytes start, and steps over the bytes
   (they are never staged: only the prefixes are read) until a prefix
   starts past the region; meanwhile the loaders stage the next region;
3. the walk goes on in the next region, or, after a value longer than a
   region, in a region staged where its next prefix is.

A region's buffer holds 4 bytes past the region, so a prefix that starts
in it is read whole. Pages are walked in parallel, one block each, and a
block is small (:data:`THREADS`), so many pages walk at once.

The results and errors are those of the serial walk: ``E_VALUES`` when a
length prefix runs past the page, ``E_LENGTH`` when a value does.
"""

from __future__ import annotations

import numba
import numpy as np

from .cuda_jit import cuda
from .kernels_delta import E_COUNT, E_LENGTH, E_VALUES, ENC_PLAIN, K_BYTES, P_DICTIONARY, set_error

__all__ = ["THREADS", "STAGE_BYTES", "walk_kernel", "walk_lengths"]

_SIM = bool(getattr(numba.config, "ENABLE_CUDASIM", 0))
# Bytes a region. The simulator gets small regions, so that small test
# pages still cross several.
_REGION = 64 if _SIM else 4096
# A buffer: a region and the last prefix's 3 bytes past it, rounded up.
_BUF = _REGION + 8
# Both buffers (a shared array's shape must be a constant, not an expression).
STAGE_BYTES = 2 * _BUF
# Threads of the walk kernel's blocks; the threads from _LOADER0 on stage
# regions (on the device not the walker's warp, whose lanes would take
# turns with it).
THREADS = 16 if _SIM else 128
_LOADER0 = 1 if _SIM else 32
assert THREADS > _LOADER0


@cuda.jit(device=True, cache=True)
def _stage(data, stage, half, lo, end, first, step):
    """Bytes ``[lo, min(lo + _BUF, end))`` of ``data`` into buffer ``half``, threads ``first, first + step, ...``."""
    n = end - lo
    if n > _BUF:
        n = np.int64(_BUF)
    k = np.int64(first)
    at = half * _BUF
    while k < n:
        stage[at + k] = data[lo + k]
        k += step


@cuda.jit(device=True, cache=True)
def walk_lengths(data, pos, end, n, out_len, out_src, base, stage, st):
    """Walk ``n`` length-prefixed values of ``data[pos:end]`` with the whole block.

    Value ``i``'s length goes to ``out_len[base + i]``, the offset of its
    first byte in ``data`` to ``out_src[base + i]``. Every thread of the
    block calls it and gets the same result: 0, ``E_VALUES`` or
    ``E_LENGTH``. ``stage``: :data:`STAGE_BYTES` shared bytes; ``st``: six
    shared int64.
    """
    t = cuda.threadIdx.x
    nt = cuda.blockDim.x
    cuda.syncthreads()  # a previous walk's readers are done with st and stage
    # The walker's results alternate between st[0:3] and st[3:6], so that it
    # can write a step's while a slower thread still reads the step before's.
    if t == 0:
        st[0] = pos  # the next prefix
        st[1] = 0  # values walked
        st[2] = 0  # error
    lo = pos  # the staged region's first byte (every thread keeps the same)
    half = 0
    _stage(data, stage, half, lo, end, t, nt)
    cuda.syncthreads()
    at = 0
    err = np.int64(0)
    while True:
        x = st[at]
        i = st[at + 1]
        err = st[at + 2]
        if err != 0 or i >= n:
            break
        if x >= lo + _REGION:
            # past the staged region and the next: a value longer than a region was stepped over
            lo = x
            _stage(data, stage, half, lo, end, t, nt)
            cuda.syncthreads()
        nxt = lo + _REGION
        if t == 0:
            o0 = half * _BUF - lo
            while i < n:
                if x >= nxt:
                    break
                if x + 4 > end:
                    err = E_VALUES
                    break
                o = o0 + x
                ln = (np.int64(stage[o]) | (np.int64(stage[o + 1]) << 8) | (np.int64(stage[o + 2]) << 16)
                      | (np.int64(stage[o + 3]) << 24))
                if ln > end - x - 4:
                    err = E_LENGTH
                    break
                out_len[base + i] = ln
                out_src[base + i] = x + 4
                i += 1
                x += 4 + ln
            st[3 - at] = x
            st[4 - at] = i
            st[5 - at] = err
        elif t >= _LOADER0 and nxt < end:
            _stage(data, stage, 1 - half, nxt, end, t - _LOADER0, nt - _LOADER0)
        cuda.syncthreads()
        at = 3 - at
        x = st[at]
        if x >= nxt and x < nxt + _REGION:
            lo = nxt  # the walk goes on in the region the loaders staged
            half = 1 - half
    return err


@cuda.jit(device=True, cache=True)
def _walk_page(p, data, chunks, pages, vstart, vend, valid, lengths, dict_off, dict_len, sa, sb, stage, st):
    t = cuda.threadIdx.x
    if pages[p]["error"] != 0:
        return
    c = pages[p]["chunk"]
    if chunks[c]["kind"] != K_BYTES:
        return
    if pages[p]["kind"] == P_DICTIONARY:
        pos = pages[p]["offset"]
        end = pos + pages[p]["size"]
        if end > data.shape[0]:
            if t == 0:
                set_error(pages, p, E_VALUES)
            return
        base = chunks[c]["dict_base"]
        n = np.int64(pages[p]["num_values"])
        if n < 0 or base + n > dict_off.shape[0]:
            if t == 0:
                set_error(pages, p, E_COUNT)
            return
        err = walk_lengths(data, pos, end, n, dict_len, dict_off, base, stage, st)
    elif pages[p]["encoding"] == ENC_PLAIN:
        # The measure kernel checks the page again and reports what is wrong.
        lo = pages[p]["offset"]
        s = vstart[p]
        e = vend[p]
        n = np.int64(pages[p]["nonnull"])
        rows = np.int64(pages[p]["num_values"])
        base = pages[p]["row_start"]
        if (s < lo or e > lo + pages[p]["size"] or s > e or e > data.shape[0] or n > rows or n < 0
                or base + rows > valid.shape[0] or base + rows > lengths.shape[0]):
            return
        err = walk_lengths(data, s, e, n, sa, sb, base, stage, st)
    else:
        return
    if err != 0 and t == 0:
        set_error(pages, p, err)


@cuda.jit(cache=True)
def walk_kernel(data, chunks, pages, vstart, vend, valid, lengths, dict_off, dict_len, sa, sb):
    """A block a page: BYTES dictionary pages into ``dict_len``/``dict_off``, PLAIN data pages into ``sa``/``sb``.

    ``sa``/``sb`` are in the page's value space (``row_start + i``);
    launch with :data:`THREADS` threads a block.
    """
    stage = cuda.shared.array(STAGE_BYTES, numba.uint8)
    st = cuda.shared.array(6, numba.int64)
    for p in range(cuda.blockIdx.x, pages.shape[0], cuda.gridDim.x):
        _walk_page(p, data, chunks, pages, vstart, vend, valid, lengths, dict_off, dict_len, sa, sb, stage, st)
        cuda.syncthreads()
