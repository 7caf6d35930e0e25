"""BYTE_ARRAY columns on the GPU, measure: each row's string length and where its bytes start.

:func:`measure_bytes` fills, for every non-null row of a BYTES chunk (and
of a FIXED_LEN_BYTE_ARRAY chunk's DELTA_BYTE_ARRAY pages),
``state.lengths[r]`` (its value's length) and ``state.str_src[r]`` (where
its bytes start in ``data``; for DELTA_BYTE_ARRAY the start of its
*suffix*), and adds each chunk's string bytes to ``CHUNK.data_bytes``:

- dictionary pages (PLAIN byte arrays): a page's block walks the lengths
  into ``dict_off``/``dict_len`` (:mod:`.kernels_walk`: serial by format,
  walked in segments from guessed starts, each guess checked against the
  chain);
- PLAIN data pages: walked the same way into a scratch in the page's row
  space, then the page's thread block places them at their rows;
- dictionary data pages: a thread a row looks its entry up;
- DELTA_LENGTH_BYTE_ARRAY / DELTA_BYTE_ARRAY: the DELTA_BINARY_PACKED
  lengths decoded by the page's thread block
  (:func:`~dask_hwdecomp.gpudecode.kernels_delta.dbp_decode`), the bytes'
  starts a block scan of the lengths; for DELTA_BYTE_ARRAY a second
  kernel decodes the prefix lengths, checks them (a prefix may not exceed
  the previous value; a fixed-length value has the type's length) and
  makes each row's length prefix + suffix.

Every read is checked against the page body; a corrupt page gets a
``PageError`` and is skipped by the later kernels.
"""

from __future__ import annotations

import numba
import numpy as np

from ..gpu.cuda_jit import cuda
from ..gpu.launch import launch
from .kernels_bytes_pages import as_i32, measured_here, page_rows, sum_pages
from .kernels_delta import (
    E_COUNT,
    E_DICT_INDEX,
    E_LENGTH,
    E_VALUES,
    ENC_DBA,
    ENC_DLBA,
    ENC_PLAIN,
    ENC_PLAIN_DICTIONARY,
    ENC_RLE_DICTIONARY,
    K_BYTES,
    TPB,
    block_error,
    block_scan,
    dbp_decode,
    dbp_walk,
    page_launch,
    set_error,
)
from .kernels_walk import THREADS as WALK_THREADS
from .kernels_walk import walk_kernel

__all__ = ["measure_bytes"]

_E_ENCODING = 8


@cuda.jit(device=True, cache=True)
def _body(pages, vstart, vend, p, data):
    """The page's value section (start, end), or (-1, -1) outside its body."""
    lo = pages[p]["offset"]
    hi = lo + pages[p]["size"]
    s = vstart[p]
    e = vend[p]
    if s < lo or e > hi or s > e or e > data.shape[0]:
        return np.int64(-1), np.int64(-1)
    return s, e


@cuda.jit(device=True, cache=True)
def _length_stream(data, pos, end, n):
    """Walk a DELTA_BINARY_PACKED stream of lengths: (error, where it ends); ``COUNT`` if under ``n`` values."""
    err, total, pos = dbp_walk(data, pos, end, 32)
    if err == 0 and total < n:
        err = E_COUNT
    return err, pos


@cuda.jit(device=True, cache=True)
def _measure_page(p, data, chunks, pages, vstart, vend, valid, vindex, idx, dict_off, dict_len, lengths, str_src, sa, sb,
                  sh, shi):
    t = cuda.threadIdx.x
    c, n, rows, base = page_rows(pages, p)
    if not measured_here(pages, chunks, p, c):
        return
    enc = pages[p]["encoding"]
    s, e = _body(pages, vstart, vend, p, data)
    # shi: 0 error, 1 bytes start (DELTA), 2 second stream (DELTA_BYTE_ARRAY)
    if t == 0:
        shi[0] = 0
        shi[3] = 0
        if s < 0:
            shi[0] = E_VALUES
        elif n > rows or n < 0 or base + rows > valid.shape[0]:
            shi[0] = E_COUNT
        elif base + rows > lengths.shape[0] or base + rows > str_src.shape[0]:
            # no per-row string scratch for this chunk (the runner sizes it
            # for BYTES chunks): not decodable here
            shi[0] = _E_ENCODING
        elif enc == ENC_PLAIN:
            pass  # walked by the walk kernel (its errors are the page's already)
        elif enc == ENC_DLBA:
            err, pos = _length_stream(data, s, e, n)
            shi[0] = err
            shi[1] = pos
        elif enc == ENC_DBA:
            err, pos = _length_stream(data, s, e, n)
            shi[0] = err
            shi[2] = pos
            if err == 0:
                err, pos = _length_stream(data, pos, e, n)
                shi[0] = err
                shi[1] = pos
        elif enc != ENC_PLAIN_DICTIONARY and enc != ENC_RLE_DICTIONARY:
            shi[0] = _E_ENCODING
        elif chunks[c]["dict_page"] < 0 or pages[chunks[c]["dict_page"]]["error"] != 0:
            shi[0] = E_DICT_INDEX
    cuda.syncthreads()
    if shi[0] != 0:
        block_error(pages, p, shi[0])
        return
    if enc == ENC_DLBA or enc == ENC_DBA:
        # lengths (DBA: suffix lengths) -> sa, their starts -> sb
        if enc == ENC_DLBA:
            dbp_decode(data, s, e, n, sa, base, sh)
        else:
            dbp_decode(data, shi[2], e, n, sa, base, sh)
        cuda.syncthreads()
        carry = np.uint64(shi[1])
        bad = False
        tile = np.int64(0)
        while tile < n:
            i = tile + t
            ln = np.uint64(0)
            if i < n:
                x = as_i32(sa[base + i])
                if x < 0:
                    bad = True
                else:
                    ln = np.uint64(x)
            incl, whole = block_scan(sh, ln)
            if i < n:
                sb[base + i] = carry + incl - ln
            carry = carry + whole
            tile += TPB
        if bad:
            shi[3] = 1
        cuda.syncthreads()
        if t == 0 and (shi[3] == 1 or carry > np.uint64(e)):
            set_error(pages, p, E_LENGTH)
        cuda.syncthreads()
    if pages[p]["error"] != 0:
        return
    # place at rows (DELTA_BYTE_ARRAY: suffix lengths and starts for now)
    dbase = chunks[c]["dict_base"]
    dp = chunks[c]["dict_page"]
    dn = np.int64(0)
    if dp >= 0:
        dn = np.int64(pages[dp]["num_values"])
    bad = False
    r = base + t
    while r < base + rows:
        if valid[r] != 0:
            i = np.int64(vindex[r])
            if i < 0 or i >= n:
                bad = True
            elif enc == ENC_PLAIN or enc == ENC_DLBA or enc == ENC_DBA:
                lengths[r] = np.int64(sa[base + i])
                str_src[r] = np.int64(sb[base + i])
            else:
                k = np.int64(idx[r])
                if k < 0 or k >= dn:
                    bad = True
                else:
                    lengths[r] = np.int64(dict_len[dbase + k])
                    str_src[r] = dict_off[dbase + k]
        r += TPB
    if bad:
        set_error(pages, p, E_DICT_INDEX if (enc != ENC_PLAIN and enc != ENC_DLBA and enc != ENC_DBA) else E_COUNT)


@cuda.jit(cache=True)
def _measure_kernel(data, chunks, pages, vstart, vend, valid, vindex, idx, dict_off, dict_len, lengths, str_src,
                    sa, sb):
    sh = cuda.shared.array(TPB, numba.uint64)
    shi = cuda.shared.array(4, numba.int64)
    for p in range(cuda.blockIdx.x, pages.shape[0], cuda.gridDim.x):
        _measure_page(p, data, chunks, pages, vstart, vend, valid, vindex, idx, dict_off, dict_len, lengths, str_src,
                      sa, sb, sh, shi)
        cuda.syncthreads()


@cuda.jit(device=True, cache=True)
def _dba_lengths_page(p, data, chunks, pages, vstart, vend, valid, vindex, lengths, sa, sp, sh, flag):
    """DELTA_BYTE_ARRAY: value length = prefix + suffix; a prefix may not exceed the previous value.

    ``sa`` holds the page's suffix lengths by value (from the measure
    kernel); the prefixes are decoded into ``sp``.
    """
    t = cuda.threadIdx.x
    c, n, rows, base = page_rows(pages, p)
    if not measured_here(pages, chunks, p, c) or pages[p]["encoding"] != ENC_DBA:
        return
    # fixed-length values: every value must have the type's length
    fixed = np.int64(-1)
    if chunks[c]["kind"] != K_BYTES:
        fixed = np.int64(chunks[c]["type_length"])
    if t == 0:
        flag[0] = 0
    dbp_decode(data, vstart[p], vend[p], n, sp, base, sh)
    cuda.syncthreads()
    i = np.int64(t)
    while i < n:
        pre = as_i32(sp[base + i])
        if pre < 0 or (i == 0 and pre != 0):
            flag[0] = 1
        elif i > 0 and pre > np.int64(sa[base + i - 1]) + as_i32(sp[base + i - 1]):
            flag[0] = 1
        elif fixed >= 0 and np.int64(sa[base + i]) + pre != fixed:
            flag[0] = 1
        i += TPB
    cuda.syncthreads()
    if flag[0] != 0:
        block_error(pages, p, E_LENGTH)
        return
    r = base + t
    while r < base + rows:
        if valid[r] != 0:
            k = base + vindex[r]
            lengths[r] = np.int64(sa[k]) + as_i32(sp[k])
        r += TPB


@cuda.jit(cache=True)
def _dba_lengths_kernel(data, chunks, pages, vstart, vend, valid, vindex, lengths, sa, sp):
    sh = cuda.shared.array(TPB, numba.uint64)
    flag = cuda.shared.array(1, numba.int32)
    for p in range(cuda.blockIdx.x, pages.shape[0], cuda.gridDim.x):
        _dba_lengths_page(p, data, chunks, pages, vstart, vend, valid, vindex, lengths, sa, sp, sh, flag)
        cuda.syncthreads()


def measure_bytes(state) -> None:
    """Measure the BYTES chunks: per-row ``lengths``/``str_src``, ``PAGE.error``, ``CHUNK.data_bytes``.

    Runs after the runner's levels, value indices and dictionary indices.

    Parameters
    ----------
    state : DecodeState
        The batch's device arrays, scratch and stream (the runner's).
    """
    pages = state.pages_d
    if pages.shape[0] == 0:
        return
    sa, sb = state.sa, state.sb
    launch(walk_kernel, *page_launch(state, WALK_THREADS), state.data, state.chunks_d, pages, state.vstart, state.vend,
                                                  state.valid, state.lengths, state.dict_off, state.dict_len, sa, sb)
    launch(_measure_kernel, *page_launch(state), state.data, state.chunks_d, pages, state.vstart, state.vend, state.valid,
                                        state.vindex, state.idx, state.dict_off, state.dict_len, state.lengths,
                                        state.str_src, sa, sb)
    if state.has_dba:
        launch(_dba_lengths_kernel, *page_launch(state), state.data, state.chunks_d, pages, state.vstart, state.vend,
                                                state.valid, state.vindex, state.lengths, sa, sb)
    sum_pages(state, True)
