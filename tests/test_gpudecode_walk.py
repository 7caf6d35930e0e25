"""The length walk of PLAIN byte arrays (``kernels_walk.walk_lengths``) against a serial walk.

Random pages of length-prefixed values, many of them spoilt (cut short,
a huge length, too few values), walked by one thread block; each value's
length and start, and the error, must be the serial walk's. The lengths
are chosen around the walk's segment size and guess span, so that
prefixes start on a segment's last bytes, values end on its edge, values
longer than a segment leave segments without a prefix, and segments find
no guess. The values' bytes are random (a wrong start soon reads a length
past the page: the guesses are right), text, or bytes below 4 (nearly
every start looks like a chain: many guesses are wrong and the chain is
walked by one thread). Under numba's CUDA simulator without a GPU; on the
GPU machine with the device's segment and block sizes.
"""

from __future__ import annotations

import ctypes
import os

if "NUMBA_ENABLE_CUDASIM" not in os.environ:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import numba
import numpy as np
import pytest
from numba import cuda

from dask_hwdecomp.gpudecode import kernels_walk
from dask_hwdecomp.gpudecode.kernels_delta import E_LENGTH, E_VALUES

_SHARED = kernels_walk.SHARED_WORDS
_SEG = kernels_walk.MIN_SEGMENT
_SPAN = kernels_walk.GUESS_SPAN


@cuda.jit
def _walk_one(data, pos, end, n, out_len, out_src, err):
    sh = cuda.shared.array(_SHARED, numba.int64)
    e = kernels_walk.walk_lengths(data, pos, end, n, out_len, out_src, 0, sh)
    if cuda.threadIdx.x == 0:
        err[0] = e


def serial_walk(buf: bytes, pos: int, end: int, n: int):
    """The reference: (lengths, starts, error) of walking ``n`` values of ``buf[pos:end]``."""
    lens, starts = [], []
    x = pos
    while len(lens) < n:
        if x + 4 > end:
            return lens, starts, E_VALUES
        ln = int.from_bytes(buf[x : x + 4], "little")
        if ln > end - x - 4:
            return lens, starts, E_LENGTH
        lens.append(ln)
        starts.append(x + 4)
        x += 4 + ln
    return lens, starts, 0


def _content(rng, kind: str, ln: int) -> bytes:
    if kind == "text":
        return bytes(rng.integers(32, 127, ln, dtype=np.uint8))
    if kind == "low":
        return bytes(rng.integers(0, 4, ln, dtype=np.uint8))
    return bytes(rng.integers(0, 256, ln, dtype=np.uint8))


def _page(rng, count: int | None = None, short: bool = False) -> tuple[bytes, int, int, int]:
    """A buffer, the page's first and end byte, and the values to walk (often not what the page holds)."""
    sizes = [0, 1, 3, _SEG - 8, _SEG - 5, _SEG - 4, _SEG - 3, _SEG, _SEG + 1, 2 * _SEG + 7, 3 * _SEG, _SPAN - 2,
             _SPAN + 5]
    count = int(rng.integers(0, 60)) if count is None else count
    kind = str(rng.choice(["random", "text", "low"]))
    lens = [int(rng.choice(sizes)) if rng.random() < 0.3 and not short else int(rng.integers(0, 12))
            for _ in range(count)]
    body = bytearray(b"".join(ln.to_bytes(4, "little") + _content(rng, kind, ln) for ln in lens))
    spoil = rng.random()
    if spoil < 0.15 and body:
        body = body[: int(rng.integers(0, len(body)))]  # cut short anywhere
    elif spoil < 0.25 and len(body) >= 4:
        at = int(rng.integers(0, len(body) - 3))
        body[at : at + 4] = int(rng.integers(2**20, 2**32)).to_bytes(4, "little")  # a huge length somewhere
    lead = bytes(rng.integers(0, 256, int(rng.integers(0, 9)), dtype=np.uint8))
    tail = bytes(rng.integers(0, 256, 16, dtype=np.uint8))  # bytes past the page the walk must not read as it
    n = count + int(rng.choice([0, 0, 0, -1, 1, 5])) if count else int(rng.integers(0, 3))
    return lead + bytes(body) + tail, len(lead), len(lead) + len(body), max(n, 0)


def _check(buf: bytes, pos: int, end: int, n: int, where) -> None:
    lens, starts, want = serial_walk(buf, pos, end, n)
    out_len = np.full(max(n, 1), -1, np.int64)
    out_src = np.full(max(n, 1), -1, np.int64)
    err = np.zeros(1, np.int64)
    d_len, d_src, d_err = cuda.to_device(out_len), cuda.to_device(out_src), cuda.to_device(err)
    data = cuda.to_device(np.frombuffer(buf, np.uint8))
    _walk_one[1, kernels_walk.THREADS](data, pos, end, n, d_len, d_src, d_err)
    got_len, got_src = d_len.copy_to_host(), d_src.copy_to_host()
    assert int(d_err.copy_to_host()[0]) == want, (where, pos, end, n)
    assert got_len[: len(lens)].tolist() == lens, where
    assert got_src[: len(starts)].tolist() == starts, where
    assert (got_len[len(lens) :] == -1).all(), where  # nothing written past the values walked


@pytest.mark.parametrize("seed", range(8))
def test_walk_equals_the_serial_walk(seed):
    rng = np.random.default_rng(seed)
    for i in range(6):
        buf, pos, end, n = _page(rng)
        _check(buf, pos, end, n, (seed, i))
        walked = serial_walk(buf, pos, end, n)[0]
        if len(walked) < n:  # stopped by an error: the walk of just the values before it succeeds
            _check(buf, pos, end, len(walked), (seed, i, "before the error"))


@pytest.mark.parametrize("seed", range(3))
def test_a_page_longer_than_its_segments_walks_as_the_serial_walk(seed):
    """Pages of short values over every segment, the segments longer than the shortest."""
    rng = np.random.default_rng(100 + seed)
    count = 3 * kernels_walk.SEGMENTS * _SEG // 10
    _check(*_page(rng, count, short=True), seed)
