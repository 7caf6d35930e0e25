"""Length-prefixed byte arrays walked by a whole thread block: dictionary pages and PLAIN pages.

A PLAIN byte array is a 4-byte little-endian length and then the bytes,
value after value, so where value ``i + 1`` starts depends on every length
before it. One thread following that chain waits on a dependent load at
every step (about 200 ns a value on the H200, so about 7 ms for a 1 MB
dictionary page of short strings). Here a page's block walks it a window
at a time, every window starting at a value's first byte and staged in
shared memory:

1. every position ``k`` of the window gets ``J_0(k) = k + 4 + length at k``
   when that value ends inside the window, else ``k`` itself (a fixed
   point, as is the window's end);
2. pointer doubling: ``J_j = J_{j-1} o J_{j-1}``, until ``2^j`` steps from 0
   reach a fixed point (at most ``log2(window / 4)`` rounds);
3. thread ``i`` finds the start of the window's ``i``-th value,
   ``P(i) = J^i(0)``, from the binary digits of ``i``; value ``i`` ends in
   the window when ``P(i + 1) = J_0(P(i)) != P(i)``: its length is
   ``P(i + 1) - P(i) - 4``, its bytes start at ``P(i) + 4``;
4. the next window starts where the window's first unfinished value does.
   A value longer than a window is taken by itself and stepped over.

The results and errors are those of the serial walk: ``E_VALUES`` when a
length prefix runs past the page, ``E_LENGTH`` when a value does.
"""

from __future__ import annotations

import numba
import numpy as np

from .cuda_jit import cuda
from .kernels_delta import E_COUNT, E_LENGTH, E_VALUES, ENC_PLAIN, K_BYTES, P_DICTIONARY, set_error

__all__ = ["THREADS", "walk_kernel"]

_SIM = bool(getattr(numba.config, "ENABLE_CUDASIM", 0))
# Bytes a window (int16 jump tables). The simulator gets small windows, so
# that small test pages still cross several.
_W = 256 if _SIM else 2048
# Jump tables J_0 .. J_{_LEVELS-1}: a window holds at most _W / 4 values,
# whose starts P(0) .. P(_W / 4 - 1) take _LEVELS binary digits.
_LEVELS = (_W // 4 - 1).bit_length()
_TABLES = _LEVELS * _W
# Bytes staged at once (several windows a load of global memory).
_STAGE = 4 * _W
# Threads of the walk kernel's blocks.
THREADS = 16 if _SIM else 1024
assert (1 << _LEVELS) >= _W // 4


@cuda.jit(device=True, cache=True)
def _at(jt, level, x, size):
    """``J_level(x)``; positions at or past the window's end stay where they are."""
    if x >= size:
        return x
    return np.int64(jt[level * _W + x])


@cuda.jit(device=True, cache=True)
def _start(jt, i, size, levels):
    """``P(i)``: where the window's ``i``-th value starts (``i < 2^levels``)."""
    x = np.int64(0)
    for j in range(levels):
        if (i >> j) & 1:
            x = _at(jt, j, x, size)
    return x


@cuda.jit(device=True, cache=True)
def walk_lengths(data, pos, end, n, out_len, out_src, base, stage, jt, st):
    """Walk ``n`` length-prefixed values of ``data[pos:end]`` with the whole block.

    Value ``i``'s length goes to ``out_len[base + i]``, the offset of its
    first byte in ``data`` to ``out_src[base + i]``. Every thread of the
    block calls it and gets the same result: 0, ``E_VALUES`` or
    ``E_LENGTH``. ``stage``: ``_STAGE`` shared bytes; ``jt``: ``_LEVELS *
    _W`` shared int16; ``st``: four shared int64.
    """
    t = cuda.threadIdx.x
    nt = cuda.blockDim.x
    cuda.syncthreads()  # a previous walk's readers are done with st
    if t == 0:
        st[0] = pos  # the next window's start
        st[1] = 0  # values walked
        st[2] = 0  # error
    cuda.syncthreads()
    # Every thread keeps the same staged range.
    stage_lo = np.int64(-1)
    stage_hi = np.int64(-1)
    err = np.int64(0)
    while True:
        lo = st[0]
        i0 = st[1]
        err = st[2]
        if err != 0 or i0 >= n:
            break
        size = end - lo
        if size > _W:
            size = np.int64(_W)
        if size < 0:
            size = np.int64(0)
        if lo < stage_lo or lo + size > stage_hi:
            stage_lo = lo
            stage_hi = lo + _STAGE
            if stage_hi > end:
                stage_hi = end
            k = np.int64(t)
            while k < stage_hi - stage_lo:
                stage[k] = data[stage_lo + k]
                k += nt
            cuda.syncthreads()
        off = lo - stage_lo
        # J_0
        if t == 0:
            st[3] = 0
        k = np.int64(t)
        while k < size:
            nxt = k
            if k + 4 <= size:
                o = off + k
                ln = (np.int64(stage[o]) | (np.int64(stage[o + 1]) << 8) | (np.int64(stage[o + 2]) << 16)
                      | (np.int64(stage[o + 3]) << 24))
                if ln <= size - k - 4:
                    nxt = k + 4 + ln
            jt[k] = np.int16(nxt)
            k += nt
        cuda.syncthreads()
        # doubling until 2^(levels-1) steps from 0 reach a fixed point
        levels = 1
        while levels < _LEVELS:
            x = _at(jt, levels - 1, np.int64(0), size)
            if x >= size or _at(jt, 0, x, size) == x:
                break
            k = np.int64(t)
            while k < size:
                jt[levels * _W + k] = np.int16(_at(jt, levels - 1, _at(jt, levels - 1, k, size), size))
                k += nt
            cuda.syncthreads()
            levels += 1
        # the window's complete values
        i = np.int64(t)
        while i < (np.int64(1) << levels):
            a = _start(jt, i, size, levels)
            b = _at(jt, 0, a, size)
            if b != a:
                if i0 + i < n:
                    out_len[base + i0 + i] = b - a - 4
                    out_src[base + i0 + i] = lo + a + 4
                if _at(jt, 0, b, size) == b:
                    st[3] = i + 1  # the last complete value: one thread writes
            i += nt
        cuda.syncthreads()
        if t == 0:
            m = st[3]
            if m > n - i0:
                m = n - i0
            if m > 0:
                st[0] = lo + _at(jt, 0, _start(jt, m - 1, size, levels), size)
                st[1] = i0 + m
            elif size < 4:
                st[2] = E_VALUES
            else:
                # one value longer than a window: take it and step over it
                ln = (np.int64(stage[off]) | (np.int64(stage[off + 1]) << 8) | (np.int64(stage[off + 2]) << 16)
                      | (np.int64(stage[off + 3]) << 24))
                if ln > end - lo - 4:
                    st[2] = E_LENGTH
                else:
                    out_len[base + i0] = ln
                    out_src[base + i0] = lo + 4
                    st[0] = lo + 4 + ln
                    st[1] = i0 + 1
        cuda.syncthreads()
    return err


@cuda.jit(device=True, cache=True)
def _walk_page(p, data, chunks, pages, vstart, vend, valid, lengths, dict_off, dict_len, sa, sb, stage, jt, st):
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
        err = walk_lengths(data, pos, end, n, dict_len, dict_off, base, stage, jt, st)
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
        err = walk_lengths(data, s, e, n, sa, sb, base, stage, jt, st)
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
    stage = cuda.shared.array(_STAGE, numba.uint8)
    jt = cuda.shared.array(_TABLES, numba.int16)
    st = cuda.shared.array(4, numba.int64)
    for p in range(cuda.blockIdx.x, pages.shape[0], cuda.gridDim.x):
        _walk_page(p, data, chunks, pages, vstart, vend, valid, lengths, dict_off, dict_len, sa, sb, stage, jt, st)
        cuda.syncthreads()
