"""DELTA_BINARY_PACKED on the GPU: integer columns, and the device functions the string kernels use.

A DELTA_BINARY_PACKED stream is a header (block size, miniblocks a block,
total count, first value) and blocks of ``block size`` deltas (a min delta
and one bit width a miniblock, then the miniblocks bit-packed). Finding
where each block starts is serial (a block's size depends on its bit
widths), unpacking and summing the deltas is not: one thread block a page
walks the blocks in step (every thread reads the same block header, which
is cheap and needs no broadcast), each thread unpacks one delta of a tile
and a shared-memory scan turns the tile's deltas into values.

All arithmetic is on uint64: that wraps mod 2^64 for INT64 columns and its
low 32 bits wrap mod 2^32 for INT32 ones. Every read is checked against the
stream's end; a stream that is not valid sets the page's ``error``
(:class:`~dask_hwdecomp.gpudecode.tables.PageError`) in :func:`measure_delta`
(thread-serial walks of every block), so that the cooperative decoders run
only over streams that walked clean.

Numba scalars are cast explicitly everywhere (``np.uint64(...)``): mixing
signed and unsigned 64-bit integers gives float64 in numba as in numpy,
and the CUDA simulator runs this code with numpy's scalar rules.
"""

from __future__ import annotations

import numba
import numpy as np

from ..gpu.cuda_jit import cuda
from ..gpu.launch import launch
from .tables import Encoding, OutKind, PageError, PageKind, Physical

__all__ = ["measure_delta", "write_delta", "TPB", "dbp_walk", "dbp_decode", "block_scan", "set_error",
           "block_error", "thread_blocks", "page_blocks", "page_launch"]

# Threads a block (a power of two): few under the simulator, which runs a
# Python thread each and polls them all at every barrier.
TPB = 16 if getattr(numba.config, "ENABLE_CUDASIM", 0) else 128

_U0 = np.uint64(0)
_U1 = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_LOW32 = np.uint64(0xFFFFFFFF)
# Plain ints for the device code (numba folds module globals as constants).
E_VALUES = int(PageError.VALUES)
E_BIT_WIDTH = int(PageError.BIT_WIDTH)
E_LENGTH = int(PageError.LENGTH)
E_DELTA = int(PageError.DELTA)
E_COUNT = int(PageError.COUNT)
E_DICT_INDEX = int(PageError.DICT_INDEX)
K_COPY = int(OutKind.COPY)
K_NARROW = int(OutKind.NARROW)
K_DECIMAL = int(OutKind.DECIMAL)
K_BYTES = int(OutKind.BYTES)
P_DICTIONARY = int(PageKind.DICTIONARY)
ENC_PLAIN = int(Encoding.PLAIN)
ENC_PLAIN_DICTIONARY = int(Encoding.PLAIN_DICTIONARY)
ENC_RLE_DICTIONARY = int(Encoding.RLE_DICTIONARY)
ENC_DBP = int(Encoding.DELTA_BINARY_PACKED)
ENC_DLBA = int(Encoding.DELTA_LENGTH_BYTE_ARRAY)
ENC_DBA = int(Encoding.DELTA_BYTE_ARRAY)
PHYS_INT32 = int(Physical.INT32)
PHYS_INT64 = int(Physical.INT64)
PHYS_FLBA = int(Physical.FIXED_LEN_BYTE_ARRAY)

# Largest total count a stream may declare (Parquet counts are int32).
_MAX_COUNT = 0x7FFFFFFF


@cuda.jit(device=True, cache=True)
def set_error(pages, p, code):
    """Record ``code`` as page ``p``'s error unless one is there already."""
    if pages[p]["error"] == 0:
        pages[p]["error"] = code


@cuda.jit(device=True, cache=True)
def block_error(pages, p, code):
    """:func:`set_error` by thread 0 of the page's block only, where every thread found the same error."""
    if cuda.threadIdx.x == 0:
        set_error(pages, p, code)


@cuda.jit(device=True, cache=True)
def read_uleb(data, pos, end):
    """ULEB128 at ``pos`` -> (value, next pos); next pos -1 if it runs past ``end`` or 10 bytes."""
    result = _U0
    shift = 0
    while shift < 70:
        if pos >= end:
            return _U0, np.int64(-1)
        b = np.uint64(data[pos])
        pos += 1
        result |= (b & np.uint64(0x7F)) << np.uint64(shift)
        if b < np.uint64(0x80):
            return result, np.int64(pos)
        shift += 7
    return _U0, np.int64(-1)


@cuda.jit(device=True, cache=True)
def _uleb_after(data, pos, end):
    """:func:`read_uleb` after a read that may have failed: a failed one (pos -1) stays failed."""
    if pos < 0:
        return _U0, np.int64(-1)
    return read_uleb(data, pos, end)


@cuda.jit(device=True, cache=True)
def unzigzag(v):
    """Zigzag-decode a uint64 (the result's bits are the signed value's)."""
    mask = _ALL if (v & _U1) != _U0 else _U0
    return (v >> _U1) ^ mask


@cuda.jit(device=True, cache=True)
def unpack(data, pos, bitoff, bw, end):
    """The ``bw``-bit value at bit ``bitoff`` after byte ``pos`` (LSB first); bytes past ``end`` read 0."""
    if bw == 0:
        return _U0
    start = pos + (bitoff >> 3)
    shift = bitoff & 7
    nbytes = (shift + bw + 7) >> 3
    v = _U0
    hi = _U0
    for j in range(nbytes):
        b = _U0
        if start + j < end:
            b = np.uint64(data[start + j])
        if j < 8:
            v |= b << np.uint64(8 * j)
        else:
            hi = b
    v = v >> np.uint64(shift)
    if nbytes > 8:
        v |= hi << np.uint64(64 - shift)
    if bw < 64:
        v &= (_U1 << np.uint64(bw)) - _U1
    return v


@cuda.jit(device=True, cache=True)
def dbp_header(data, pos, end):
    """Parse a stream header -> (error, block size, miniblocks, total count, first value, next pos)."""
    bs, pos = read_uleb(data, pos, end)
    mbs, pos = _uleb_after(data, pos, end)
    total, pos = _uleb_after(data, pos, end)
    first, pos = _uleb_after(data, pos, end)
    if pos < 0:
        return E_DELTA, 0, 0, 0, _U0, pos
    # Block sizes are multiples of 128, miniblocks hold multiples of 32
    # values; the caps keep every later product far from overflowing.
    if (bs == _U0 or bs % np.uint64(128) != _U0 or bs > np.uint64(1 << 24) or mbs == _U0
            or bs % mbs != _U0 or (bs // mbs) % np.uint64(32) != _U0 or total > np.uint64(_MAX_COUNT)):
        return E_DELTA, 0, 0, 0, _U0, np.int64(-1)
    return 0, np.int64(bs), np.int64(mbs), np.int64(total), unzigzag(first), pos


@cuda.jit(device=True, cache=True)
def dbp_walk(data, pos, end, bits):
    """Walk a whole stream, checking every block -> (error, total count, end pos).

    ``bits`` (32 or 64) is the largest bit width allowed. The walk is
    bounded by the stream's bytes: each block takes at least one byte.
    """
    err, bs, mbs, total, first, pos = dbp_header(data, pos, end)
    if err != 0:
        return err, 0, np.int64(-1)
    vpm = bs // mbs
    remaining = total - 1 if total > 0 else 0
    while remaining > 0:
        _mind, pos = read_uleb(data, pos, end)
        if pos < 0 or pos + mbs > end:
            return E_DELTA, 0, np.int64(-1)
        here = remaining if remaining < bs else bs
        used = (here + vpm - 1) // vpm
        size = np.int64(0)
        for m in range(used):
            bw = np.int64(data[pos + m])
            if bw > bits:
                return E_BIT_WIDTH, 0, np.int64(-1)
            size += vpm * bw // 8
        pos = pos + mbs + size
        if pos > end:
            return E_DELTA, 0, np.int64(-1)
        remaining -= here
    return 0, total, pos


@cuda.jit(device=True, cache=True)
def block_scan(sh, v):
    """Inclusive sum of ``v`` over the thread block (uint64, wrapping) -> (this thread's, the block's)."""
    t = cuda.threadIdx.x
    sh[t] = v
    cuda.syncthreads()
    off = 1
    while off < TPB:
        x = _U0
        if t >= off:
            x = sh[t - off]
        cuda.syncthreads()
        sh[t] = sh[t] + x
        cuda.syncthreads()
        off *= 2
    mine = sh[t]
    whole = sh[TPB - 1]
    cuda.syncthreads()
    return mine, whole


@cuda.jit(device=True, cache=True)
def dbp_decode(data, pos, end, n, dst, base, sh):
    """Decode the first ``n`` values of the (walked, valid) stream at ``pos`` into ``dst[base + i]``.

    Called by every thread of the block with the same arguments.
    """
    err, bs, mbs, total, first, pos = dbp_header(data, pos, end)
    if err != 0 or n <= 0:
        return
    vpm = bs // mbs
    t = cuda.threadIdx.x
    if t == 0:
        dst[base] = first
    carry = first
    i0 = 1
    while i0 < n:
        mind, pos = read_uleb(data, pos, end)
        if pos < 0:
            return
        mind = unzigzag(mind)
        widths = pos
        dstart = pos + mbs
        cnt = n - i0 if n - i0 < bs else bs
        tile = 0
        while tile < cnt:
            k = tile + t
            d = _U0
            if k < cnt:
                m = k // vpm
                mpos = dstart
                for mm in range(m):
                    mpos += vpm * np.int64(data[widths + mm]) // 8
                bw = np.int64(data[widths + m])
                d = mind + unpack(data, mpos, (k - m * vpm) * bw, bw, end)
            s, whole = block_scan(sh, d)
            if k < cnt:
                dst[base + i0 + k] = carry + s
            carry = carry + whole
            tile += TPB
        # A further block follows only after a full one: every miniblock present.
        pos = dstart
        for mm in range(mbs):
            pos += vpm * np.int64(data[widths + mm]) // 8
        i0 += bs


@cuda.jit(device=True, cache=True)
def _is_delta_int(pages, chunks, p, c):
    if pages[p]["kind"] == P_DICTIONARY or pages[p]["encoding"] != ENC_DBP:
        return False
    kind = chunks[c]["kind"]
    phys = chunks[c]["physical"]
    return ((kind == K_COPY or kind == K_NARROW or kind == K_DECIMAL)
            and (phys == PHYS_INT32 or phys == PHYS_INT64))


@cuda.jit(device=True, cache=True)
def _measure_delta_one(p, data, chunks, pages, vstart, vend, vindex):
    c = pages[p]["chunk"]
    if not _is_delta_int(pages, chunks, p, c) or pages[p]["error"] != 0:
        return
    lo = pages[p]["offset"]
    hi = lo + pages[p]["size"]
    pos = vstart[p]
    end = vend[p]
    if pos < lo or end > hi or pos > end or end > data.shape[0]:
        set_error(pages, p, E_VALUES)
        return
    if (pages[p]["nonnull"] > pages[p]["num_values"] or pages[p]["nonnull"] < 0
            or pages[p]["row_start"] + pages[p]["num_values"] > vindex.shape[0]):
        set_error(pages, p, E_COUNT)
        return
    bits = 32 if chunks[c]["physical"] == PHYS_INT32 else 64
    err, total, _e = dbp_walk(data, pos, end, bits)
    if err != 0:
        set_error(pages, p, err)
    elif total < pages[p]["nonnull"]:
        set_error(pages, p, E_COUNT)


@cuda.jit(cache=True)
def _measure_delta_kernel(data, chunks, pages, vstart, vend, vindex):
    for p in range(cuda.grid(1), pages.shape[0], cuda.gridsize(1)):
        _measure_delta_one(p, data, chunks, pages, vstart, vend, vindex)


@cuda.jit(device=True, cache=True)
def _write_delta_page(p, data, chunks, pages, vstart, vend, valid, vindex, scratch, out8, out16, out32, out64, sh):
    c = pages[p]["chunk"]
    if not _is_delta_int(pages, chunks, p, c) or pages[p]["error"] != 0:
        return
    n = np.int64(pages[p]["nonnull"])
    base = pages[p]["row_start"]
    dbp_decode(data, vstart[p], vend[p], n, scratch, base, sh)
    cuda.syncthreads()
    kind = chunks[c]["kind"]
    width = chunks[c]["width"]
    is32 = chunks[c]["physical"] == PHYS_INT32
    row_base = chunks[c]["row_base"]
    ov = chunks[c]["out_values"]
    rows = np.int64(pages[p]["num_values"])
    r = base + cuda.threadIdx.x
    while r < base + rows:
        if r < valid.shape[0] and valid[r] != 0 and vindex[r] >= 0 and vindex[r] < n:
            v = scratch[base + vindex[r]]
            row = r - row_base
            if kind == K_DECIMAL:
                lo = v
                if is32:
                    lo = v & _LOW32
                    if (lo & np.uint64(0x80000000)) != _U0:
                        lo |= ~_LOW32
                hi = _ALL if (lo >> np.uint64(63)) != _U0 else _U0
                i = (ov >> 3) + 2 * row
                if i + 1 < out64.shape[0]:
                    out64[i] = lo
                    out64[i + 1] = hi
            elif width == 8:
                i = (ov >> 3) + row
                if i < out64.shape[0]:
                    out64[i] = v
            elif width == 4:
                i = (ov >> 2) + row
                if i < out32.shape[0]:
                    out32[i] = np.uint32(v & _LOW32)
            elif width == 2:
                i = (ov >> 1) + row
                if i < out16.shape[0]:
                    out16[i] = np.uint16(v & np.uint64(0xFFFF))
            elif width == 1:
                i = ov + row
                if i < out8.shape[0]:
                    out8[i] = np.uint8(v & np.uint64(0xFF))
        r += TPB


@cuda.jit(cache=True)
def _write_delta_kernel(data, chunks, pages, vstart, vend, valid, vindex, scratch, out8, out16, out32, out64):
    sh = cuda.shared.array(TPB, numba.uint64)
    for p in range(cuda.blockIdx.x, pages.shape[0], cuda.gridDim.x):
        _write_delta_page(p, data, chunks, pages, vstart, vend, valid, vindex, scratch, out8, out16, out32, out64, sh)
        cuda.syncthreads()


# Most blocks a launch; the kernels loop over the pages (or chunks) past
# the grid. (Capping it lower under the simulator was slower: its cost is
# the time threads spend polled at barriers, not starting them.)
MAX_BLOCKS = 1 << 16


def thread_blocks(n: int) -> int:
    """Blocks for a kernel of one thread an item."""
    return max(1, min((n + TPB - 1) // TPB, MAX_BLOCKS))


def page_blocks(n: int) -> int:
    """Blocks for a kernel of one block a page."""
    return max(1, min(n, MAX_BLOCKS))


def page_launch(state, threads: int = TPB) -> tuple:
    """``kernel[page_launch(state)]``: one block of ``threads`` a page of ``state``'s batch, on its stream."""
    return page_blocks(state.pages_d.shape[0]), threads, state.stream


def measure_delta(state) -> None:
    """Check the DELTA_BINARY_PACKED pages of integer chunks: headers, blocks, counts.

    Sets ``PAGE.error`` (DELTA, BIT_WIDTH, COUNT, VALUES) in ``state.pages_d``;
    one thread a page, one launch over the batch.
    """
    pages = state.pages_d
    if pages.shape[0] == 0:
        return
    launch(_measure_delta_kernel, thread_blocks(pages.shape[0]), TPB, state.stream,
        state.data, state.chunks_d, pages, state.vstart, state.vend, state.vindex)


def out_views(out):
    """``out`` (uint8, placed size: a multiple of 8) as uint8, uint16, uint32 and uint64 arrays."""
    n = out.shape[0] - out.shape[0] % 8
    whole = out[:n]
    return out, whole.view(np.uint16), whole.view(np.uint32), whole.view(np.uint64)


def write_delta(state, out) -> None:
    """Write the values of DELTA_BINARY_PACKED integer pages (COPY, NARROW, DECIMAL) into ``out``.

    One thread block a page decodes its values into a scratch in the
    page's row space, then places them at their rows; null rows stay as
    ``out`` has them (zero). Pages with an error are skipped.
    """
    pages = state.pages_d
    if pages.shape[0] == 0:
        return
    scratch = state.sa  # the state's per-row scratch: the byte-array steps before it ran on this stream
    o8, o16, o32, o64 = out_views(out)
    launch(_write_delta_kernel, *page_launch(state),
        state.data, state.chunks_d, pages, state.vstart, state.vend, state.valid, state.vindex, scratch,
        o8, o16, o32, o64)
