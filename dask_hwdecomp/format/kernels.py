"""Compiled per-page work: page-header walk, header re-encoding, codec framing, placement, fill.

These numba kernels do, over numpy byte arrays and without the GIL, what
:func:`~dask_hwdecomp.format.pages.scan_chunk`,
:func:`~dask_hwdecomp.format.codecs.plan_body` and
:func:`~dask_hwdecomp.format.layout.build_layout` do per page in Python.
The Python code stays the reference: a kernel only ever answers

* ``OK``: the page headers are exactly as the reference would decode them,
  and the results equal the reference's;
* ``ERROR``: the reference would (most probably) raise here;
* ``FALLBACK``: the bytes are valid but unusual (fields out of order or
  repeated, non-minimal varints, containers in a header), so that the
  reference's re-encoding could differ from a byte copy.

The caller (:mod:`~dask_hwdecomp.format.fastlayout`) runs the reference for
``ERROR`` and ``FALLBACK``, so every error keeps its exact type and message.
Every check the reference makes (Thrift bounds, depth, field-id range,
integer ranges, sizes against the chunk and ``max_page_bytes``, v2 level
sizes, stored sizes, codec framing) is made here too, in the same order
per page, so ``OK`` is never answered where the reference raises.
"""

from __future__ import annotations

import numpy as np
from numba import njit

OK, ERROR, FALLBACK = 0, 1, 2

# Helpers called with constants have explicit signatures: numba would
# otherwise compile one version per combination of literal arguments, which
# multiplies the first (uncached) compile time.

# Thrift compact type ids (see thrift.T)
_BOOL_T, _BOOL_F, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _STRUCT = 1, 2, 3, 4, 5, 6, 7, 8, 12
_STOP = 0
_LIST, _SET, _MAP = 9, 10, 11

# field table columns
F_ID, F_TYPE, F_VSTART, F_VEND, F_VAL, F_CANON = 0, 1, 2, 3, 4, 5
_NF = 6
MAX_FIELDS = 64

# page table columns (offsets relative to the chunk start)
P_TYPE, P_HSTART, P_BSTART, P_CSIZE, P_USIZE, P_LEVELS, P_COMPRESSED = 0, 1, 2, 3, 4, 5, 6
P_HOFF, P_HLEN, P_JLO, P_JHI, P_HASCRC, P_CRC = 7, 8, 9, 10, 11, 12
NP = 13

# job table columns: src absolute in the batch source, dst relative to the page's value start
J_ALGO, J_SRC, J_SRCSIZE, J_DST, J_DSTSIZE, J_CRC, J_PRE = 0, 1, 2, 3, 4, 5, 6
NJ = 7
# Algo codes (fastlayout maps them to codecs.Algo)
A_SNAPPY, A_DEFLATE, A_GZIP, A_LZ4, A_ZSTD, A_BROTLI = 0, 1, 2, 3, 4, 5

# chunk result columns
C_STATUS, C_PAGE, C_PLO, C_PHI = 0, 1, 2, 3

# header value slots
_H_NV5_OK, _H_NV5, _H_NV7_OK, _H_NV7, _H_N0, _H_N8, _H_END = 0, 1, 2, 3, 4, 5, 6


@njit(nogil=True, cache=True)
def _varint(b, pos, end, maxb):
    """(status, pos, low 63 bits, bit 63, overflow past 64 bits, canonical)."""
    n = 0
    hi = 0
    ov = False
    shift = 0
    count = 0
    stop = pos + maxb
    if stop > end:
        stop = end
    while pos < stop:
        x = np.int64(b[pos])
        pos += 1
        count += 1
        part = x & 0x7F
        if shift < 63:
            n |= part << shift
        else:
            hi = part & 1
            if part > 1:
                ov = True
        if x < 0x80:
            return OK, pos, n, hi, ov, count == 1 or x != 0
        shift += 7
    return ERROR, pos, n, hi, ov, False


@njit("int64(int64, int64)", nogil=True, cache=True)
def _zigzag(n, hi):
    return ((n >> 1) | (hi << 62)) ^ (-(n & 1))


@njit("boolean(int64, int64, boolean, int64)", nogil=True, cache=True)
def _int_in_range(n, hi, ov, ttype):
    if ttype == _I16:
        return n < 65536
    if ttype == _I32:
        return n < 4294967296
    return not ov


@njit(nogil=True, cache=True)
def _field_id(b, pos, end, head, last):
    """(status, pos, fid) of a field header whose first byte is ``head``."""
    delta = head >> 4
    if delta:
        fid = last + delta
        if fid >= 32768:
            return ERROR, pos, 0
        return OK, pos, fid
    st, pos, n, hi, ov, canon = _varint(b, pos, end, 3)
    if st != OK or not _int_in_range(n, hi, ov, _I16):
        return ERROR, pos, 0
    return OK, pos, _zigzag(n, hi)


@njit(nogil=True, cache=True)
def _scalar(b, pos, end, ttype, max_string):
    """Decode a scalar as the reference's eager decoder does: (status, pos, value, canonical)."""
    if ttype == _I16 or ttype == _I32 or ttype == _I64:
        maxb = 3 if ttype == _I16 else (5 if ttype == _I32 else 10)
        st, pos, n, hi, ov, canon = _varint(b, pos, end, maxb)
        if st != OK or not _int_in_range(n, hi, ov, ttype):
            return ERROR, pos, 0, False
        return OK, pos, _zigzag(n, hi), canon
    if ttype == _BINARY:
        st, pos, n, hi, ov, canon = _varint(b, pos, end, 5)
        if st != OK or n > max_string or n > end - pos:
            return ERROR, pos, 0, False
        return OK, pos + n, n, canon
    if ttype == _BYTE:
        if pos >= end:
            return ERROR, pos, 0, False
        x = np.int64(b[pos])
        return OK, pos + 1, x - 256 if x > 127 else x, True
    if ttype == _DOUBLE:
        if end - pos < 8:
            return ERROR, pos, 0, False
        return OK, pos + 8, 0, True
    if ttype == _LIST or ttype == _SET or ttype == _MAP:
        return FALLBACK, pos, 0, False
    return ERROR, pos, 0, False


@njit(nogil=True, cache=True)
def _skip_struct(b, pos, end, depth, max_string, max_depth, lasts):
    """Check a struct at ``depth`` as the reference's lazy skip does: (status, pos)."""
    if depth >= max_depth:
        return ERROR, pos
    level = 0
    lasts[0] = 0
    while True:
        if pos >= end:
            return ERROR, pos
        head = np.int64(b[pos])
        pos += 1
        if head & 0x0F == 0:  # STOP whatever the high nibble, as Apache Thrift reads it
            if level == 0:
                return OK, pos
            level -= 1
            depth -= 1
            continue
        ftype = head & 0x0F
        st, pos, fid = _field_id(b, pos, end, head, lasts[level])
        if st != OK:
            return ERROR, pos
        lasts[level] = fid
        if ftype == _BOOL_T or ftype == _BOOL_F:
            continue
        if ftype == _I16 or ftype == _I32 or ftype == _I64:
            maxb = 3 if ftype == _I16 else (5 if ftype == _I32 else 10)
            st, pos, n, hi, ov, canon = _varint(b, pos, end, maxb)
            if st != OK:
                return ERROR, pos
        elif ftype == _BINARY:
            st, pos, n, hi, ov, canon = _varint(b, pos, end, 5)
            if st != OK or n > max_string or n > end - pos:
                return ERROR, pos
            pos += n
        elif ftype == _BYTE:
            if pos >= end:
                return ERROR, pos
            pos += 1
        elif ftype == _DOUBLE:
            if end - pos < 8:
                return ERROR, pos
            pos += 8
        elif ftype == _STRUCT:
            if depth + 1 >= max_depth:
                return ERROR, pos
            level += 1
            depth += 1
            lasts[level] = 0
        elif ftype == _LIST or ftype == _SET or ftype == _MAP:
            return FALLBACK, pos
        else:
            return ERROR, pos


@njit(nogil=True, cache=True)
def _next_field(b, pos, end, last, tbl, nf):
    """(status, pos, fid, ttype) of the next field header of a struct whose table holds ``nf`` fields.

    The struct's STOP gives ttype ``_STOP`` (any high nibble, as the
    reference reads it); a field out of order, or past the table's room,
    is FALLBACK (the reference re-encodes such a header).
    """
    if pos >= end:
        return ERROR, pos, 0, _STOP
    head = np.int64(b[pos])
    pos += 1
    ttype = head & 0x0F
    if ttype == _STOP:
        return OK, pos, 0, _STOP
    st, pos, fid = _field_id(b, pos, end, head, last)
    if st != OK:
        return ERROR, pos, fid, ttype
    if nf == MAX_FIELDS or (nf and fid <= tbl[nf - 1, F_ID]):
        return FALLBACK, pos, fid, ttype
    return OK, pos, fid, ttype


@njit(nogil=True, cache=True)
def _bool_field(ttype):
    """(value, canonical type) of a compact-protocol boolean field: its type carries the value."""
    return (1 if ttype == _BOOL_T else 0), _BOOL_T


@njit("int64(int64[:, ::1], int64, int64, int64, int64, int64, int64, boolean)", nogil=True, cache=True)
def _record(tbl, nf, fid, ttype, start, end, val, canon):
    """Write one decoded field as row ``nf`` of a field table; the next row."""
    tbl[nf, F_ID] = fid
    tbl[nf, F_TYPE] = ttype
    tbl[nf, F_VSTART] = start
    tbl[nf, F_VEND] = end
    tbl[nf, F_VAL] = val
    tbl[nf, F_CANON] = 1 if canon else 0
    return nf + 1


@njit(nogil=True, cache=True)
def _fields1(b, pos, end, tbl, max_string, max_depth, lasts):
    """Fields of a struct nested once (decoded eagerly, its own structs skipped): (status, pos, count)."""
    if 1 >= max_depth:
        return ERROR, pos, 0
    last = 0
    nf = 0
    while True:
        st, pos, fid, ttype = _next_field(b, pos, end, last, tbl, nf)
        if st != OK or ttype == _STOP:
            return st, pos, nf
        start = pos
        if ttype == _BOOL_T or ttype == _BOOL_F:
            val, ttype = _bool_field(ttype)
            canon = True
        elif ttype == _STRUCT:
            st, pos = _skip_struct(b, pos, end, 2, max_string, max_depth, lasts)
            if st != OK:
                return st, pos, nf
            val = 0
            canon = True
        else:
            st, pos, val, canon = _scalar(b, pos, end, ttype, max_string)
            if st != OK:
                return st, pos, nf
        nf = _record(tbl, nf, fid, ttype, start, pos, val, canon)
        last = fid


@njit("int64(int64[:, ::1], int64, int64)", nogil=True, cache=True)
def _find(tbl, nf, fid):
    for i in range(nf):
        if tbl[i, F_ID] == fid:
            return i
    return -1


@njit("boolean(int64)", nogil=True, cache=True)
def _is_i32(ttype):
    # The page-header fields read here are i32 in parquet.thrift; Thrift
    # readers skip a field of another wire type (pages._int_field).
    return ttype == _I32


@njit(nogil=True, cache=True)
def _required_i32s(tbl, n, f0, f1, f2, out):
    """Fields ``f0``, ``f1``, ``f2`` of a table as non-negative i32s into ``out``; False if one is not."""
    for k in range(3):
        fid = f0 if k == 0 else (f1 if k == 1 else f2)
        i = _find(tbl, n, fid)
        if i < 0 or not _is_i32(tbl[i, F_TYPE]) or tbl[i, F_VAL] < 0:
            return False
        out[k] = tbl[i, F_VAL]
    return True


@njit(nogil=True, cache=True)
def _header(b, pos, end, tbl0, tbl8, tblx, hv, max_string, max_depth, lasts):
    """Decode a PageHeader (lazy below depth 1) into the field tables: status."""
    hv[_H_NV5_OK] = 0
    hv[_H_NV7_OK] = 0
    hv[_H_N8] = -1
    last = 0
    nf = 0
    while True:
        st, pos, fid, ttype = _next_field(b, pos, end, last, tbl0, nf)
        if st != OK:
            return st
        if ttype == _STOP:  # the rewrite writes a plain STOP, as the reference re-encodes it
            hv[_H_N0] = nf
            hv[_H_END] = pos
            return OK
        start = pos
        if ttype == _BOOL_T or ttype == _BOOL_F:
            val, ttype = _bool_field(ttype)
            canon = True
        elif ttype == _STRUCT:
            sub = tbl8 if fid == 8 else tblx
            st, pos, n = _fields1(b, pos, end, sub, max_string, max_depth, lasts)
            if st != OK:
                return st
            if fid == 8:
                hv[_H_N8] = n
            i = _find(sub, n, 1)
            ok = i >= 0 and _is_i32(sub[i, F_TYPE])
            if fid == 5:
                hv[_H_NV5_OK] = 1 if ok else 0
                hv[_H_NV5] = sub[i, F_VAL] if ok else 0
            elif fid == 7:
                hv[_H_NV7_OK] = 1 if ok else 0
                hv[_H_NV7] = sub[i, F_VAL] if ok else 0
            val = 0
            canon = True
        else:
            st, pos, val, canon = _scalar(b, pos, end, ttype, max_string)
            if st != OK:
                return st
        nf = _record(tbl0, nf, fid, ttype, start, pos, val, canon)
        last = fid


@njit("int64(uint8[::1], int64, int64)", nogil=True, cache=True)
def _put_varint(out, o, n):
    while n >= 0x80:
        out[o] = (n & 0x7F) | 0x80
        o += 1
        n >>= 7
    out[o] = n
    return o + 1


@njit("int64(uint8[::1], int64, int64, int64, int64)", nogil=True, cache=True)
def _put_head(out, o, fid, wire, last):
    delta = fid - last
    if 0 < delta <= 15:
        out[o] = (delta << 4) | wire
        return o + 1
    out[o] = wire
    return _put_varint(out, o + 1, ((fid << 1) ^ (fid >> 15)) & 0xFFFF)


@njit(nogil=True, cache=True)
def _put_field(b, out, o, tbl, i, last):
    """Re-encode field ``i`` of ``tbl`` as the reference would: (status, o)."""
    ttype = tbl[i, F_TYPE]
    if o + 8 + tbl[i, F_VEND] - tbl[i, F_VSTART] > out.shape[0]:
        return FALLBACK, o  # cannot happen (the caller reserves room); never write past ``out``
    if ttype == _BOOL_T:
        return OK, _put_head(out, o, tbl[i, F_ID], _BOOL_T if tbl[i, F_VAL] else _BOOL_F, last)
    if not tbl[i, F_CANON]:
        return FALLBACK, o
    o = _put_head(out, o, tbl[i, F_ID], ttype, last)
    for k in range(tbl[i, F_VSTART], tbl[i, F_VEND]):
        out[o] = b[k]
        o += 1
    return OK, o


@njit(nogil=True, cache=True)
def _encode_header(b, tbl0, n0, tbl8, n8, v2, usize, out, o):
    """The rewritten header: no crc, compressed size = uncompressed, v2 is_compressed false."""
    if usize >= 2147483648 or o + 16 > out.shape[0]:
        return FALLBACK, o
    last = 0
    for i in range(n0):
        fid = tbl0[i, F_ID]
        if fid == 4:
            continue
        if fid == 3:
            o = _put_head(out, o, 3, _I32, last)
            o = _put_varint(out, o, usize << 1)
        elif fid == 8 and v2:
            o = _put_head(out, o, 8, _STRUCT, last)
            slast = 0
            done = False
            for k in range(n8):
                sfid = tbl8[k, F_ID]
                if not done and sfid >= 7:
                    o = _put_head(out, o, 7, _BOOL_F, slast)
                    slast = 7
                    done = True
                    if sfid == 7:
                        continue
                st, o = _put_field(b, out, o, tbl8, k, slast)
                if st != OK:
                    return st, o
                slast = sfid
            if not done:
                o = _put_head(out, o, 7, _BOOL_F, slast)
            out[o] = 0
            o += 1
        else:
            st, o = _put_field(b, out, o, tbl0, i, last)
            if st != OK:
                return st, o
        last = fid
    out[o] = 0
    return OK, o + 1


# --- codec framing (codecs.plan_body) ----------------------------------------------------

_SNAPPY, _GZIP, _LZ4, _ZSTD, _BROTLI, _LZ4_RAW = 1, 2, 5, 6, 4, 7


@njit(nogil=True, cache=True)
def _u32le(b, p):
    return np.int64(b[p]) | (np.int64(b[p + 1]) << 8) | (np.int64(b[p + 2]) << 16) | (np.int64(b[p + 3]) << 24)


@njit(nogil=True, cache=True)
def _u32be(b, p):
    return (np.int64(b[p]) << 24) | (np.int64(b[p + 1]) << 16) | (np.int64(b[p + 2]) << 8) | np.int64(b[p + 3])


@njit("int64(int64[:, ::1], int64, int64, int64, int64, int64, int64, int64, int64)", nogil=True, cache=True)
def _job(jobs, nj, algo, src, size, dst, dsize, crc, preamble):
    jobs[nj, J_ALGO] = algo
    jobs[nj, J_SRC] = src
    jobs[nj, J_SRCSIZE] = size
    jobs[nj, J_DST] = dst
    jobs[nj, J_DSTSIZE] = dsize
    jobs[nj, J_CRC] = crc
    jobs[nj, J_PRE] = preamble
    return nj + 1


@njit(nogil=True, cache=True)
def _gzip_header_len(b, s, n):
    if n < 18 or b[s] != 0x1F or b[s + 1] != 0x8B or b[s + 2] != 8:
        return -1
    flags = np.int64(b[s + 3])
    if flags & 0xE0:
        return -1
    pos = 10
    if flags & 0x04:
        if pos + 2 > n:
            return -1
        pos += 2 + (np.int64(b[s + pos]) | (np.int64(b[s + pos + 1]) << 8))
    for flag in (0x08, 0x10):
        if flags & flag:
            while pos < n and b[s + pos] != 0:
                pos += 1
            pos += 1
    if flags & 0x02:
        pos += 2
    if pos + 8 > n:
        return -1
    return pos


@njit(nogil=True, cache=True)
def _leading_empty(b, s, n, h):
    # b"\x00" * 8 + b"\x1f\x8b\x08" within body[h : h + 24]
    stop = min(h + 24, n)
    for i in range(h, stop - 10):
        ok = True
        for k in range(8):
            if b[s + i + k] != 0:
                ok = False
                break
        if ok and b[s + i + 8] == 0x1F and b[s + i + 9] == 0x8B and b[s + i + 10] == 0x08:
            return True
    return False


@njit(nogil=True, cache=True)
def snappy_varint(b, s, n):
    """(declared length, bytes of the varint) of a raw Snappy block ``b[s:s+n]``; (0, 0) if there is none."""
    v = 0
    shift = 0
    for i in range(min(5, n)):
        x = np.int64(b[s + i])
        v |= (x & 0x7F) << shift
        if not x & 0x80:
            return v, i + 1
        shift += 7
    return 0, 0


@njit(nogil=True, cache=True)
def _plan_body(b, s, n, codec, expected, jobs, nj):
    """Jobs of one compressed body ``b[s:s+n]``: (status, nj); see codecs.plan_body."""
    if expected == 0:
        return OK, nj
    if n == 0:
        return ERROR, nj
    if codec == _SNAPPY:
        v, pre = snappy_varint(b, s, n)
        if pre == 0 or v != expected or pre >= n:  # no varint, another length, or only the varint
            return ERROR, nj
        return OK, _job(jobs, nj, A_SNAPPY, s, n, 0, expected, -1, pre)
    if codec == _GZIP:
        h = _gzip_header_len(b, s, n)
        if h < 0:
            return ERROR, nj
        crc = _u32le(b, s + n - 8)
        isize = _u32le(b, s + n - 4)
        if isize == (expected & 0xFFFFFFFF) and not _leading_empty(b, s, n, h):
            return OK, _job(jobs, nj, A_DEFLATE, s + h, n - 8 - h, 0, expected, crc, 0)
        return OK, _job(jobs, nj, A_GZIP, s, n, 0, expected, -1, 0)
    if codec == _LZ4:
        first = nj
        pos = 0
        out = 0
        good = True
        while n - pos >= 8:
            raw = _u32be(b, s + pos)
            comp = _u32be(b, s + pos + 4)
            pos += 8
            if comp > n - pos or out + raw > expected:
                good = False
                break
            nj = _job(jobs, nj, A_LZ4, s + pos, comp, out, raw, -1, 0)
            pos += comp
            out += raw
        if not good or pos != n or out != expected or nj == first:
            nj = first
            return OK, _job(jobs, nj, A_LZ4, s, n, 0, expected, -1, 0)
        return OK, nj
    if codec == _LZ4_RAW:
        return OK, _job(jobs, nj, A_LZ4, s, n, 0, expected, -1, 0)
    if codec == _ZSTD:
        if n < 5 or _u32le(b, s) != 0xFD2FB528:
            return ERROR, nj
        fhd = np.int64(b[s + 4])
        if fhd & 0x08:
            return ERROR, nj
        fcs_flag = fhd >> 6
        single = (fhd >> 5) & 1
        did = fhd & 3
        pos = 5 + (0 if single else 1) + (0 if did == 0 else (1 if did == 1 else (2 if did == 2 else 4)))
        fcs_len = (1 if single else 0) if fcs_flag == 0 else (2 if fcs_flag == 1 else (4 if fcs_flag == 2 else 8))
        if fcs_len:
            if pos + fcs_len > n:
                return ERROR, nj
            if fcs_len == 8 and b[s + pos + 7] >= 0x80:
                return ERROR, nj  # >= 2**63: more than any page
            raw = 0
            for k in range(fcs_len):
                raw |= np.int64(b[s + pos + k]) << (8 * k)
            if fcs_len == 2:
                raw += 256
            if raw > expected:
                return ERROR, nj
        return OK, _job(jobs, nj, A_ZSTD, s, n, 0, expected, -1, 0)
    if codec == _BROTLI:
        return OK, _job(jobs, nj, A_BROTLI, s, n, 0, expected, -1, 0)
    return ERROR, nj


# --- the walk over every chunk of a batch ------------------------------------------------


@njit("int64(int64, int64)", nogil=True, cache=True)
def _add(seen, nv):
    # Values seen so far (the reference's unbounded sum, saturated far above
    # any count a footer's i64 could compare unequal with it for real files).
    return seen + nv if seen < (1 << 62) else seen


@njit(nogil=True, cache=True)
def _grow2(a, need):
    if need <= a.shape[0]:
        return a
    cap = max(need, 2 * a.shape[0])
    g = np.empty((cap, a.shape[1]), a.dtype)
    g[: a.shape[0]] = a
    return g


@njit(nogil=True, cache=True)
def _grow1(a, need):
    if need <= a.shape[0]:
        return a
    cap = max(need, 2 * a.shape[0])
    g = np.empty(cap, a.dtype)
    g[: a.shape[0]] = a
    return g


@njit(nogil=True, cache=True)
def scan_chunks(src, bases, lengths, codecs, num_values, num_rows, max_page_bytes, max_string, max_depth):
    """Walk the pages of every chunk ``src[bases[c] : bases[c] + lengths[c]]``.

    As :func:`~dask_hwdecomp.format.pages.scan_chunk`: pages are read until
    the chunk's bytes end or ``num_values[c]`` values are seen, and must
    then hold at least ``num_rows[c]`` values (-1: no such check). Pages of a
    type Parquet does not decode (index pages, unknown types) are walked
    over and marked, not checked further.

    Returns
    -------
    chunks : int64 array (n, 4)
        status, failing page (-1: the chunk as a whole), first page, end page.
    pages : int64 array (npages, NP)
    jobs : int64 array (njobs, NJ)
    blob : uint8 array
        The rewritten headers (``P_HOFF``, ``P_HLEN``).
    """
    nc = bases.shape[0]
    total = 0
    for c in range(nc):
        total += lengths[c]
    cres = np.zeros((nc, 4), np.int64)
    pages = np.empty((max(16, total // 2048), NP), np.int64)
    jobs = np.empty((max(16, total // 2048), NJ), np.int64)
    blob = np.empty(max(256, total // 64), np.uint8)
    tbl0 = np.empty((MAX_FIELDS, _NF), np.int64)
    tbl8 = np.empty((MAX_FIELDS, _NF), np.int64)
    tblx = np.empty((MAX_FIELDS, _NF), np.int64)
    hv = np.zeros(8, np.int64)
    lasts = np.zeros(max_depth + 2, np.int64)
    vals = np.zeros(3, np.int64)
    sv = np.zeros(3, np.int64)
    npg = 0
    nj = 0
    nb = 0
    for c in range(nc):
        base = bases[c]
        end = base + lengths[c]
        codec = codecs[c]
        want = num_values[c]
        rows = num_rows[c]
        cres[c, C_PLO] = npg
        pos = base
        seen = 0
        ordinal = 0
        status = OK
        while pos < end and seen < want:
            status = _header(src, pos, end, tbl0, tbl8, tblx, hv, max_string, max_depth, lasts)
            if status != OK:
                break
            n0 = hv[_H_N0]
            body = hv[_H_END]
            # type, uncompressed_page_size, compressed_page_size
            if not _required_i32s(tbl0, n0, 1, 2, 3, vals):
                status = ERROR
                break
            ptype = vals[0]
            usize = vals[1]
            csize = vals[2]
            decoded = ptype == 0 or ptype == 2 or ptype == 3  # pages.DECODED_PAGE_TYPES
            if csize > end - body or (decoded and usize > max_page_bytes):
                status = ERROR
                break
            i = _find(tbl0, n0, 4)
            has_crc = i >= 0 and _is_i32(tbl0[i, F_TYPE])
            crc = (tbl0[i, F_VAL] & 0xFFFFFFFF) if has_crc else 0
            levels = 0
            compressed = codec != 0
            if ptype == 0:
                i = _find(tbl0, n0, 5)
                if i < 0 or tbl0[i, F_TYPE] != _STRUCT or not hv[_H_NV5_OK] or hv[_H_NV5] < 0:
                    status = ERROR
                    break
                seen = _add(seen, hv[_H_NV5])
            elif ptype == 3:
                i = _find(tbl0, n0, 8)
                n8 = hv[_H_N8]
                if i < 0 or tbl0[i, F_TYPE] != _STRUCT or n8 < 0:
                    status = ERROR
                    break
                # num_values, definition and repetition level bytes
                if not _required_i32s(tbl8, n8, 1, 5, 6, sv):
                    status = ERROR
                    break
                seen = _add(seen, sv[0])
                if sv[1] > csize or sv[2] > csize or sv[1] + sv[2] > csize or sv[1] + sv[2] > usize:
                    status = ERROR
                    break
                levels = sv[1] + sv[2]
                j = _find(tbl8, n8, 7)
                if j >= 0 and tbl8[j, F_TYPE] == _BOOL_T and tbl8[j, F_VAL] == 0:
                    compressed = False
            elif ptype == 2:
                i = _find(tbl0, n0, 7)
                if i < 0 or tbl0[i, F_TYPE] != _STRUCT or not hv[_H_NV7_OK] or hv[_H_NV7] < 0:
                    status = ERROR
                    break
            if decoded and not compressed and usize != csize:
                status = ERROR
                break
            # the rewritten header (pages not decoded are left out of the image)
            nb2 = nb
            if decoded:
                blob = _grow1(blob, nb + (body - pos) + 32)  # a rewritten header grows by at most ~10 bytes
                st, nb2 = _encode_header(src, tbl0, n0, tbl8, max(hv[_H_N8], 0), ptype == 3, usize, blob, nb)
                if st != OK:
                    status = st
                    break
            # jobs
            jlo = nj
            if compressed and decoded:
                vstart = body + levels
                vlen = csize - levels
                jobs = _grow2(jobs, nj + vlen // 8 + 2)
                st, nj = _plan_body(src, vstart, vlen, codec, usize - levels, jobs, nj)
                if st != OK:
                    status = st
                    break
            pages = _grow2(pages, npg + 1)
            pages[npg, P_TYPE] = ptype
            pages[npg, P_HSTART] = pos - base
            pages[npg, P_BSTART] = body - base
            pages[npg, P_CSIZE] = csize
            pages[npg, P_USIZE] = usize
            pages[npg, P_LEVELS] = levels
            pages[npg, P_COMPRESSED] = 1 if compressed else 0
            pages[npg, P_HOFF] = nb
            pages[npg, P_HLEN] = nb2 - nb
            pages[npg, P_JLO] = jlo
            pages[npg, P_JHI] = nj
            pages[npg, P_HASCRC] = 1 if has_crc else 0
            pages[npg, P_CRC] = crc
            nb = nb2
            npg += 1
            ordinal += 1
            pos = body + csize
        if status == OK and rows >= 0 and seen < rows:
            status = ERROR
            ordinal = -1
        cres[c, C_STATUS] = status
        cres[c, C_PAGE] = ordinal
        cres[c, C_PHI] = npg
    return cres, pages[:npg], jobs[:nj], blob[:nb]


# --- placement in the uncompressed images, and the fill ----------------------------------

# slot results: image-relative offsets
S_START, S_SIZE, S_DATA, S_DICT = 0, 1, 2, 3
# writes: blob offset, image offset, length, file; copies: source offset, image offset, length, file
W_BLOB, W_DST, W_LEN, W_FILE = 0, 1, 2, 3
# placed jobs: the job columns, then the page (global index) and the slot
PJ_PAGE, PJ_SLOT = NJ, NJ + 1
NPJ = NJ + 2


@njit("boolean(int64)", nogil=True, cache=True)
def _decoded(ptype):
    return ptype == 0 or ptype == 2 or ptype == 3  # pages.DECODED_PAGE_TYPES


@njit(nogil=True, cache=True)
def place(pages, jobs, slot_chunk, slot_file, cres, bases, codecs, nfiles):
    """Lay out every slot (a chunk in image order) of every file image.

    Pages of UNCOMPRESSED chunks without index pages are copied as they are
    (headers untouched); other pages get their rewritten header and their
    value bytes copied or decompressed.

    Returns
    -------
    slots : int64 (nslots, 4)
    file_end : int64 (nfiles,)
        End of the last chunk of each image (where its footer goes).
    writes, copies : int64 (n, 4)
    placed : int64 (n, NPJ)
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
            if not _decoded(pages[p, P_TYPE]):
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
                if not _decoded(ptype):
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
    """Write the rewritten headers and copy the stored bytes into the images."""
    for i in range(writes.shape[0]):
        _copy(dst, file_base[writes[i, W_FILE]] + writes[i, W_DST], blob, writes[i, W_BLOB], writes[i, W_LEN])
    for i in range(copies.shape[0]):
        _copy(dst, file_base[copies[i, W_FILE]] + copies[i, W_DST], src, copies[i, W_BLOB], copies[i, W_LEN])
