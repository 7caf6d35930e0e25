"""The compiled Thrift compact reader: page-header fields into field tables.

These numba helpers decode, over a numpy byte array and without the GIL,
what :mod:`~dask_hwdecomp.format.thrift` decodes in Python, and answer
every read with a status:

* :data:`OK`: the bytes are exactly as the reference would decode them;
* :data:`ERROR`: the reference would (most probably) raise here;
* :data:`FALLBACK`: the bytes are valid but unusual (fields out of order or
  repeated, non-minimal varints, containers in a header), so that the
  reference's re-encoding could differ from a byte copy.

Every check the reference makes (bounds, depth, field-id range, integer
ranges, string lengths) is made here too, so :data:`OK` is never answered
where the reference raises.

A struct's fields go into a *field table*: an int64 array
``(MAX_FIELDS, NF)``, one row a field, by the ``F_`` columns (field id,
wire type, where its value's bytes lie, its value, and whether those bytes
are the canonical encoding a byte copy may keep).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["OK", "ERROR", "FALLBACK", "STOP", "BOOL_TRUE", "BOOL_FALSE", "I32", "STRUCT",
           "F_ID", "F_TYPE", "F_VSTART", "F_VEND", "F_VAL", "F_CANON", "NF", "MAX_FIELDS",
           "next_field", "bool_field", "read_scalar", "read_fields", "record_field", "find_field", "is_i32",
           "optional_i32", "required_i32s"]

OK, ERROR, FALLBACK = 0, 1, 2

# Helpers called with constants have explicit signatures: numba would
# otherwise compile one version per combination of literal arguments, which
# multiplies the first (uncached) compile time.

# Thrift compact type ids (see thrift.T)
BOOL_TRUE, BOOL_FALSE, I32, STRUCT = 1, 2, 5, 12
STOP = 0
_BYTE, _I16, _I64, _DOUBLE, _BINARY = 3, 4, 6, 7, 8
_LIST, _SET, _MAP = 9, 10, 11

# field table columns
F_ID, F_TYPE, F_VSTART, F_VEND, F_VAL, F_CANON = 0, 1, 2, 3, 4, 5
NF = 6
MAX_FIELDS = 64


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
    if ttype == I32:
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
def read_scalar(b, pos, end, ttype, max_string):
    """Decode a scalar value as the reference's eager decoder does.

    Parameters
    ----------
    b : uint8 array
    pos, end : int
        Where the value starts, and the end of the readable bytes.
    ttype : int
        Its compact wire type (not a boolean: :func:`bool_field`).
    max_string : int
        The longest binary value allowed.

    Returns
    -------
    status, pos, value, canonical
        The status, the position after the value, its value (a binary's
        length; 0 for a double) and whether its bytes are the canonical
        encoding. A container is :data:`FALLBACK`.
    """
    if ttype == _I16 or ttype == I32 or ttype == _I64:
        maxb = 3 if ttype == _I16 else (5 if ttype == I32 else 10)
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
        if ftype == BOOL_TRUE or ftype == BOOL_FALSE:
            continue
        if ftype == _I16 or ftype == I32 or ftype == _I64:
            maxb = 3 if ftype == _I16 else (5 if ftype == I32 else 10)
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
        elif ftype == STRUCT:
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
def next_field(b, pos, end, last, tbl, nf):
    """Read the next field header of a struct whose table holds ``nf`` fields.

    Parameters
    ----------
    b : uint8 array
    pos, end : int
    last : int
        The id of the struct's previous field (0 for its first).
    tbl : int64 array (MAX_FIELDS, NF)
        The struct's field table so far.
    nf : int
        Its rows filled.

    Returns
    -------
    status, pos, fid, ttype
        The struct's STOP gives ttype :data:`STOP` (any high nibble, as the
        reference reads it); a field out of order, or past the table's
        room, is :data:`FALLBACK` (the reference re-encodes such a header).
    """
    if pos >= end:
        return ERROR, pos, 0, STOP
    head = np.int64(b[pos])
    pos += 1
    ttype = head & 0x0F
    if ttype == STOP:
        return OK, pos, 0, STOP
    st, pos, fid = _field_id(b, pos, end, head, last)
    if st != OK:
        return ERROR, pos, fid, ttype
    if nf == MAX_FIELDS or (nf and fid <= tbl[nf - 1, F_ID]):
        return FALLBACK, pos, fid, ttype
    return OK, pos, fid, ttype


@njit(nogil=True, cache=True)
def bool_field(ttype):
    """(value, canonical type) of a compact-protocol boolean field: its wire type carries the value."""
    return (1 if ttype == BOOL_TRUE else 0), BOOL_TRUE


@njit("int64(int64[:, ::1], int64, int64, int64, int64, int64, int64, boolean)", nogil=True, cache=True)
def record_field(tbl, nf, fid, ttype, start, end, val, canon):
    """Write one decoded field as row ``nf`` of a field table; returns the next row."""
    tbl[nf, F_ID] = fid
    tbl[nf, F_TYPE] = ttype
    tbl[nf, F_VSTART] = start
    tbl[nf, F_VEND] = end
    tbl[nf, F_VAL] = val
    tbl[nf, F_CANON] = 1 if canon else 0
    return nf + 1


@njit(nogil=True, cache=True)
def read_fields(b, pos, end, tbl, max_string, max_depth, lasts):
    """Decode the fields of a struct nested once into a field table.

    Its scalar fields are decoded eagerly, its own structs checked and
    skipped, as the reference's lazy decoder does below depth 1.

    Parameters
    ----------
    b : uint8 array
    pos, end : int
        Where the struct's first field header starts; the readable end.
    tbl : int64 array (MAX_FIELDS, NF)
        Gets the fields.
    max_string, max_depth : int
        The reference's limits (:class:`~dask_hwdecomp.format.thrift.Limits`).
    lasts : int64 array (max_depth + 2,)
        Scratch space.

    Returns
    -------
    status, pos, count
        The status, the position after the struct's STOP, the fields read.
    """
    if 1 >= max_depth:
        return ERROR, pos, 0
    last = 0
    nf = 0
    while True:
        st, pos, fid, ttype = next_field(b, pos, end, last, tbl, nf)
        if st != OK or ttype == STOP:
            return st, pos, nf
        start = pos
        if ttype == BOOL_TRUE or ttype == BOOL_FALSE:
            val, ttype = bool_field(ttype)
            canon = True
        elif ttype == STRUCT:
            st, pos = _skip_struct(b, pos, end, 2, max_string, max_depth, lasts)
            if st != OK:
                return st, pos, nf
            val = 0
            canon = True
        else:
            st, pos, val, canon = read_scalar(b, pos, end, ttype, max_string)
            if st != OK:
                return st, pos, nf
        nf = record_field(tbl, nf, fid, ttype, start, pos, val, canon)
        last = fid


@njit("int64(int64[:, ::1], int64, int64)", nogil=True, cache=True)
def find_field(tbl, nf, fid):
    """The row of field ``fid`` among the first ``nf`` rows of a field table; -1 if absent."""
    for i in range(nf):
        if tbl[i, F_ID] == fid:
            return i
    return -1


@njit("boolean(int64)", nogil=True, cache=True)
def is_i32(ttype):
    """Whether a field of wire type ``ttype`` is an i32 (what a page header's integer fields are)."""
    # The page-header fields read here are i32 in parquet.thrift; Thrift
    # readers skip a field of another wire type (pages._int_field).
    return ttype == I32


@njit(nogil=True, cache=True)
def optional_i32(tbl, n, fid):
    """(present, value) of field ``fid`` of a field table of ``n`` rows: present if an i32 (value 0 if not)."""
    i = find_field(tbl, n, fid)
    if i < 0 or not is_i32(tbl[i, F_TYPE]):
        return False, 0
    return True, tbl[i, F_VAL]


@njit(nogil=True, cache=True)
def required_i32s(tbl, n, f0, f1, f2, out):
    """Read three required non-negative i32 fields of a field table.

    Parameters
    ----------
    tbl : int64 array (MAX_FIELDS, NF)
    n : int
        Its rows filled (-1 or 0: a table without the fields).
    f0, f1, f2 : int
        The field ids.
    out : int64 array (3,)
        Gets their values, in that order.

    Returns
    -------
    bool
        False if one is absent, not an i32 or negative.
    """
    for k in range(3):
        fid = f0 if k == 0 else (f1 if k == 1 else f2)
        i = find_field(tbl, n, fid)
        if i < 0 or not is_i32(tbl[i, F_TYPE]) or tbl[i, F_VAL] < 0:
            return False
        out[k] = tbl[i, F_VAL]
    return True
