"""Checks of a decode plan received from another process.

The GPU service decodes plans that reading processes send. The kernels
bound every read by the page's body and every write by the chunk's
buffers, so those bounds themselves must hold: every page inside the
uploaded bytes, every chunk's pages its own, rows and dictionary entries
numbered without gaps or overlaps. A plan that fails is refused before
anything reaches the GPU. (Output buffers are placed by the service itself,
with :func:`~.tables.place_outputs` of the measured records.)
"""

from __future__ import annotations

import numpy as np

from .tables import CHUNK, PAGE, OutKind, PageKind, Physical

__all__ = ["PlanError", "check_plan", "MAX_ROWS"]

# The kernels index rows with int32 within a page and int64 across the batch;
# a batch is bounded by batch_bytes long before this.
MAX_ROWS = (1 << 31) - 1
# fixed_size_binary values wider than this are left to pyarrow by the planner.
MAX_FIXED_WIDTH = 1 << 16

_FIXED_PHYSICAL_WIDTH = {Physical.INT32: 4, Physical.INT64: 8, Physical.FLOAT: 4, Physical.DOUBLE: 8}


class PlanError(ValueError):
    """A decode plan that the kernels must not run."""


def _fail(what: str, index) -> None:
    raise PlanError(f"{what} (record {int(index)})")


def _any(bad: np.ndarray, what: str) -> None:
    if bad.any():
        _fail(what, np.argmax(bad))


def check_plan(ranges: np.ndarray, chunks: np.ndarray, pages: np.ndarray, data_bytes: int,
               src_nbytes: int) -> None:
    """Check an upload and its records against each other.

    Parameters
    ----------
    ranges : ndarray of int64, shape (n, 3)
        Source offset, bytes and offset in ``data`` of each upload.
    chunks, pages : ndarray of CHUNK, PAGE
    data_bytes : int
        Size of the device copy ``data``.
    src_nbytes : int
        Size of the host buffer the ranges read.

    Raises
    ------
    PlanError
    """
    if chunks.dtype != CHUNK or pages.dtype != PAGE:
        raise PlanError("records of the wrong layout")
    if data_bytes < 0:
        raise PlanError("negative data size")
    if len(ranges):
        so, n, do = ranges[:, 0], ranges[:, 1], ranges[:, 2]
        _any((so < 0) | (n < 0) | (so > src_nbytes - n), "an upload range outside the source buffer")
        _any((do < 0) | (do > data_bytes - n), "an upload range outside the device copy")
    nch, npg = len(chunks), len(pages)
    if nch == 0:
        if npg:
            raise PlanError("pages without chunks")
        return
    kind, phys = chunks["kind"], chunks["physical"]
    width, tlen = chunks["width"], chunks["type_length"]
    _any(~np.isin(kind, [int(k) for k in OutKind]), "an unknown output kind")
    _any((chunks["max_def"] < 0) | (chunks["max_def"] > 1), "a definition level other than 0 or 1")
    fixed_w = np.zeros(nch, dtype=np.int64)
    for p, w in _FIXED_PHYSICAL_WIDTH.items():
        fixed_w[phys == p] = w
    flba = phys == Physical.FIXED_LEN_BYTE_ARRAY
    _any(flba & ((tlen < 1) | (tlen > MAX_FIXED_WIDTH)), "a fixed length out of range")
    fixed_w[flba] = tlen[flba]
    ok = np.zeros(nch, dtype=bool)
    ok |= (kind == OutKind.COPY) & (fixed_w > 0) & (width == fixed_w)
    ok |= (kind == OutKind.NARROW) & (phys == Physical.INT32) & ((width == 1) | (width == 2))
    ok |= (kind == OutKind.DECIMAL) & (width == 16) & (
        (phys == Physical.INT32) | (phys == Physical.INT64) | (flba & (tlen <= 16)))
    ok |= (kind == OutKind.BOOL) & (phys == Physical.BOOLEAN) & (width == 0)
    ok |= (kind == OutKind.BYTES) & (phys == Physical.BYTE_ARRAY) & ((width == 4) | (width == 8))
    _any(~ok, "an output kind, physical type and width that do not go together")
    rows = chunks["num_rows"]
    _any(rows < 0, "a negative row count")
    if int(rows.sum()) > MAX_ROWS:
        raise PlanError(f"{int(rows.sum())} rows in one decode batch")
    base = np.concatenate(([0], np.cumsum(rows)[:-1]))
    _any(chunks["row_base"] != base, "rows not numbered in chunk order")
    first, count = chunks["first_page"].astype(np.int64), chunks["num_pages"].astype(np.int64)
    _any((first < 0) | (count < 0) | (first > npg - count), "data pages outside the page records")
    dict_page = chunks["dict_page"].astype(np.int64)
    _any((dict_page < -1) | (dict_page >= npg), "a dictionary page outside the page records")
    if npg == 0:
        return
    off, size = pages["offset"], pages["size"]
    _any((off < 0) | (size < 0) | (off > data_bytes - size), "a page outside the device copy")
    _any(~np.isin(pages["kind"], [int(k) for k in PageKind]), "an unknown page kind")
    _any(pages["num_values"] < 0, "a negative value count")
    _any((pages["def_bytes"] < -1) | (pages["def_bytes"].astype(np.int64) > size), "level bytes past the page")
    pchunk = pages["chunk"].astype(np.int64)
    _any((pchunk < 0) | (pchunk >= nch), "a page of no chunk")
    # Each data page belongs to the chunk whose range holds it, and the
    # chunk's pages cover its rows in order without overlap.
    owner = np.full(npg, -1, dtype=np.int64)
    for c in range(nch):
        lo, hi = int(first[c]), int(first[c] + count[c])
        if (owner[lo:hi] >= 0).any():
            _fail("data pages shared by two chunks", c)
        owner[lo:hi] = c
        d = int(dict_page[c])
        if d >= 0:
            if owner[d] >= 0 or pages["kind"][d] != PageKind.DICTIONARY or pchunk[d] != c:
                _fail("a dictionary page that is not its chunk's own", c)
            owner[d] = c
    _any(owner != pchunk, "a page outside its chunk's records")
    is_data = pages["kind"] != PageKind.DICTIONARY
    start = pages["row_start"]
    cbase = chunks["row_base"][pchunk]
    cend = cbase + rows[pchunk]
    nv = pages["num_values"].astype(np.int64)
    _any(is_data & ((start < cbase) | (start + nv > cend)), "a data page outside its chunk's rows")
    for c in range(nch):
        lo, hi = int(first[c]), int(first[c] + count[c])
        if hi > lo:
            s, v = start[lo:hi], nv[lo:hi]
            if s[0] != chunks["row_base"][c] or (s[1:] != s[:-1] + v[:-1]).any() or s[-1] + v[-1] != cend[lo]:
                _fail("data pages that do not cover their chunk's rows in order", c)
            if not is_data[lo:hi].all():
                _fail("a dictionary page among the data pages", c)
        elif rows[c]:
            _fail("rows without pages", c)
    dicts = np.where(dict_page >= 0, pages["num_values"][np.maximum(dict_page, 0)], 0).astype(np.int64)
    dbase = np.concatenate(([0], np.cumsum(dicts)[:-1]))
    _any(chunks["dict_base"] != dbase, "dictionary entries not numbered in chunk order")
