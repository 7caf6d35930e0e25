"""BYTE_ARRAY columns on the GPU, write: each row's offset and string bytes into the placed output.

:func:`write_bytes` sums each page's bytes and scans the sums over each
chunk's pages (:func:`~dask_hwdecomp.gpudecode.kernels_bytes_pages.sum_pages`),
then each page's thread block scans its rows into the offsets, and the
copy kernel copies every row's bytes (a thread a short string, a warp a
long one, over the rows of every BYTES chunk of the batch at once, not a
block a page).
DELTA_BYTE_ARRAY values are copied in value order by every thread of the
page's block, thread ``t`` taking bytes ``j = t (mod TPB)`` of each
value: byte ``j`` of a value's prefix is byte ``j`` of the previous
value, which the same thread wrote, so no thread waits for another. The
DELTA_BYTE_ARRAY pages of FIXED_LEN_BYTE_ARRAY chunks are written by
:mod:`.kernels_bytes_flba`.

Pages with a ``PageError`` are skipped; every write is checked against
the chunk's placed output.
"""

from __future__ import annotations

import numba
import numpy as np

from ..gpu.cuda_jit import cuda
from ..gpu.launch import launch
from .kernels_bytes_flba import write_fixed_dba
from .kernels_bytes_pages import (
    as_i32,
    dba_prefixes,
    dba_value,
    is_bytes_data,
    offset_slot,
    page_rows,
    row_length,
    string_bytes_at,
    sum_pages,
)
from .kernels_delta import ENC_DBA, MAX_BLOCKS, TPB, block_scan, out_views, page_launch

__all__ = ["write_bytes"]

_SIM = bool(getattr(numba.config, "ENABLE_CUDASIM", 0))
# The copy kernel: a thread a row; strings of _LONG bytes or more are
# copied by a group of _LANES threads (a warp), coalesced.
_COPY_THREADS = 32 if _SIM else 256
_LANES = 8 if _SIM else 32
_LONG = 32


@cuda.jit(device=True, cache=True)
def _write_page(p, data, chunks, pages, vstart, vend, valid, vindex, lengths, str_src, page_base, sa, sd, out8, out32, out64, sh, first_src):
    t = cuda.threadIdx.x
    c, n, rows, base = page_rows(pages, p)
    if not is_bytes_data(pages, chunks, p, c):
        return
    enc = pages[p]["encoding"]
    row_base = chunks[c]["row_base"]
    crows = chunks[c]["num_rows"]
    width = chunks[c]["width"]
    ov = chunks[c]["out_values"]
    od, dend = string_bytes_at(chunks, c, out8.shape[0])
    is_dba = enc == ENC_DBA
    # offsets: a block scan of the page's lengths from the page's base
    carry = np.uint64(page_base[p])
    tile = np.int64(0)
    while tile < rows:
        r = base + tile + t
        ln = row_length(valid, lengths, base, rows, tile + t)
        incl, whole = block_scan(sh, ln)
        if tile + t < rows:
            off = carry + incl - ln
            row = r - row_base
            i = offset_slot(ov, width, row)
            if width == 4:
                if i < out32.shape[0]:
                    out32[i] = np.uint32(off & np.uint64(0xFFFFFFFF))
            elif i < out64.shape[0]:
                out64[i] = off
            if row == crows - 1:
                # the chunk's last row also writes the closing offset
                if width == 4:
                    if i + 1 < out32.shape[0]:
                        out32[i + 1] = np.uint32((off + ln) & np.uint64(0xFFFFFFFF))
                elif i + 1 < out64.shape[0]:
                    out64[i + 1] = off + ln
            if is_dba and valid[r] != 0:
                sd[base + vindex[r]] = off
        carry = carry + whole
        tile += TPB
    if not is_dba:
        return  # the copy kernel copies the bytes
    # the copies read offsets that other threads wrote
    cuda.syncthreads()
    # DELTA_BYTE_ARRAY: prefixes again, then the values in order; value
    # i's length is the next value's offset less its own, its suffix
    # follows the previous value's in ``data``.
    src = dba_prefixes(p, data, vstart, vend, valid, vindex, str_src, n, rows, sa, base, sh, first_src)
    prev = np.int64(0)
    for i in range(n):
        pre = as_i32(sa[base + i])
        dst = od + np.int64(sd[base + i])
        if i + 1 < n:
            ln = np.int64(sd[base + i + 1]) - np.int64(sd[base + i])
        else:
            ln = np.int64(carry) - np.int64(sd[base + i])
        if dst + ln > dend or src + ln - pre > data.shape[0] or pre > ln or ln < 0:
            break
        dba_value(out8, data, dst, prev, src, pre, ln, False)
        src += ln - pre
        prev = dst


@cuda.jit(cache=True)
def _write_kernel(data, chunks, pages, vstart, vend, valid, vindex, lengths, str_src, page_base, sa, sd,
                  out8, out32, out64):
    sh = cuda.shared.array(TPB, numba.uint64)
    first_src = cuda.shared.array(1, numba.int64)
    for p in range(cuda.blockIdx.x, pages.shape[0], cuda.gridDim.x):
        _write_page(p, data, chunks, pages, vstart, vend, valid, vindex, lengths, str_src, page_base, sa, sd, out8, out32, out64, sh, first_src)
        cuda.syncthreads()


@cuda.jit(device=True, cache=True)
def _copy_source(r, data, chunks, pages, valid, row_page, lengths, str_src, out8, out32, out64):
    """Row ``r``'s string copy as (destination, source, length); length -1 when the row has none to copy."""
    none = (np.int64(0), np.int64(0), np.int64(-1))
    if valid[r] == 0:
        return none
    p = row_page[r]
    if p < 0:
        return none
    c = pages[p]["chunk"]
    if not is_bytes_data(pages, chunks, p, c) or pages[p]["encoding"] == ENC_DBA:
        return none
    od, dend = string_bytes_at(chunks, c, out8.shape[0])
    width = chunks[c]["width"]
    i = offset_slot(chunks[c]["out_values"], width, r - chunks[c]["row_base"])
    if width == 4:
        if i >= out32.shape[0]:
            return none
        dst = od + np.int64(out32[i])
    else:
        if i >= out64.shape[0]:
            return none
        dst = od + np.int64(out64[i])
    ln = np.int64(lengths[r])
    src = np.int64(str_src[r])
    if ln < 0 or dst + ln > dend or src + ln > data.shape[0]:
        return none
    return dst, src, ln


@cuda.jit(device=True, cache=True)
def _bytes_row(v, bytes_at, bytes_row):
    """The batch row of the BYTES chunks' ``v``-th row (``0 <= v < bytes_at[-1]``)."""
    lo = 0
    hi = bytes_at.shape[0] - 1
    while hi - lo > 1:  # the last chunk whose rows begin at or before v
        mid = (lo + hi) // 2
        if bytes_at[mid] <= v:
            lo = mid
        else:
            hi = mid
    return bytes_row[lo] + (v - bytes_at[lo])


@cuda.jit(cache=True)
def _copy_kernel(data, chunks, pages, valid, row_page, lengths, str_src, out8, out32, out64, bytes_at, bytes_row):
    """The string bytes of every row of the batch's BYTES chunks (not DELTA_BYTE_ARRAY pages), after the offsets.

    A block takes :data:`_COPY_THREADS` of those rows at a time (the rows
    of other chunks are not visited): short strings a thread each, then
    each group of :data:`_LANES` threads copies the long ones of the
    block's rows together, so that a page of long strings loads and
    stores whole lines.
    """
    sdst = cuda.shared.array(_COPY_THREADS, numba.int64)
    ssrc = cuda.shared.array(_COPY_THREADS, numba.int64)
    slen = cuda.shared.array(_COPY_THREADS, numba.int64)
    t = cuda.threadIdx.x
    lane = t % _LANES
    group = t // _LANES
    groups = _COPY_THREADS // _LANES
    total = bytes_at[bytes_at.shape[0] - 1]
    tile = np.int64(cuda.blockIdx.x) * _COPY_THREADS
    while tile < total:
        v = tile + t
        dst = np.int64(0)
        src = np.int64(0)
        ln = np.int64(-1)
        if v < total:
            r = _bytes_row(v, bytes_at, bytes_row)
            if r >= 0 and r < valid.shape[0]:
                dst, src, ln = _copy_source(r, data, chunks, pages, valid, row_page, lengths, str_src, out8, out32,
                                            out64)
        if ln >= 0 and ln < _LONG:
            for j in range(ln):
                out8[dst + j] = data[src + j]
            ln = -1
        sdst[t] = dst
        ssrc[t] = src
        slen[t] = ln
        cuda.syncthreads()
        k = group
        while k < _COPY_THREADS:
            n = slen[k]
            if n >= _LONG:
                d = sdst[k]
                s = ssrc[k]
                j = np.int64(lane)
                while j < n:
                    out8[d + j] = data[s + j]
                    j += _LANES
            k += groups
        cuda.syncthreads()
        tile += np.int64(cuda.gridDim.x) * _COPY_THREADS


def write_bytes(state, out) -> None:
    """Write the BYTES chunks' offsets and string bytes into ``out`` (placed by ``place_outputs``).

    Parameters
    ----------
    state : DecodeState
        Measured (:func:`~dask_hwdecomp.gpudecode.kernels_bytes_measure.measure_bytes`),
        still open; its placed chunks copied to the device.
    out : device array of uint8
        The batch's output, zeroed, of the placed size.
    """
    pages = state.pages_d
    if pages.shape[0] == 0:
        return
    sum_pages(state, False)
    o8, _o16, o32, o64 = out_views(out)
    # sa and sb: the measure's scratch again, every step before runs on this stream
    launch(_write_kernel, *page_launch(state), state.data, state.chunks_d, pages, state.vstart, state.vend, state.valid,
                                      state.vindex, state.lengths, state.str_src, state.page_base, state.sa, state.sb,
                                      o8, o32, o64)
    total = state.bytes_rows
    if total:
        blocks = max(1, min((total + _COPY_THREADS - 1) // _COPY_THREADS, 4 if _SIM else MAX_BLOCKS))
        launch(_copy_kernel, blocks, _COPY_THREADS, state.stream, state.data, state.chunks_d, pages, state.valid, state.row_page,
                                               state.lengths, state.str_src, o8, o32, o64, state.bytes_at,
                                               state.bytes_row)
    if state.has_dba:
        write_fixed_dba(state, o8)
