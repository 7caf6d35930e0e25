"""The host scan compiled: every page of a batch's column chunks walked, re-encoded and planned.

:func:`scan_chunks` does, over numpy byte arrays and without the GIL, what
:func:`~dask_hwdecomp.format.pages.scan_chunk`,
:func:`~dask_hwdecomp.format.codecs.plan_body` and
:func:`~dask_hwdecomp.format.layout.page_header` do per page in Python.
The Python code stays the reference: the scan only ever answers, per chunk,

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

from .codec_kernels import NJ, body_jobs
from .header_kernels import encode_header
from .pagewalk import (
    DATA_PAGE,
    DATA_PAGE_V2,
    DICTIONARY_PAGE,
    H_DATA,
    H_DATA_V2,
    H_DICT,
    H_PAGE,
    grow_bytes,
    grow_rows,
    header_tables,
    is_decoded,
    read_page,
)
from .thrift_kernels import (
    BOOL_TRUE,
    ERROR,
    F_TYPE,
    F_VAL,
    FALLBACK,
    OK,
    find_field,
    optional_i32,
    required_i32s,
)

__all__ = ["P_TYPE", "P_HSTART", "P_BSTART", "P_CSIZE", "P_USIZE", "P_LEVELS", "P_COMPRESSED", "P_HOFF", "P_HLEN",
           "P_JLO", "P_JHI", "P_HASCRC", "P_CRC", "NP", "C_STATUS", "C_PAGE", "C_PLO", "C_PHI", "scan_chunks"]

# page table columns (offsets relative to the chunk start)
P_TYPE, P_HSTART, P_BSTART, P_CSIZE, P_USIZE, P_LEVELS, P_COMPRESSED = 0, 1, 2, 3, 4, 5, 6
P_HOFF, P_HLEN, P_JLO, P_JHI, P_HASCRC, P_CRC = 7, 8, 9, 10, 11, 12
NP = 13

# chunk result columns
C_STATUS, C_PAGE, C_PLO, C_PHI = 0, 1, 2, 3


@njit("int64(int64, int64)", nogil=True, cache=True)
def _add(seen, nv):
    # Values seen so far (the reference's unbounded sum, saturated far above
    # any count a footer's i64 could compare unequal with it for real files).
    return seen + nv if seen < (1 << 62) else seen


@njit(nogil=True, cache=True)
def scan_chunks(src, bases, lengths, codecs, num_values, num_rows, max_page_bytes, max_string, max_depth):
    """Walk the pages of every chunk ``src[bases[c] : bases[c] + lengths[c]]``.

    As :func:`~dask_hwdecomp.format.pages.scan_chunk`: pages are read until
    the chunk's bytes end or ``num_values[c]`` values are seen, and must
    then hold at least ``num_rows[c]`` values (-1: no such check). Pages of a
    type Parquet does not decode (index pages, unknown types) are walked
    over and marked, not checked further.

    Parameters
    ----------
    src : uint8 array
    bases, lengths, codecs, num_values, num_rows : int64 arrays
        Per chunk: its first byte, bytes, Parquet codec, metadata values
        and row group rows.
    max_page_bytes, max_string, max_depth : int
        The limits of the reference scan.

    Returns
    -------
    chunks : int64 array (n, 4)
        By the ``C_`` columns: status, failing page (-1: the chunk as a
        whole), first page, end page.
    pages : int64 array (npages, NP)
        By the ``P_`` columns.
    jobs : int64 array (njobs, NJ)
        By :mod:`~dask_hwdecomp.format.codec_kernels`' ``J_`` columns.
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
    tables, counts, lasts, sizes = header_tables(max_depth)
    # the field tables, taken out of the tuple once: a view made per page
    # (and its reference count) costs the scan a tenth of its time
    top, t5, t7, t8 = tables[H_PAGE], tables[H_DATA], tables[H_DICT], tables[H_DATA_V2]
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
            st, body = read_page(src, pos, end, tables, counts, lasts, sizes, max_string, max_depth)
            if st != OK:
                status = FALLBACK if st == FALLBACK else ERROR
                break
            ptype = sizes[0]
            usize = sizes[1]
            csize = sizes[2]
            decoded = is_decoded(ptype)
            if decoded and usize > max_page_bytes:
                status = ERROR
                break
            has_crc, crc = optional_i32(top, counts[H_PAGE], 4)
            crc &= 0xFFFFFFFF
            levels = 0
            compressed = codec != 0
            if ptype == DATA_PAGE:
                ok, nv = optional_i32(t5, counts[H_DATA], 1)  # num_values
                if not ok or nv < 0:
                    status = ERROR
                    break
                seen = _add(seen, nv)
            elif ptype == DATA_PAGE_V2:
                # num_values, definition and repetition level bytes
                if not required_i32s(t8, counts[H_DATA_V2], 1, 5, 6, sv):
                    status = ERROR
                    break
                seen = _add(seen, sv[0])
                if sv[1] > csize or sv[2] > csize or sv[1] + sv[2] > csize or sv[1] + sv[2] > usize:
                    status = ERROR
                    break
                levels = sv[1] + sv[2]
                j = find_field(t8, counts[H_DATA_V2], 7)
                if j >= 0 and t8[j, F_TYPE] == BOOL_TRUE and t8[j, F_VAL] == 0:
                    compressed = False
            elif ptype == DICTIONARY_PAGE:
                ok, nv = optional_i32(t7, counts[H_DICT], 1)  # num_values
                if not ok or nv < 0:
                    status = ERROR
                    break
            if decoded and not compressed and usize != csize:
                status = ERROR
                break
            # the rewritten header (pages not decoded are left out of the image)
            nb2 = nb
            if decoded:
                blob = grow_bytes(blob, nb + (body - pos) + 32)  # a rewritten header grows by at most ~10 bytes
                st, nb2 = encode_header(src, top, counts[H_PAGE], t8,
                                        max(counts[H_DATA_V2], 0), ptype == DATA_PAGE_V2, usize, blob, nb)
                if st != OK:
                    status = st
                    break
            # jobs
            jlo = nj
            if compressed and decoded:
                vstart = body + levels
                vlen = csize - levels
                jobs = grow_rows(jobs, nj + vlen // 8 + 2)
                st, nj = body_jobs(src, vstart, vlen, codec, usize - levels, jobs, nj)
                if st != OK:
                    status = st
                    break
            pages = grow_rows(pages, npg + 1)
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
