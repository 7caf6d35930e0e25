"""The compiled re-encoding of a page header for the uncompressed image.

An image's page stores its values uncompressed, so its header says so:
:func:`encode_header` writes, from the field tables the page walk
(:mod:`~dask_hwdecomp.format.pagewalk`) decoded, the header that
:func:`~dask_hwdecomp.format.layout.page_header` writes in Python: no
crc, the compressed size equal to the uncompressed one, a v2 header's
``is_compressed`` false, every other field copied byte for byte.
A field whose bytes are not the canonical encoding is :data:`FALLBACK`
(the reference's re-encoding could differ from a byte copy).
"""

from __future__ import annotations

from numba import njit

from .thrift_kernels import (
    BOOL_FALSE,
    BOOL_TRUE,
    F_CANON,
    F_ID,
    F_TYPE,
    F_VAL,
    F_VEND,
    F_VSTART,
    FALLBACK,
    I32,
    OK,
    STRUCT,
)

__all__ = ["encode_header"]


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
    if ttype == BOOL_TRUE:
        return OK, _put_head(out, o, tbl[i, F_ID], BOOL_TRUE if tbl[i, F_VAL] else BOOL_FALSE, last)
    if not tbl[i, F_CANON]:
        return FALLBACK, o
    o = _put_head(out, o, tbl[i, F_ID], ttype, last)
    for k in range(tbl[i, F_VSTART], tbl[i, F_VEND]):
        out[o] = b[k]
        o += 1
    return OK, o


@njit(nogil=True, cache=True)
def encode_header(b, tbl0, n0, tbl8, n8, v2, usize, out, o):
    """Write the rewritten header of a page into ``out`` at ``o``.

    Parameters
    ----------
    b : uint8 array
        The bytes the field tables point into.
    tbl0, n0 : int64 array (MAX_FIELDS, NF), int
        The PageHeader's field table and its rows filled.
    tbl8, n8 : int64 array (MAX_FIELDS, NF), int
        Those of its ``data_page_header_v2`` (``n8`` 0 if it has none).
    v2 : bool
        Whether the page is a DATA_PAGE_V2.
    usize : int
        The page's uncompressed size (its new compressed size).
    out : uint8 array
        Room for the header: at least the original's bytes and 32 more.
    o : int

    Returns
    -------
    status, o
        :data:`OK` and the end of the header written, or :data:`FALLBACK`
        (a field whose bytes a copy could not keep, a size past an i32).
    """
    if usize >= 2147483648 or o + 16 > out.shape[0]:
        return FALLBACK, o
    last = 0
    for i in range(n0):
        fid = tbl0[i, F_ID]
        if fid == 4:
            continue
        if fid == 3:
            o = _put_head(out, o, 3, I32, last)
            o = _put_varint(out, o, usize << 1)
        elif fid == 8 and v2:
            o = _put_head(out, o, 8, STRUCT, last)
            slast = 0
            done = False
            for k in range(n8):
                sfid = tbl8[k, F_ID]
                if not done and sfid >= 7:
                    o = _put_head(out, o, 7, BOOL_FALSE, slast)
                    slast = 7
                    done = True
                    if sfid == 7:
                        continue
                st, o = _put_field(b, out, o, tbl8, k, slast)
                if st != OK:
                    return st, o
                slast = sfid
            if not done:
                o = _put_head(out, o, 7, BOOL_FALSE, slast)
            out[o] = 0
            o += 1
        else:
            st, o = _put_field(b, out, o, tbl0, i, last)
            if st != OK:
                return st, o
        last = fid
    out[o] = 0
    return OK, o + 1
