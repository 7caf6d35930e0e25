"""The compiled page walk of the decode planner.

:func:`walk_chunks` reads every page header of the column chunks of one
uncompressed file (an image) and checks, per chunk, everything the GPU
decoder relies on: the pages lie inside the chunk and are stored
uncompressed, a dictionary page comes first if at all, every data page's
value encoding is one the GPU decodes for the column's kind, definition
levels are RLE (not BIT_PACKED), v2 pages carry no repetition levels and
the data pages' values add up to the row group's rows. A chunk failing any
check gets a status (:data:`REASONS`) and goes to pyarrow, which then
decodes it or raises its error as it would without the GPU.

Each page is read by the page walk of the format layer
(:func:`~dask_hwdecomp.format.pagewalk.read_page`); a header it would not
answer OK for (not decodable, or encoded in an unusual way) is a fallback
here.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..format import pagewalk as walk
from ..format.thrift_kernels import OK, optional_i32, required_i32s

__all__ = ["walk_chunks", "REASONS", "W_KIND", "W_ENCODING", "W_OFFSET", "W_SIZE", "W_VALUES", "W_DEF",
           "W_ROWS", "NW", "S_STATUS", "S_PAGE", "S_DETAIL", "S_PLO", "S_PHI", "S_END", "NS"]

# Thrift limits of the walk: generous, since a header beyond them only
# sends its chunk to pyarrow.
_MAX_STRING = 1 << 30
_MAX_DEPTH = 16

# page rows (offsets absolute in the walked buffer)
W_KIND, W_ENCODING, W_OFFSET, W_SIZE, W_VALUES, W_DEF, W_ROWS = 0, 1, 2, 3, 4, 5, 6
NW = 7
# chunk results: status, failing page ordinal (-1: the chunk), a detail value, pages lo/hi, walked end
S_STATUS, S_PAGE, S_DETAIL, S_PLO, S_PHI, S_END = 0, 1, 2, 3, 4, 5
NS = 6

# Statuses, and what they mean (format with the detail value).
R_OK = 0
R_HEADER = 1
R_FIELD = 2
R_SIZE = 3
R_STORED = 4
R_PAGE_TYPE = 5
R_DICT_POS = 6
R_DICT_ENC = 7
R_ENCODING = 8
R_LEVEL_ENC = 9
R_REP = 10
R_DEF = 11
R_ROWS = 12
R_V2ROWS = 13
R_TOO_MANY = 14
R_NO_DICT = 15
R_DICT_KIND = 16
REASONS = {
    R_HEADER: "page header does not decode as the GPU planner reads it",
    R_FIELD: "page header lacks a required field, or has a negative or mistyped one",
    R_SIZE: "page runs past its column chunk",
    R_STORED: "page is stored compressed, or its stored and uncompressed sizes differ",
    R_PAGE_TYPE: "page of type {} (not a data or dictionary page)",
    R_DICT_POS: "dictionary page that is not the chunk's first page",
    R_DICT_ENC: "dictionary page of encoding {}",
    R_ENCODING: "data page values of encoding {} (not decoded on the GPU for this type)",
    R_LEVEL_ENC: "definition levels of encoding {} (BIT_PACKED levels are not decoded on the GPU)",
    R_REP: "v2 page with {} repetition level bytes",
    R_DEF: "v2 page with {} definition level bytes (more than the page, or levels of a required column)",
    R_ROWS: "data pages hold {} values, not the row group's rows",
    R_V2ROWS: "v2 page num_rows {} differs from its num_values",
    R_TOO_MANY: "more pages than rows",
    R_NO_DICT: "dictionary-encoded data page without a dictionary page",
    R_DICT_KIND: "dictionary page of a BOOLEAN column",
}

_K_DICTIONARY, _K_V1, _K_V2 = 0, 1, 2  # tables.PageKind
_RLE, _BIT_PACKED, _PLAIN, _PLAIN_DICTIONARY, _RLE_DICTIONARY = 3, 4, 0, 2, 8


@njit(nogil=True, cache=True)
def walk_chunks(buf, starts, lengths, want_values, rows, max_def, cls, allowed, dict_ok):
    """Walk and check the pages of every chunk ``buf[starts[c] : starts[c] + lengths[c]]``.

    Pages are read, as the reference scan reads them, until the chunk's
    bytes end or ``want_values[c]`` (the metadata's count) values are seen.

    Parameters
    ----------
    buf : uint8 array
    starts, lengths, want_values, rows : int64 arrays
        Per chunk: first byte, bytes, metadata values, row group rows.
    max_def, cls : int64 arrays
        Per chunk: 0 or 1, and its row of the encoding tables (its output
        kind and physical type).
    allowed : uint8 array (classes, encodings)
        1 where the GPU decodes data-page values of that encoding for that class.
    dict_ok : uint8 array (classes,)
        1 where the class may be dictionary encoded.

    Returns
    -------
    res : int64 array (chunks, NS)
    pages : int64 array (pages, NW)
        Every walked page of the chunks whose status is OK (those of a
        failing chunk are dropped).
    """
    nc = starts.shape[0]
    res = np.zeros((nc, NS), np.int64)
    pages = np.empty((max(16, nc * 2), NW), np.int64)
    tables, counts, lasts, sizes = walk.header_tables(_MAX_DEPTH)
    # the field tables out of the tuple once: a view made per page costs time
    t5, t7, t8 = tables[walk.H_DATA], tables[walk.H_DICT], tables[walk.H_DATA_V2]
    vals = np.zeros(3, np.int64)
    npg = 0
    for c in range(nc):
        lo = npg
        pos = starts[c]
        end = pos + lengths[c]
        seen = 0
        ordinal = 0
        status = R_OK
        detail = 0
        has_dict = False
        while pos < end and seen < want_values[c]:
            if ordinal > rows[c] + 1:
                status = R_TOO_MANY
                break
            st, body = walk.read_page(buf, pos, end, tables, counts, lasts, sizes, _MAX_STRING, _MAX_DEPTH)
            if st != OK:
                status = R_FIELD if st == walk.BAD_FIELD else (R_SIZE if st == walk.PAST_END else R_HEADER)
                break
            ptype = sizes[0]
            usize = sizes[1]
            csize = sizes[2]
            if usize != csize:
                status = R_STORED
                break
            pages = walk.grow_rows(pages, npg + 1)
            pages[npg, W_OFFSET] = body
            pages[npg, W_SIZE] = usize
            pages[npg, W_DEF] = -1
            if ptype == walk.DICTIONARY_PAGE:
                if not required_i32s(t7, counts[walk.H_DICT], 1, 2, 1, vals):
                    status = R_FIELD
                    break
                if ordinal != 0:
                    status = R_DICT_POS
                    break
                if dict_ok[cls[c]] == 0:
                    status = R_DICT_KIND
                    break
                if vals[1] != _PLAIN and vals[1] != _PLAIN_DICTIONARY:
                    status = R_DICT_ENC
                    detail = vals[1]
                    break
                has_dict = True
                pages[npg, W_KIND] = _K_DICTIONARY
                pages[npg, W_ENCODING] = vals[1]
                pages[npg, W_VALUES] = vals[0]
                pages[npg, W_ROWS] = 0
            elif ptype == walk.DATA_PAGE:
                # num_values, encoding, definition_level_encoding; and
                # repetition_level_encoding, which pyarrow requires too
                if not required_i32s(t5, counts[walk.H_DATA], 1, 2, 3, vals):
                    status = R_FIELD
                    break
                has_rep, rep = optional_i32(t5, counts[walk.H_DATA], 4)
                if not has_rep or rep < 0:
                    status = R_FIELD
                    break
                if max_def[c] > 0 and vals[2] != _RLE:
                    status = R_LEVEL_ENC
                    detail = vals[2]
                    break
                pages[npg, W_KIND] = _K_V1
                pages[npg, W_ENCODING] = vals[1]
                pages[npg, W_VALUES] = vals[0]
                pages[npg, W_ROWS] = vals[0]
            elif ptype == walk.DATA_PAGE_V2:
                # num_values, num_nulls, num_rows; then encoding, definition and repetition level bytes
                if not required_i32s(t8, counts[walk.H_DATA_V2], 1, 2, 3, vals):
                    status = R_FIELD
                    break
                nv = vals[0]
                nrows = vals[2]
                if not required_i32s(t8, counts[walk.H_DATA_V2], 4, 5, 6, vals):
                    status = R_FIELD
                    break
                if vals[2] != 0:
                    status = R_REP
                    detail = vals[2]
                    break
                if vals[1] > usize or (max_def[c] == 0 and vals[1] != 0):
                    status = R_DEF
                    detail = vals[1]
                    break
                if nrows != nv:
                    status = R_V2ROWS
                    detail = nrows
                    break
                pages[npg, W_KIND] = _K_V2
                pages[npg, W_ENCODING] = vals[0]
                pages[npg, W_VALUES] = nv
                pages[npg, W_DEF] = vals[1]
                pages[npg, W_ROWS] = nrows
            else:
                status = R_PAGE_TYPE
                detail = ptype
                break
            if ptype != walk.DICTIONARY_PAGE:
                enc = pages[npg, W_ENCODING]
                if enc < 0 or enc >= allowed.shape[1] or allowed[cls[c], enc] == 0:
                    status = R_ENCODING
                    detail = enc
                    break
                if (enc == _PLAIN_DICTIONARY or enc == _RLE_DICTIONARY) and not has_dict:
                    status = R_NO_DICT
                    break
                seen += pages[npg, W_VALUES]
            npg += 1
            ordinal += 1
            pos = body + csize
        if status == R_OK and seen != rows[c]:
            status = R_ROWS
            detail = seen
            ordinal = -1
        if status != R_OK:
            npg = lo  # a failing chunk's pages are dropped
        res[c, S_STATUS], res[c, S_PAGE], res[c, S_DETAIL] = status, ordinal, detail
        res[c, S_PLO], res[c, S_PHI], res[c, S_END] = lo, npg, pos
    return res, pages[:npg]
