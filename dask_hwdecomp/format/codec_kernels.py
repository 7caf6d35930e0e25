"""The compiled codec framing: the decompression jobs of one compressed page body.

:func:`body_jobs` is :func:`~dask_hwdecomp.format.codecs.plan_body` over a
numpy byte array and without the GIL: it checks a body's framing (the
Snappy length varint, the gzip header and trailer, the Hadoop LZ4 blocks,
the Zstandard frame header) and writes the jobs that decompress it, as
rows of a *job table* by the ``J_`` columns, in the plain bitstream
algorithms ``A_`` (:mod:`~dask_hwdecomp.format.fastlayout` maps them to
:data:`~dask_hwdecomp.jobs.ALGOS`). A body the reference would refuse is
:data:`~dask_hwdecomp.format.thrift_kernels.ERROR`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .thrift_kernels import ERROR, OK

__all__ = ["J_ALGO", "J_SRC", "J_SRCSIZE", "J_DST", "J_DSTSIZE", "J_CRC", "J_PRE", "NJ",
           "A_SNAPPY", "A_DEFLATE", "A_GZIP", "A_LZ4", "A_ZSTD", "A_BROTLI", "snappy_varint", "body_jobs", "read_le",
           "u32le"]

# job table columns: src absolute in the batch source, dst relative to the page's value start
J_ALGO, J_SRC, J_SRCSIZE, J_DST, J_DSTSIZE, J_CRC, J_PRE = 0, 1, 2, 3, 4, 5, 6
NJ = 7
# Algo codes (fastlayout maps them to codecs.Algo)
A_SNAPPY, A_DEFLATE, A_GZIP, A_LZ4, A_ZSTD, A_BROTLI = 0, 1, 2, 3, 4, 5

_SNAPPY, _GZIP, _LZ4, _ZSTD, _BROTLI, _LZ4_RAW = 1, 2, 5, 6, 4, 7


@njit(nogil=True, cache=True)
def read_le(src, at, nbytes):  # pragma: no cover - compiled
    """The ``nbytes`` (at most 8) little-endian bytes of ``src`` at ``at``, as an int64 (eight with the top bit set: negative)."""
    v = np.int64(0)
    for i in range(nbytes):
        v |= np.int64(src[at + i]) << (8 * i)
    return v


@njit(nogil=True, cache=True)
def u32le(b, p):  # pragma: no cover - compiled
    """The four little-endian bytes of ``b`` at ``p``, as an int64 (unrolled, for hot loops)."""
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
    """Read the length varint that starts a raw Snappy block ``b[s:s+n]``.

    Returns
    -------
    length, size
        The uncompressed length it declares and the bytes of the varint;
        (0, 0) if there is none.
    """
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
def body_jobs(b, s, n, codec, expected, jobs, nj):
    """Write the jobs that decompress one compressed page body ``b[s:s+n]``.

    Parameters
    ----------
    b : uint8 array
    s, n : int
        The body's first byte in ``b`` and its bytes.
    codec : int
        Its chunk's Parquet ``CompressionCodec``.
    expected : int
        The bytes it decompresses to (the page's uncompressed size less its
        v2 level bytes).
    jobs : int64 array (rows, NJ)
        The job table: rows from ``nj`` on get the jobs (the caller
        reserves ``n // 8 + 2`` rows).
    nj : int

    Returns
    -------
    status, nj
        :data:`~dask_hwdecomp.format.thrift_kernels.OK` and the next free
        row, or ERROR where :func:`~dask_hwdecomp.format.codecs.plan_body`
        raises (and ``nj`` unchanged).
    """
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
        crc = u32le(b, s + n - 8)
        isize = u32le(b, s + n - 4)
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
        if n < 5 or u32le(b, s) != 0xFD2FB528:
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
