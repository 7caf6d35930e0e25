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

A region is staged in 8-byte words (a load moves eight bytes), from the
word its first byte is in to the word past its end, so a prefix that
starts in it is read whole, from one or two words. Pages are walked in
parallel, one block each, and a block is small (:data:`THREADS`), so many
pages walk at once.

The results and errors are those of the serial walk: ``E_VALUES`` when a
length prefix runs past the page, ``E_LENGTH`` when a value does.
"""

from __future__ import annotations

import numba
import numpy as np

from .cuda_jit import cuda
from .kernels_delta import E_COUNT, E_LENGTH, E_VALUES, ENC_PLAIN, K_BYTES, P_DICTIONARY, set_error

__all__ = ["THREADS", "STAGE_WORDS", "walk_kernel", "walk_lengths", "whole_words"]

_SIM = bool(getattr(numba.config, "ENABLE_CUDASIM", 0))
# Bytes a region (a multiple of 8). The simulator gets small regions, so
# that small test pages still cross several.
_REGION = 64 if _SIM else 4096
# A buffer, in 8-byte words: the region from the word its first byte is in,
# and the word a prefix that starts in its last bytes ends in.
_WORDS = _REGION // 8 + 2
# Both buffers (a shared array's shape must be a constant, not an expression).
STAGE_WORDS = 2 * _WORDS
# Threads of the walk kernel's blocks; the threads from _LOADER0 on stage
# regions (on the device not the walker's warp, whose lanes would take
# turns with it).
THREADS = 16 if _SIM else 128
_LOADER0 = 1 if _SIM else 32
assert THREADS > _LOADER0 and _REGION % 8 == 0
_U8 = np.uint64(8)
_LOW32 = np.uint64(0xFFFFFFFF)


@cuda.jit(device=True, cache=True)
def _stage(data, data64, stage, half, lo, end, first, step):
    """The words of ``data`` from ``lo``'s to ``end``'s into buffer ``half``, threads ``first, first + step, ...``.

    ``data64`` is ``data``'s whole words; the last, partial one is put
    together from its bytes.
    """
    w0 = lo >> 3
    n = ((end + 7) >> 3) - w0
    if n > _WORDS:
        n = np.int64(_WORDS)
    at = half * _WORDS
    k = np.int64(first)
    while k < n:
        w = w0 + k
        if w < data64.shape[0]:
            stage[at + k] = data64[w]
        else:
            v = np.uint64(0)
            for j in range(8):
                if w * 8 + j < data.shape[0]:
                    v |= np.uint64(data[w * 8 + j]) << np.uint64(8 * j)
            stage[at + k] = v
        k += step


@cuda.jit(device=True, cache=True)
def _prefix(stage, at, o):
    """The 4-byte little-endian length at byte ``o`` of the buffer whose first word is ``stage[at]``."""
    w = at + (o >> 3)
    sh = np.uint64(o & 7)
    v = stage[w]
    if sh != 0:
        v = v >> (sh * _U8)
        if sh > 4:
            v |= stage[w + 1] << ((_U8 - sh) * _U8)
    return np.int64(v & _LOW32)


@cuda.jit(device=True, cache=True)
def walk_lengths(data, data64, pos, end, n, out_len, out_src, base, stage, st):
    """Walk ``n`` length-prefixed values of ``data[pos:end]`` with the whole block.

    Value ``i``'s length goes to ``out_len[base + i]``, the offset of its
    first byte in ``data`` to ``out_src[base + i]``. Every thread of the
    block calls it and gets the same result: 0, ``E_VALUES`` or
    ``E_LENGTH``. ``data64``: ``data``'s whole 8-byte words (the regions are
    staged a word a load); ``stage``: :data:`STAGE_WORDS` shared uint64;
    ``st``: six shared int64.
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
    _stage(data, data64, stage, half, lo, end, t, nt)
    cuda.syncthreads()
    par = 0
    err = np.int64(0)
    while True:
        x = st[par]
        i = st[par + 1]
        err = st[par + 2]
        if err != 0 or i >= n:
            break
        if x >= lo + _REGION:
            # past the staged region and the next: a value longer than a region was stepped over
            lo = x
            _stage(data, data64, stage, half, lo, end, t, nt)
            cuda.syncthreads()
        nxt = lo + _REGION
        if t == 0:
            at = half * _WORDS
            first = (lo >> 3) << 3  # the buffer's first byte
            while i < n:
                if x >= nxt:
                    break
                if x + 4 > end:
                    err = E_VALUES
                    break
                ln = _prefix(stage, at, x - first)
                if ln > end - x - 4:
                    err = E_LENGTH
                    break
                out_len[base + i] = ln
                out_src[base + i] = x + 4
                i += 1
                x += 4 + ln
            st[3 - par] = x
            st[4 - par] = i
            st[5 - par] = err
        elif t >= _LOADER0 and nxt < end:
            _stage(data, data64, stage, 1 - half, nxt, end, t - _LOADER0, nt - _LOADER0)
        cuda.syncthreads()
        par = 3 - par
        x = st[par]
        if x >= nxt and x < nxt + _REGION:
            lo = nxt  # the walk goes on in the region the loaders staged
            half = 1 - half
    return err


@cuda.jit(device=True, cache=True)
def _walk_page(p, data, data64, chunks, pages, vstart, vend, valid, lengths, dict_off, dict_len, sa, sb, stage, st):
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
        err = walk_lengths(data, data64, pos, end, n, dict_len, dict_off, base, stage, st)
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
        err = walk_lengths(data, data64, s, e, n, sa, sb, base, stage, st)
    else:
        return
    if err != 0 and t == 0:
        set_error(pages, p, err)


@cuda.jit(cache=True)
def walk_kernel(data, data64, chunks, pages, vstart, vend, valid, lengths, dict_off, dict_len, sa, sb):
    """A block a page: BYTES dictionary pages into ``dict_len``/``dict_off``, PLAIN data pages into ``sa``/``sb``.

    ``sa``/``sb`` are in the page's value space (``row_start + i``);
    ``data64`` is ``data``'s whole 8-byte words. Launch with
    :data:`THREADS` threads a block.
    """
    stage = cuda.shared.array(STAGE_WORDS, numba.uint64)
    st = cuda.shared.array(6, numba.int64)
    for p in range(cuda.blockIdx.x, pages.shape[0], cuda.gridDim.x):
        _walk_page(p, data, data64, chunks, pages, vstart, vend, valid, lengths, dict_off, dict_len, sa, sb, stage, st)
        cuda.syncthreads()


def whole_words(data):
    """``data``'s (a uint8 device array from an aligned start) whole 8-byte words as a uint64 view."""
    return data[: data.shape[0] // 8 * 8].view(np.uint64)
