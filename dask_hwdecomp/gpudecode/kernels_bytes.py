"""BYTE_ARRAY columns on the GPU: PLAIN, dictionary, DELTA_LENGTH_BYTE_ARRAY, DELTA_BYTE_ARRAY.

**measure** (:func:`measure_bytes`) fills, for every non-null row of a BYTES
chunk, ``state.lengths[r]`` (its value's length) and ``state.str_src[r]``
(where its bytes start in ``data``; for DELTA_BYTE_ARRAY the start of its
*suffix*), and adds each chunk's string bytes to ``CHUNK.data_bytes``:

- dictionary pages (PLAIN byte arrays): a page's block walks the lengths
  into ``dict_off``/``dict_len`` (:mod:`.kernels_walk`: serial by format,
  walked a window at a time by pointer doubling);
- PLAIN data pages: walked the same way into a scratch in the page's row
  space, then the page's thread block places them at their rows;
- dictionary data pages: a thread a row looks its entry up;
- DELTA_LENGTH_BYTE_ARRAY / DELTA_BYTE_ARRAY: the DELTA_BINARY_PACKED
  lengths decoded by the page's thread block
  (:func:`~dask_hwdecomp.gpudecode.kernels_delta.dbp_decode`), the bytes'
  starts a block scan of the lengths.

**write** (:func:`write_bytes`) sums each page's bytes, scans the sums over
each chunk's pages (one thread a chunk; an int32 offset past 2^31-1 is
``PageError.LENGTH``), then each page's thread block scans its rows into
the offsets, and the copy kernel copies every row's bytes (a thread a
short string, a warp a long one, over all rows of the batch at once, not a
block a page). DELTA_BYTE_ARRAY values are copied in value order by every
thread of the page's block, thread
``t`` taking bytes ``j = t (mod TPB)`` of each value: byte ``j`` of a
value's prefix is byte ``j`` of the previous value, which the same thread
wrote, so no thread waits for another.

Every read is checked against the page body; corrupt pages get a
``PageError`` and are skipped by the later kernels; every write is
checked against the chunk's placed output.
"""

from __future__ import annotations

import numba
import numpy as np

from .cuda_jit import cuda
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
    K_COPY,
    K_DECIMAL,
    MAX_BLOCKS,
    P_DICTIONARY,
    PHYS_FLBA,
    TPB,
    block_scan,
    dbp_decode,
    dbp_walk,
    out_views,
    page_blocks,
    set_error,
    thread_blocks,
)
from .kernels_walk import THREADS as WALK_THREADS
from .kernels_walk import walk_kernel

__all__ = ["measure_bytes", "write_bytes"]

_SIM = bool(getattr(numba.config, "ENABLE_CUDASIM", 0))
# The copy kernel: a thread a row; strings of _LONG bytes or more are
# copied by a group of _LANES threads (a warp), coalesced.
_COPY_THREADS = 32 if _SIM else 256
_LANES = 8 if _SIM else 32
_LONG = 32
_I32_MAX = 0x7FFFFFFF
_E_ENCODING = 8


@cuda.jit(device=True, cache=True)
def _as_i32(v):
    """A decoded DELTA length (uint64 bits of an INT32) as a signed int64."""
    x = np.int64(v & np.uint64(0xFFFFFFFF))
    if x > _I32_MAX:
        x -= np.int64(1) << 32
    return x


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
def _is_bytes_data(pages, chunks, p, c):
    return pages[p]["kind"] != P_DICTIONARY and chunks[c]["kind"] == K_BYTES


@cuda.jit(device=True, cache=True)
def _is_fixed_dba(pages, chunks, p, c):
    """A DELTA_BYTE_ARRAY page of a FIXED_LEN_BYTE_ARRAY chunk (fixed_size_binary, decimal)."""
    kind = chunks[c]["kind"]
    return (pages[p]["kind"] != P_DICTIONARY and pages[p]["encoding"] == ENC_DBA
            and chunks[c]["physical"] == PHYS_FLBA and (kind == K_COPY or kind == K_DECIMAL))


@cuda.jit(device=True, cache=True)
def _measured_here(pages, chunks, p, c):
    """Pages whose per-row lengths the measure kernels fill."""
    return _is_bytes_data(pages, chunks, p, c) or _is_fixed_dba(pages, chunks, p, c)


@cuda.jit(device=True, cache=True)
def _measure_page(p, data, chunks, pages, vstart, vend, valid, vindex, idx, dict_off, dict_len, lengths, str_src, sa, sb,
                  sh, shi):
    t = cuda.threadIdx.x
    c = pages[p]["chunk"]
    if not _measured_here(pages, chunks, p, c) or pages[p]["error"] != 0:
        return
    enc = pages[p]["encoding"]
    n = np.int64(pages[p]["nonnull"])
    rows = np.int64(pages[p]["num_values"])
    base = pages[p]["row_start"]
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
            err, total, pos = dbp_walk(data, s, e, 32)
            shi[0] = err
            if err == 0 and total < n:
                shi[0] = E_COUNT
            shi[1] = pos
        elif enc == ENC_DBA:
            err, total, pos = dbp_walk(data, s, e, 32)
            shi[0] = err
            if err == 0 and total < n:
                shi[0] = E_COUNT
            shi[2] = pos
            if shi[0] == 0:
                err, total, pos = dbp_walk(data, pos, e, 32)
                shi[0] = err
                if err == 0 and total < n:
                    shi[0] = E_COUNT
                shi[1] = pos
        elif enc != ENC_PLAIN_DICTIONARY and enc != ENC_RLE_DICTIONARY:
            shi[0] = _E_ENCODING
        elif chunks[c]["dict_page"] < 0 or pages[chunks[c]["dict_page"]]["error"] != 0:
            shi[0] = E_DICT_INDEX
    cuda.syncthreads()
    if shi[0] != 0:
        if t == 0:
            set_error(pages, p, shi[0])
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
                x = _as_i32(sa[base + i])
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
    c = pages[p]["chunk"]
    if (not _measured_here(pages, chunks, p, c) or pages[p]["encoding"] != ENC_DBA
            or pages[p]["error"] != 0):
        return
    n = np.int64(pages[p]["nonnull"])
    rows = np.int64(pages[p]["num_values"])
    base = pages[p]["row_start"]
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
        pre = _as_i32(sp[base + i])
        if pre < 0 or (i == 0 and pre != 0):
            flag[0] = 1
        elif i > 0 and pre > np.int64(sa[base + i - 1]) + _as_i32(sp[base + i - 1]):
            flag[0] = 1
        elif fixed >= 0 and np.int64(sa[base + i]) + pre != fixed:
            flag[0] = 1
        i += TPB
    cuda.syncthreads()
    if flag[0] != 0:
        if t == 0:
            set_error(pages, p, E_LENGTH)
        return
    r = base + t
    while r < base + rows:
        if valid[r] != 0:
            k = base + vindex[r]
            lengths[r] = np.int64(sa[k]) + _as_i32(sp[k])
        r += TPB


@cuda.jit(cache=True)
def _dba_lengths_kernel(data, chunks, pages, vstart, vend, valid, vindex, lengths, sa, sp):
    sh = cuda.shared.array(TPB, numba.uint64)
    flag = cuda.shared.array(1, numba.int32)
    for p in range(cuda.blockIdx.x, pages.shape[0], cuda.gridDim.x):
        _dba_lengths_page(p, data, chunks, pages, vstart, vend, valid, vindex, lengths, sa, sp, sh, flag)
        cuda.syncthreads()


@cuda.jit(device=True, cache=True)
def _page_sum_page(p, chunks, pages, valid, lengths, page_bytes, sh):
    t = cuda.threadIdx.x
    c = pages[p]["chunk"]
    if t == 0:
        page_bytes[p] = 0
    if not _is_bytes_data(pages, chunks, p, c) or pages[p]["error"] != 0:
        return
    rows = np.int64(pages[p]["num_values"])
    base = pages[p]["row_start"]
    total = np.uint64(0)
    tile = np.int64(0)
    while tile < rows:
        r = base + tile + t
        ln = np.uint64(0)
        if tile + t < rows and valid[r] != 0:
            ln = np.uint64(lengths[r])
        _incl, whole = block_scan(sh, ln)
        total = total + whole
        tile += TPB
    if t == 0:
        page_bytes[p] = np.int64(total)


@cuda.jit(cache=True)
def _page_sum_kernel(chunks, pages, valid, lengths, page_bytes):
    sh = cuda.shared.array(TPB, numba.uint64)
    for p in range(cuda.blockIdx.x, pages.shape[0], cuda.gridDim.x):
        _page_sum_page(p, chunks, pages, valid, lengths, page_bytes, sh)
        cuda.syncthreads()


@cuda.jit(device=True, cache=True)
def _chunk_one(c, chunks, pages, page_bytes, page_base, measure):
    """Per chunk: add its bytes to ``data_bytes`` (measure), or scan its pages' bytes (write)."""
    if chunks[c]["kind"] != K_BYTES:
        return
    first = chunks[c]["first_page"]
    total = np.int64(0)
    for q in range(chunks[c]["num_pages"]):
        p = first + q
        page_base[p] = total
        total += page_bytes[p]
        # int32 offsets: found in measure, before the host sizes the output
        if chunks[c]["width"] == 4 and total > _I32_MAX:
            set_error(pages, p, E_LENGTH)
    if measure:
        chunks[c]["data_bytes"] = chunks[c]["data_bytes"] + total


@cuda.jit(cache=True)
def _chunk_kernel(chunks, pages, page_bytes, page_base, measure):
    for c in range(cuda.grid(1), chunks.shape[0], cuda.gridsize(1)):
        _chunk_one(c, chunks, pages, page_bytes, page_base, measure)


@cuda.jit(device=True, cache=True)
def _write_page(p, data, chunks, pages, vstart, vend, valid, vindex, lengths, str_src, page_base, sa, sd, out8, out32, out64, sh, first_src):
    t = cuda.threadIdx.x
    c = pages[p]["chunk"]
    if not _is_bytes_data(pages, chunks, p, c) or pages[p]["error"] != 0:
        return
    enc = pages[p]["encoding"]
    n = np.int64(pages[p]["nonnull"])
    rows = np.int64(pages[p]["num_values"])
    base = pages[p]["row_start"]
    row_base = chunks[c]["row_base"]
    crows = chunks[c]["num_rows"]
    width = chunks[c]["width"]
    ov = chunks[c]["out_values"]
    od = chunks[c]["out_data"]
    dend = od + chunks[c]["data_bytes"]
    if dend > out8.shape[0]:
        dend = np.int64(out8.shape[0])
    is_dba = enc == ENC_DBA
    # offsets: a block scan of the page's lengths from the page's base
    carry = np.uint64(page_base[p])
    tile = np.int64(0)
    while tile < rows:
        r = base + tile + t
        ln = np.uint64(0)
        if tile + t < rows and valid[r] != 0:
            ln = np.uint64(lengths[r])
        incl, whole = block_scan(sh, ln)
        if tile + t < rows:
            off = carry + incl - ln
            row = r - row_base
            if width == 4:
                i = (ov >> 2) + row
                if i < out32.shape[0]:
                    out32[i] = np.uint32(off & np.uint64(0xFFFFFFFF))
            else:
                i = (ov >> 3) + row
                if i < out64.shape[0]:
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
    r = base + t
    while r < base + rows:
        if valid[r] != 0 and vindex[r] == 0:
            first_src[0] = str_src[r]
        r += TPB
    dbp_decode(data, vstart[p], vend[p], n, sa, base, sh)
    cuda.syncthreads()
    src = first_src[0]
    prev = np.int64(0)
    for i in range(n):
        pre = _as_i32(sa[base + i])
        dst = od + np.int64(sd[base + i])
        if i + 1 < n:
            ln = np.int64(sd[base + i + 1]) - np.int64(sd[base + i])
        else:
            ln = np.int64(carry) - np.int64(sd[base + i])
        if dst + ln > dend or src + ln - pre > data.shape[0] or pre > ln or ln < 0:
            break
        j = np.int64(t)
        while j < ln:
            if j < pre:
                out8[dst + j] = out8[prev + j]
            else:
                out8[dst + j] = data[src + j - pre]
            j += TPB
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
    if not _is_bytes_data(pages, chunks, p, c) or pages[p]["error"] != 0 or pages[p]["encoding"] == ENC_DBA:
        return none
    row = r - chunks[c]["row_base"]
    ov = chunks[c]["out_values"]
    od = chunks[c]["out_data"]
    dend = od + chunks[c]["data_bytes"]
    if dend > out8.shape[0]:
        dend = np.int64(out8.shape[0])
    if chunks[c]["width"] == 4:
        i = (ov >> 2) + row
        if i >= out32.shape[0]:
            return none
        dst = od + np.int64(out32[i])
    else:
        i = (ov >> 3) + row
        if i >= out64.shape[0]:
            return none
        dst = od + np.int64(out64[i])
    ln = np.int64(lengths[r])
    src = np.int64(str_src[r])
    if ln < 0 or dst + ln > dend or src + ln > data.shape[0]:
        return none
    return dst, src, ln


@cuda.jit(cache=True)
def _copy_kernel(data, chunks, pages, valid, row_page, lengths, str_src, out8, out32, out64):
    """The string bytes of every row of the batch (not DELTA_BYTE_ARRAY pages), after the offsets.

    A block takes :data:`_COPY_THREADS` rows at a time: short strings a
    thread each, then each group of :data:`_LANES` threads copies the long
    ones of the block's rows together, so that a page of long strings
    loads and stores whole lines.
    """
    sdst = cuda.shared.array(_COPY_THREADS, numba.int64)
    ssrc = cuda.shared.array(_COPY_THREADS, numba.int64)
    slen = cuda.shared.array(_COPY_THREADS, numba.int64)
    t = cuda.threadIdx.x
    lane = t % _LANES
    group = t // _LANES
    groups = _COPY_THREADS // _LANES
    total = valid.shape[0]
    tile = np.int64(cuda.blockIdx.x) * _COPY_THREADS
    while tile < total:
        r = tile + t
        dst = np.int64(0)
        src = np.int64(0)
        ln = np.int64(-1)
        if r < total:
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


@cuda.jit(device=True, cache=True)
def _write_fixed_dba_page(p, data, chunks, pages, vstart, vend, valid, vindex, lengths, str_src, sa, sd, out8, sh, first_src):
    """DELTA_BYTE_ARRAY pages of FIXED_LEN_BYTE_ARRAY chunks: values at ``width`` bytes a row.

    COPY keeps the bytes; DECIMAL reverses the big-endian value into 16
    little-endian bytes and sign-extends it. Thread ``t`` takes bytes
    ``j = t (mod TPB)`` of every value, so the prefix it reads from the
    previous value is one it wrote.
    """
    t = cuda.threadIdx.x
    c = pages[p]["chunk"]
    if not _is_fixed_dba(pages, chunks, p, c) or pages[p]["error"] != 0:
        return
    n = np.int64(pages[p]["nonnull"])
    rows = np.int64(pages[p]["num_values"])
    base = pages[p]["row_start"]
    row_base = chunks[c]["row_base"]
    width = np.int64(chunks[c]["width"])
    size = np.int64(chunks[c]["type_length"])
    dec = chunks[c]["kind"] == K_DECIMAL
    ov = chunks[c]["out_values"]
    oend = ov + chunks[c]["num_rows"] * width
    if oend > out8.shape[0]:
        oend = np.int64(out8.shape[0])
    if size <= 0 or size > width or (dec and width != 16):
        if t == 0:
            set_error(pages, p, E_LENGTH)
        return
    r = base + t
    while r < base + rows:
        if valid[r] != 0:
            sd[base + vindex[r]] = np.uint64(ov + (r - row_base) * width)
            if vindex[r] == 0:
                first_src[0] = str_src[r]
        r += TPB
    dbp_decode(data, vstart[p], vend[p], n, sa, base, sh)
    cuda.syncthreads()
    src = first_src[0]
    prev = np.int64(0)
    for i in range(n):
        pre = _as_i32(sa[base + i])
        dst = np.int64(sd[base + i])
        if dst + width > oend or src + size - pre > data.shape[0] or pre > size:
            break
        j = np.int64(t)
        while j < size:
            if dec:
                at = size - 1 - j
            else:
                at = j
            if j < pre:
                b = out8[prev + at]
            else:
                b = data[src + j - pre]
            out8[dst + at] = b
            if dec and j == 0:
                ext = np.uint8(0xFF) if b >= 128 else np.uint8(0)
                for k in range(size, 16):
                    out8[dst + k] = ext
            j += TPB
        src += size - pre
        prev = dst


@cuda.jit(cache=True)
def _write_fixed_dba_kernel(data, chunks, pages, vstart, vend, valid, vindex, lengths, str_src, sa, sd, out8):
    sh = cuda.shared.array(TPB, numba.uint64)
    first_src = cuda.shared.array(1, numba.int64)
    for p in range(cuda.blockIdx.x, pages.shape[0], cuda.gridDim.x):
        _write_fixed_dba_page(p, data, chunks, pages, vstart, vend, valid, vindex, lengths, str_src, sa, sd, out8, sh, first_src)
        cuda.syncthreads()


def measure_bytes(state) -> None:
    """Measure the BYTES chunks: per-row ``lengths``/``str_src``, ``PAGE.error``, ``CHUNK.data_bytes``.

    Runs after the runner's levels, value indices and dictionary indices.
    """
    pages = state.pages_d
    np_ = pages.shape[0]
    if np_ == 0:
        return
    s = state.stream
    sa, sb, page_bytes, page_base = state.sa, state.sb, state.page_bytes, state.page_base
    walk_kernel[page_blocks(np_), WALK_THREADS, s](state.data, state.chunks_d, pages, state.vstart, state.vend,
                                                    state.valid, state.lengths, state.dict_off, state.dict_len, sa, sb)
    _measure_kernel[page_blocks(np_), TPB, s](state.data, state.chunks_d, pages, state.vstart, state.vend, state.valid,
                                 state.vindex, state.idx, state.dict_off, state.dict_len, state.lengths,
                                 state.str_src, sa, sb)
    if state.has_dba:
        _dba_lengths_kernel[page_blocks(np_), TPB, s](state.data, state.chunks_d, pages, state.vstart, state.vend,
                                                      state.valid, state.vindex, state.lengths, sa, sb)
    _page_sum_kernel[page_blocks(np_), TPB, s](state.chunks_d, pages, state.valid, state.lengths, page_bytes)
    nc = state.chunks_d.shape[0]
    _chunk_kernel[thread_blocks(nc), TPB, s](state.chunks_d, pages, page_bytes, page_base, True)


def write_bytes(state, out) -> None:
    """Write the BYTES chunks' offsets and string bytes into ``out`` (placed by ``place_outputs``)."""
    pages = state.pages_d
    np_ = pages.shape[0]
    if np_ == 0:
        return
    s = state.stream
    # the measure's scratch again: every step before runs on this stream
    sa, sd, page_bytes, page_base = state.sa, state.sb, state.page_bytes, state.page_base
    _page_sum_kernel[page_blocks(np_), TPB, s](state.chunks_d, pages, state.valid, state.lengths, page_bytes)
    nc = state.chunks_d.shape[0]
    _chunk_kernel[thread_blocks(nc), TPB, s](state.chunks_d, pages, page_bytes, page_base, False)
    o8, _o16, o32, o64 = out_views(out)
    _write_kernel[page_blocks(np_), TPB, s](state.data, state.chunks_d, pages, state.vstart, state.vend, state.valid,
                               state.vindex, state.lengths, state.str_src, page_base, sa, sd, o8, o32, o64)
    total = state.valid.shape[0]
    if total:
        blocks = max(1, min((total + _COPY_THREADS - 1) // _COPY_THREADS, 4 if _SIM else MAX_BLOCKS))
        _copy_kernel[blocks, _COPY_THREADS, s](state.data, state.chunks_d, pages, state.valid, state.row_page,
                                               state.lengths, state.str_src, o8, o32, o64)
    if state.has_dba:
        _write_fixed_dba_kernel[page_blocks(np_), TPB, s](state.data, state.chunks_d, pages, state.vstart, state.vend,
                                                          state.valid, state.vindex, state.lengths, state.str_src, sa,
                                                          sd, o8)
