"""The compiled page walk: one page header read, sized and bounded at a time.

Both compiled walks over the pages of column chunks read each page here:
the host scan (:func:`~dask_hwdecomp.format.scan_kernels.scan_chunks`,
which lays out the uncompressed images) and the GPU decode planner
(:func:`~dask_hwdecomp.gpudecode.pagewalk.walk_chunks`). Each then makes
its own checks of the page's type and sub-header, and steps to the next
page at ``body + compressed size``.

:func:`read_page` decodes a PageHeader with the Thrift kernels of
:mod:`~dask_hwdecomp.format.thrift_kernels` into *header tables*: an int64
tuple of ``NH`` field tables, by the ``H_`` indexes (the header itself,
its data page, dictionary page and data page v2 headers, and the last
other struct), with the fields read of each in ``counts`` (-1 where the
header has no such struct, which
:func:`~dask_hwdecomp.format.thrift_kernels.required_i32s` and
:func:`~dask_hwdecomp.format.thrift_kernels.optional_i32` then read as a
table without the field). Index the tuple with the ``H_`` constants: a
tuple indexed at run time is copied. It answers a Thrift status
(``OK``, ``ERROR``, ``FALLBACK``) or one of its own: :data:`BAD_FIELD`
(the type or a size is absent, mistyped or negative), :data:`PAST_END`
(the page's stored bytes run past the chunk).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .thrift_kernels import (
    BOOL_FALSE,
    BOOL_TRUE,
    MAX_FIELDS,
    NF,
    OK,
    STOP,
    STRUCT,
    bool_field,
    next_field,
    read_fields,
    read_scalar,
    record_field,
    required_i32s,
)

__all__ = ["DATA_PAGE", "DICTIONARY_PAGE", "DATA_PAGE_V2", "H_PAGE", "H_DATA", "H_DICT", "H_DATA_V2", "H_OTHER",
           "NH", "BAD_FIELD", "PAST_END", "is_decoded", "header_tables", "read_page",
           "grow_rows", "grow_bytes"]

# PageType (structs.PageType)
DATA_PAGE, DICTIONARY_PAGE, DATA_PAGE_V2 = 0, 2, 3

# the field tables of a header: the PageHeader, its structs 5, 7 and 8, and any other struct
H_PAGE, H_DATA, H_DICT, H_DATA_V2, H_OTHER = 0, 1, 2, 3, 4
NH = 5

# what read_page answers besides the Thrift statuses
BAD_FIELD, PAST_END = 3, 4


@njit("boolean(int64)", nogil=True, cache=True)
def is_decoded(ptype):
    """Whether Parquet decodes pages of type ``ptype`` (``pages.DECODED_PAGE_TYPES``)."""
    return ptype == DATA_PAGE or ptype == DICTIONARY_PAGE or ptype == DATA_PAGE_V2


@njit(nogil=True, cache=True)
def header_tables(max_depth):
    """The scratch space of :func:`read_page`, made once per walk.

    Parameters
    ----------
    max_depth : int
        The deepest nesting the walk allows.

    Returns
    -------
    tables : tuple of NH int64 arrays (MAX_FIELDS, NF)
    counts : int64 array (NH,)
    lasts : int64 array (max_depth + 2,)
    sizes : int64 array (3,)
        Gets a page's type, uncompressed and compressed sizes.
    """
    tables = (np.empty((MAX_FIELDS, NF), np.int64), np.empty((MAX_FIELDS, NF), np.int64),
              np.empty((MAX_FIELDS, NF), np.int64), np.empty((MAX_FIELDS, NF), np.int64),
              np.empty((MAX_FIELDS, NF), np.int64))
    return tables, np.full(NH, -1, np.int64), np.zeros(max_depth + 2, np.int64), np.zeros(3, np.int64)


@njit(nogil=True, cache=True)
def read_page(b, pos, end, tables, counts, lasts, sizes, max_string, max_depth):
    """Read the page whose header starts at ``pos``: its header, type and sizes, within the chunk.

    The PageHeader is decoded (lazily below depth 1) into its header
    tables, then its type and sizes are checked. One function, not a header
    read and a check: a call more per page, passing the tables' tuple,
    made the host scan a fifth slower.

    Parameters
    ----------
    b : uint8 array
    pos, end : int
        Where the header starts; the end of the chunk.
    tables, counts, lasts, sizes
        From :func:`header_tables`; ``sizes`` gets the page's ``type``,
        ``uncompressed_page_size`` and ``compressed_page_size``.
    max_string, max_depth : int
        The Thrift limits (:class:`~dask_hwdecomp.format.thrift.Limits`).

    Returns
    -------
    status, body
        The status: a Thrift status of the header, :data:`BAD_FIELD` or
        :data:`PAST_END`; and the first byte of the page's body (where the
        header reads OK).
    """
    for k in range(NH):
        counts[k] = -1
    top = tables[H_PAGE]
    last = 0
    nf = 0
    while True:
        st, pos, fid, ttype = next_field(b, pos, end, last, top, nf)
        if st != OK:
            return st, pos
        if ttype == STOP:  # a rewrite writes a plain STOP, as the reference re-encodes it
            counts[H_PAGE] = nf
            if not required_i32s(top, nf, 1, 2, 3, sizes):
                return BAD_FIELD, pos
            if sizes[2] > end - pos:
                return PAST_END, pos
            return OK, pos
        start = pos
        if ttype == BOOL_TRUE or ttype == BOOL_FALSE:
            val, ttype = bool_field(ttype)
            canon = True
        elif ttype == STRUCT:
            # constant indexes only: a tuple indexed at run time copies the tuple
            sub = tables[H_DATA] if fid == 5 else (
                tables[H_DICT] if fid == 7 else (tables[H_DATA_V2] if fid == 8 else tables[H_OTHER]))
            st, pos, n = read_fields(b, pos, end, sub, max_string, max_depth, lasts)
            if st != OK:
                return st, pos
            if fid == 5:
                counts[H_DATA] = n
            elif fid == 7:
                counts[H_DICT] = n
            elif fid == 8:
                counts[H_DATA_V2] = n
            val = 0
            canon = True
        else:
            st, pos, val, canon = read_scalar(b, pos, end, ttype, max_string)
            if st != OK:
                return st, pos
        nf = record_field(top, nf, fid, ttype, start, pos, val, canon)
        last = fid


@njit(nogil=True, cache=True)
def grow_rows(a, need):
    """``a`` (2-d), or a copy of it with room for at least ``need`` rows (twice as many at least)."""
    if need <= a.shape[0]:
        return a
    g = np.empty((max(need, 2 * a.shape[0]), a.shape[1]), a.dtype)
    g[: a.shape[0]] = a
    return g


@njit(nogil=True, cache=True)
def grow_bytes(a, need):
    """``a`` (1-d), or a copy of it with room for at least ``need`` items (twice as many at least)."""
    if need <= a.shape[0]:
        return a
    g = np.empty(max(need, 2 * a.shape[0]), a.dtype)
    g[: a.shape[0]] = a
    return g
