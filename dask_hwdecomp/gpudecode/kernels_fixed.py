"""Kernels for fixed-width and boolean values, dictionary indices and bitmaps.

Measure: :func:`check_kernel` (one thread a page) refuses encodings that
are not for the chunk's kind and value sections too short for the page's
values; :func:`dict_kernel` (one block a page) decodes dictionary indices
(every kind) and RLE booleans into ``idx`` by row, checking indices
against the dictionary page; :func:`totals_kernel` (one thread a chunk)
sums nulls. Write: the output zeroed (a driver memset; :func:`zero_kernel`
under the simulator), then :func:`validity_kernel` and
:func:`bool_kernel` (one thread an output byte: eight rows, so no two
threads write the same byte) and :func:`fixed_kernel` (one thread a row).
"""

from __future__ import annotations

import numpy as np

from ..gpu.cuda_jit import cuda
from .kernels_hybrid import block_hybrid, read_u32
from .kernels_levels import set_error
from .tables import Encoding, OutKind, PageError, PageKind, Physical

__all__ = ["check_kernel", "dict_kernel", "totals_kernel", "zero_kernel", "split_fill_kernel", "validity_kernel",
           "bool_kernel", "fixed_kernel", "physical_width"]

_COPY = int(OutKind.COPY)
_NARROW = int(OutKind.NARROW)
_DECIMAL = int(OutKind.DECIMAL)
_BOOL = int(OutKind.BOOL)
_BYTES = int(OutKind.BYTES)
_PLAIN = int(Encoding.PLAIN)
_PLAIN_DICT = int(Encoding.PLAIN_DICTIONARY)
_RLE_DICT = int(Encoding.RLE_DICTIONARY)
_RLE = int(Encoding.RLE)
_BSS = int(Encoding.BYTE_STREAM_SPLIT)
_DBP = int(Encoding.DELTA_BINARY_PACKED)
_DLBA = int(Encoding.DELTA_LENGTH_BYTE_ARRAY)
_DBA = int(Encoding.DELTA_BYTE_ARRAY)
_BOOLEAN = int(Physical.BOOLEAN)
_INT32 = int(Physical.INT32)
_INT64 = int(Physical.INT64)
_FLOAT = int(Physical.FLOAT)
_DOUBLE = int(Physical.DOUBLE)
_FLBA = int(Physical.FIXED_LEN_BYTE_ARRAY)
_DICT_PAGE = int(PageKind.DICTIONARY)
_E_VALUES = int(PageError.VALUES)
_E_DICT = int(PageError.DICT_INDEX)
_E_BW = int(PageError.BIT_WIDTH)
_E_COUNT = int(PageError.COUNT)
_E_ENCODING = int(PageError.ENCODING)


@cuda.jit(device=True, cache=True)
def physical_width(chunks, c):
    """Bytes of one PLAIN value of chunk ``c``'s physical type; 0 if not a fixed-width type."""
    phys = chunks[c]["physical"]
    if phys == _INT32 or phys == _FLOAT:
        return np.int64(4)
    if phys == _INT64 or phys == _DOUBLE:
        return np.int64(8)
    if phys == _FLBA and chunks[c]["type_length"] > 0:
        return np.int64(chunks[c]["type_length"])
    return np.int64(0)


@cuda.jit(device=True, cache=True)
def _fixed_shape_ok(chunks, c, wp):
    """Whether the chunk's kind, width and physical type are a conversion the write kernel makes."""
    kind = chunks[c]["kind"]
    w = chunks[c]["width"]
    phys = chunks[c]["physical"]
    if wp == 0:
        return False
    if kind == _COPY:
        return w == wp
    if kind == _NARROW:
        return phys == _INT32 and (w == 1 or w == 2)
    if kind == _DECIMAL:
        return w == 16 and wp <= 16 and (phys == _INT32 or phys == _INT64 or phys == _FLBA)
    return False


@cuda.jit(device=True, cache=True)
def _is_dict(enc):
    return enc == _PLAIN_DICT or enc == _RLE_DICT


@cuda.jit(cache=True)
def check_kernel(data_size, chunks, pages, vstart, vend):
    for p in range(cuda.grid(1), pages.shape[0], cuda.gridsize(1)):
        if pages[p]["kind"] == _DICT_PAGE or pages[p]["error"] != 0:
            continue
        c = pages[p]["chunk"]
        kind = chunks[c]["kind"]
        enc = pages[p]["encoding"]
        n = np.int64(pages[p]["nonnull"])
        avail = vend[p] - vstart[p]
        if kind == _BYTES:
            if not (enc == _PLAIN or _is_dict(enc) or enc == _DLBA or enc == _DBA):
                set_error(pages, p, _E_ENCODING)
            continue
        if kind == _BOOL:
            if chunks[c]["physical"] != _BOOLEAN:
                set_error(pages, p, _E_ENCODING)
            elif enc == _PLAIN:
                if (n + 7) // 8 > avail:
                    set_error(pages, p, _E_VALUES)
            elif enc != _RLE:
                set_error(pages, p, _E_ENCODING)
            continue
        wp = physical_width(chunks, c)
        if not _fixed_shape_ok(chunks, c, wp):
            set_error(pages, p, _E_ENCODING)
            continue
        if enc == _PLAIN or enc == _BSS:
            if n * wp > avail:
                set_error(pages, p, _E_VALUES)
        elif _is_dict(enc):
            d = chunks[c]["dict_page"]
            if d < 0 or d >= pages.shape[0] or pages[d]["kind"] != _DICT_PAGE:
                if n > 0:
                    set_error(pages, p, _E_DICT)
            elif (pages[d]["num_values"] < 0 or np.int64(pages[d]["num_values"]) * wp > pages[d]["size"]
                  or pages[d]["offset"] < 0 or pages[d]["offset"] + pages[d]["size"] > data_size):
                set_error(pages, p, _E_VALUES)
        elif enc == _DBP and (chunks[c]["physical"] == _INT32 or chunks[c]["physical"] == _INT64):
            pass  # the DELTA kernels' page
        elif enc == _DBA and chunks[c]["physical"] == _FLBA and kind != _NARROW:
            pass  # the byte-array kernels' page (fixed_size_binary, decimal)
        else:
            set_error(pages, p, _E_ENCODING)


@cuda.jit(cache=True)
def dict_kernel(data, chunks, pages, vstart, vend, vrow, idx):
    shared = cuda.shared.array(8, np.int64)
    # this kernel's own per-page values: block_hybrid uses ``shared``
    params = cuda.shared.array(4, np.int64)
    tid = cuda.threadIdx.x
    for p in range(cuda.blockIdx.x, pages.shape[0], cuda.gridDim.x):
        if pages[p]["kind"] == _DICT_PAGE:
            continue
        c = pages[p]["chunk"]
        enc = pages[p]["encoding"]
        is_dict = _is_dict(enc)
        if not (is_dict or (enc == _RLE and chunks[c]["kind"] == _BOOL)):
            continue
        cuda.syncthreads()
        if tid == 0:
            params[0] = -1
            params[2] = 0
            n = np.int64(pages[p]["nonnull"])
            pos = vstart[p]
            end = vend[p]
            if pages[p]["error"] == 0 and n > 0:
                if is_dict:
                    d = chunks[c]["dict_page"]
                    if d < 0 or d >= pages.shape[0] or pages[d]["kind"] != _DICT_PAGE or pages[d]["num_values"] <= 0:
                        set_error(pages, p, _E_DICT)
                    elif pos >= end:
                        set_error(pages, p, _E_VALUES)
                    elif data[pos] > 32:
                        set_error(pages, p, _E_BW)
                    else:
                        params[0] = pos + 1
                        params[1] = data[pos]
                        params[2] = pages[d]["num_values"]
                else:
                    length = read_u32(data, pos, end)
                    if length < 0 or length > end - pos - 4:
                        set_error(pages, p, _E_VALUES)
                    else:
                        params[0] = pos + 4
                        end = pos + 4 + length
                        params[1] = 1
                        params[2] = 2
                params[3] = end
        cuda.syncthreads()
        start = params[0]
        if start < 0:
            continue
        bw = params[1]
        limit = params[2]
        end = params[3]
        n = np.int64(pages[p]["nonnull"])
        rs = pages[p]["row_start"]
        status = block_hybrid(data, start, end, bw, n, shared, idx, rs, vrow, 1, limit, 0)
        if tid == 0 and status != 0:
            set_error(pages, p, _E_VALUES if status == 1 or not is_dict else _E_DICT)


@cuda.jit(cache=True)
def totals_kernel(chunks, pages):
    for c in range(cuda.grid(1), chunks.shape[0], cuda.gridsize(1)):
        first = chunks[c]["first_page"]
        count = chunks[c]["num_pages"]
        nulls = np.int64(0)
        rows = np.int64(0)
        if first >= 0 and count >= 0 and first + count <= pages.shape[0]:
            for p in range(first, first + count):
                rows += pages[p]["num_values"]
                nulls += np.int64(pages[p]["num_values"]) - pages[p]["nonnull"]
            if rows != chunks[c]["num_rows"] and count > 0:
                set_error(pages, first, _E_COUNT)
        chunks[c]["null_count"] = nulls if chunks[c]["max_def"] > 0 else 0
        if chunks[c]["kind"] != _BYTES:
            chunks[c]["data_bytes"] = 0


@cuda.jit(cache=True)
def zero_kernel(out):
    for i in range(cuda.grid(1), out.shape[0], cuda.gridsize(1)):
        out[i] = 0


@cuda.jit(cache=True)
def split_fill_kernel(a, split, low, high):
    """Elements of ``a`` before ``split`` set to ``low``, the others to ``high`` (the simulator's scratch fill)."""
    for i in range(cuda.grid(1), a.shape[0], cuda.gridsize(1)):
        a[i] = low if i < split else high


@cuda.jit(device=True, cache=True)
def _chunk_of(byte_base, b):
    """The chunk whose output bytes ``[byte_base[c], byte_base[c + 1])`` hold slot ``b``."""
    lo = 0
    hi = byte_base.shape[0] - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if byte_base[mid] <= b:
            lo = mid
        else:
            hi = mid
    return lo


@cuda.jit(device=True, cache=True)
def _bitmap_byte(chunks, byte_base, b, values, out, valid):
    """Slot ``b`` of the batch's bitmap bytes: (destination in ``out``, first row, rows in the byte).

    ``values``: the values bitmap of a BOOL chunk (at ``out_values``); else
    the validity bitmap of a nullable chunk (at ``out_valid``). The
    destination is -1 where slot ``b``'s chunk has no such bitmap, or the
    byte or its rows fall outside ``out`` or ``valid``.
    """
    c = _chunk_of(byte_base, b)
    j = b - byte_base[c]
    if values:
        has = chunks[c]["kind"] == _BOOL
        dst = chunks[c]["out_values"] + j
    else:
        has = chunks[c]["max_def"] != 0
        dst = chunks[c]["out_valid"] + j
    r0 = chunks[c]["row_base"] + 8 * j
    n = min(chunks[c]["num_rows"] - 8 * j, 8)
    if not has or dst < 0 or dst >= out.shape[0] or r0 < 0 or r0 + n > valid.shape[0]:
        dst = -1
    return dst, r0, n


@cuda.jit(cache=True)
def validity_kernel(chunks, byte_base, valid, out):
    for b in range(cuda.grid(1), byte_base[byte_base.shape[0] - 1], cuda.gridsize(1)):
        dst, r0, n = _bitmap_byte(chunks, byte_base, b, False, out, valid)
        if dst >= 0:
            acc = 0
            for i in range(n):
                if valid[r0 + i] != 0:
                    acc |= 1 << i
            out[dst] = acc


@cuda.jit(cache=True)
def bool_kernel(data, chunks, pages, byte_base, valid, vindex, row_page, idx, vstart, vend, out):
    total = byte_base[byte_base.shape[0] - 1]
    for b in range(cuda.grid(1), total, cuda.gridsize(1)):
        dst, r0, n = _bitmap_byte(chunks, byte_base, b, True, out, valid)
        if dst < 0:
            continue
        acc = 0
        for i in range(n):
            r = r0 + i
            p = row_page[r]
            if p < 0 or valid[r] == 0 or pages[p]["error"] != 0:
                continue
            bit = 0
            if pages[p]["encoding"] == _RLE:
                bit = idx[r] & 1
            else:
                k = np.int64(vindex[r])
                pos = vstart[p] + (k >> 3)
                if pos < vend[p]:
                    bit = (data[pos] >> (k & 7)) & 1
            acc |= bit << i
        out[dst] = acc


@cuda.jit(device=True, cache=True)
def _value_byte(data, src, stride, wp, big_endian, i):
    """Byte ``i`` (little-endian order) of the value at ``src``, sign-extended past ``wp`` bytes."""
    if i < wp:
        return np.int64(data[src + ((wp - 1 - i) if big_endian else i) * stride])
    top = data[src] if big_endian else data[src + (wp - 1) * stride]
    return np.int64(0xFF) if top >= 0x80 else np.int64(0)


@cuda.jit(device=True, cache=True)
def _signed_byte(b):
    """A word's top byte as signed, so that composing the word never leaves its signed range."""
    return b - 256 if b >= 128 else b


@cuda.jit(cache=True)
def fixed_kernel(data, chunks, pages, valid, vindex, row_page, idx, vstart, vend, out, out4, out8):
    """One thread a row; ``out4``/``out8`` are ``out`` as int32/int64 (a whole word a value where aligned)."""
    for r in range(cuda.grid(1), valid.shape[0], cuda.gridsize(1)):
        p = row_page[r]
        if p < 0 or valid[r] == 0 or pages[p]["error"] != 0:
            continue
        c = pages[p]["chunk"]
        kind = chunks[c]["kind"]
        if kind != _COPY and kind != _NARROW and kind != _DECIMAL:
            continue
        w = np.int64(chunks[c]["width"])
        wp = physical_width(chunks, c)
        dst = chunks[c]["out_values"] + (r - chunks[c]["row_base"]) * w
        if dst < 0 or dst + w > out.shape[0]:
            continue
        enc = pages[p]["encoding"]
        k = np.int64(vindex[r])
        stride = np.int64(1)
        if enc == _PLAIN:
            src = vstart[p] + k * wp
            if src + wp > vend[p]:
                continue
        elif enc == _BSS:
            stride = np.int64(pages[p]["nonnull"])
            src = vstart[p] + k
            if src + (wp - 1) * stride >= vend[p]:
                continue
        elif _is_dict(enc):
            d = chunks[c]["dict_page"]
            if d < 0:
                continue
            src = pages[d]["offset"] + np.int64(idx[r]) * wp
            if src < 0 or src + wp > pages[d]["offset"] + pages[d]["size"] or src + wp > data.shape[0]:
                continue
        else:
            continue  # DELTA_BINARY_PACKED: the DELTA kernels write it
        # DECIMAL: INT32/INT64 sign-extended; FLBA big-endian two's complement,
        # reversed and sign-extended. Others: the value's first ``w`` bytes.
        big = kind == _DECIMAL and chunks[c]["physical"] == _FLBA
        n = w if kind == _DECIMAL else min(w, wp)
        if (w == 8 or w == 16) and (dst & 7) == 0 and dst + w <= out8.shape[0] * 8:
            for word in range(w // 8):
                acc = np.int64(0)
                for i in range(7):
                    acc |= _value_byte(data, src, stride, wp, big, word * 8 + i) << (8 * i)
                out8[(dst >> 3) + word] = acc + (_signed_byte(_value_byte(data, src, stride, wp, big, word * 8 + 7))
                                                 << 56)
        elif w == 4 and (dst & 3) == 0 and dst + 4 <= out4.shape[0] * 4:
            acc = np.int64(0)
            for i in range(3):
                acc |= _value_byte(data, src, stride, wp, big, i) << (8 * i)
            out4[dst >> 2] = acc + (_signed_byte(_value_byte(data, src, stride, wp, big, 3)) << 24)
        else:
            for i in range(n):
                out[dst + i] = _value_byte(data, src, stride, wp, big, i)
