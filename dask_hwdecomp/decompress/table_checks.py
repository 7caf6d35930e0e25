"""The host checks of :mod:`~dask_hwdecomp.decompress.validate`, over a whole job table at once.

A GPU call takes thousands of pages; checking each as a :class:`~dask_hwdecomp.jobs.Job`
in Python cost the GPU service more than the call itself. Here the bounds
are numpy comparisons over the table's columns, and the framing (a Snappy
block's length varint, every Zstd frame and block header) is walked by one
compiled loop that releases the GIL.

These checks only *find* the jobs :func:`~dask_hwdecomp.decompress.validate.check_job`
rejects; the error raised is always that reference's, run on the first job
found (so its message and location are the same as when every job was
checked one by one). A job found here that the reference passes is not an
error: the reference decides (the tests hold the two to the same verdicts).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ..format.codec_kernels import read_le, snappy_varint
from ..format.zstd_blocks import BLOCK_OK, zstd_block_max, zstd_blocks
from ..jobs import ALGOS, Algo, JobTable

__all__ = ["Suspects", "find_suspects"]

_SNAPPY = ALGOS.index(Algo.SNAPPY)
_ZSTD = ALGOS.index(Algo.ZSTD)
_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE = 0x184D2A50
_WINDOW_LOG_MAX = 31


class Suspects(NamedTuple):
    """What :func:`find_suspects` found.

    Attributes
    ----------
    rows : numpy.ndarray of int64
        Rows of the table (ascending) that fail a check.
    zstd_summed : numpy.ndarray of int64
        Rows of Zstd jobs with at least one frame that stores a content
        checksum (checked on the host after the call by a backend whose
        decoder does not).
    """

    rows: np.ndarray
    zstd_summed: np.ndarray


@njit(nogil=True, cache=True)
def _snappy_ok(src, so, ss, ds, pre):  # pragma: no cover - compiled
    """Whether a Snappy job's length varint is valid and agrees with its sizes and preamble."""
    declared, length = snappy_varint(src, so, ss)
    return length > 0 and declared == ds and length == pre and length < ss


@njit(nogil=True, cache=True)
def _zstd_walk(src, so, ss, ds):  # pragma: no cover - compiled
    """0: the frames check out; 1: they do, and one stores a checksum; -1: rejected."""
    end = so + ss
    pos = so
    total = 0
    summed = 0
    while pos < end:
        if end - pos < 4:
            return -1
        magic = read_le(src, pos, 4)
        if magic & 0xFFFFFFF0 == _SKIPPABLE:
            if end - pos < 8:
                return -1
            pos += 8 + read_le(src, pos + 4, 4)
            if pos > end:
                return -1
            continue
        if magic != _ZSTD_MAGIC or pos + 5 > end:
            return -1
        fhd = np.int64(src[pos + 4])
        single = (fhd >> 5) & 1
        checksum = (fhd >> 2) & 1
        if fhd & 0x08:
            return -1
        did = fhd & 3
        did_len = 4 if did == 3 else did
        hdr = 5 + (0 if single else 1) + did_len
        code = fhd >> 6
        fcs_len = (1 if single else 0) if code == 0 else (2 if code == 1 else (4 if code == 2 else 8))
        window = -1
        if not single:
            if pos + 6 > end:
                return -1
            wd = np.int64(src[pos + 5])
            exp = (wd >> 3) + 10
            if exp > _WINDOW_LOG_MAX:
                return -1
            base = np.int64(1) << exp
            window = base + (base // 8) * (wd & 7)
        if pos + hdr + fcs_len > end:
            return -1
        fcs = -1
        if fcs_len:
            if fcs_len == 8 and src[pos + hdr + 7] & 0x80:
                return -1  # beyond any page
            fcs = read_le(src, pos + hdr, fcs_len)
            if fcs_len == 2:
                fcs += 256
        if single:
            window = fcs
        if fcs > ds:
            return -1
        total = -1 if fcs < 0 or total < 0 else total + fcs
        blocks = zstd_blocks(src, pos + hdr + fcs_len, end, zstd_block_max(window))
        if blocks.fault != BLOCK_OK or (fcs >= 0 and blocks.produced > fcs):
            return -1
        pos = blocks.at
        if checksum:
            pos += 4
            if pos > end:
                return -1
            summed = 1
    if total > ds:
        return -1
    return summed


@njit(nogil=True, cache=True)
def _walk(src, algo, so, ss, ds, pre, candidate, bad, summed):  # pragma: no cover - compiled
    for k in range(algo.shape[0]):
        if not candidate[k]:
            continue
        if algo[k] == _SNAPPY:
            if not _snappy_ok(src, so[k], ss[k], ds[k], pre[k]):
                bad[k] = True
        elif algo[k] == _ZSTD:
            r = _zstd_walk(src, so[k], ss[k], ds[k])
            if r < 0:
                bad[k] = True
            elif r == 1:
                summed[k] = True


def _column(values: np.ndarray) -> np.ndarray:
    """A job column as the compiled walk takes it: contiguous, writable int64.

    One type for every table: a column of a one-row table that views a
    read-only buffer is contiguous but read-only, and numba would compile
    the walk again for it, inside a request's deadline.
    """
    return np.require(values, np.int64, ["C", "W"])


def find_suspects(jobs: JobTable, src, src_len: int, dst_len: int, max_bytes: int, algorithms) -> Suspects:
    """The jobs of ``jobs`` that :func:`~dask_hwdecomp.decompress.validate.check_job` may reject.

    Parameters
    ----------
    jobs : JobTable
    src : buffer
        The batch source.
    src_len, dst_len : int
        Sizes of the batch's host buffers.
    max_bytes : int
        Largest input or output the decoder accepts.
    algorithms : collection of Algo
        The bitstreams the backend decodes (any other is rejected).
    """
    r = jobs.rows
    algo, so, ss = r["algo"], r["src_offset"], r["src_size"]
    do, ds, pre = r["dst_offset"], r["dst_size"], r["preamble"]
    codes = np.array([ALGOS.index(a) for a in algorithms], dtype=np.int64)
    bad = ~np.isin(algo, codes)
    bad |= (so < 0) | (ss < 1) | (so > src_len - ss)
    bad |= (do < 0) | (ds < 1) | (do > dst_len - ds)
    bad |= (ss > max_bytes) | (ds > max_bytes)
    bad |= (algo != _SNAPPY) & (pre != 0)
    candidate = ~bad & ((algo == _SNAPPY) | (algo == _ZSTD))
    summed = np.zeros(len(r), dtype=np.bool_)
    if candidate.any():
        buf = np.frombuffer(src, dtype=np.uint8, count=src_len)
        _walk(buf, _column(algo), _column(so), _column(ss), _column(ds), _column(pre), candidate, bad, summed)
    return Suspects(np.flatnonzero(bad).astype(np.int64), np.flatnonzero(summed & ~bad).astype(np.int64))
