"""The host check of a compressed Zstd block's section headers, against libzstd.

Before a Zstd page reaches the GPU its frames and blocks are walked on the
host (``format/zstd_blocks.py``), a compressed block's literals and
sequences section headers included. The check must never refuse a frame
libzstd decodes to the page's size (here: cramjam's libzstd, and pyarrow's
codec, what Parquet reads with), and it should refuse most frames whose
compressed block holds noise behind a valid block header (what made nvCOMP
read outside its buffers).
"""

from __future__ import annotations

import functools
import random

import cramjam
import numpy as np
import pyarrow as pa
import pytest

from dask_hwdecomp.decompress.validate import zstd_frames
from dask_hwdecomp.errors import CorruptPageError, PageLocation
from dask_hwdecomp.format.codecs import zstd_descriptor
from dask_hwdecomp.jobs import Algo, Job


def _libzstd_reads(frame: bytes, size: int) -> bool:
    out = np.zeros(size + 64, np.uint8)
    try:
        if cramjam.zstd.decompress_into(frame, out) != size:
            return False
        pa.Codec("zstd").decompress(frame, decompressed_size=size)
    except (cramjam.DecompressionError, OSError, pa.ArrowInvalid):
        return False
    return True


def _passes(frame: bytes, size: int) -> bool:
    try:
        zstd_frames(frame, Job(Algo.ZSTD, 0, len(frame), 0, size, 0, PageLocation()))
    except CorruptPageError:
        return False
    return True


@functools.cache
def _frames() -> list[tuple[bytes, int]]:
    rng = np.random.default_rng(3)
    pages = [
        rng.integers(0, 50, 20000).astype(np.int64).tobytes(),  # several blocks of small integers
        b"a column of text; lineitem comment " * 3000,
        rng.bytes(50000) + bytes(20000),
        np.repeat(rng.integers(0, 1 << 30, 3000), 7).astype(np.int32).tobytes(),
        bytes(range(256)) * 100,
        b"ab" * 8,
    ]
    out = []
    for page in pages:
        for level in (1, 3, 19):
            out.append((bytes(cramjam.zstd.compress(page, level=level)), len(page)))
        out.append((bytes(pa.Codec("zstd").compress(page)), len(page)))
    return out


def _first_compressed_block(frame: bytearray) -> tuple[int, int] | None:
    """(content offset, size) of the frame's first compressed block, if any."""
    desc = zstd_descriptor(frame[4])
    pos = desc.header_bytes + desc.content_size_bytes
    while pos + 3 <= len(frame):
        header = int.from_bytes(frame[pos : pos + 3], "little")
        kind, size = (header >> 1) & 3, header >> 3
        if kind == 2:
            return pos + 3, size
        pos += 3 + (1 if kind == 1 else size)
        if header & 1:
            break
    return None


def test_every_frame_libzstd_writes_passes():
    for frame, size in _frames():
        assert _libzstd_reads(frame, size)
        assert _passes(frame, size), (len(frame), size)


@pytest.mark.parametrize("seed", [0, 1])
def test_no_mutated_frame_libzstd_decodes_is_refused(seed):
    rnd = random.Random(seed)
    frames = _frames()
    refused = 0
    for t in range(1500):
        frame, size = frames[t % len(frames)]
        b = bytearray(frame)
        for _ in range(rnd.randint(1, 3)):
            if t % 2:
                b[rnd.randrange(len(b))] ^= 1 << rnd.randrange(8)
            else:
                b[rnd.randrange(6, len(b))] = rnd.randrange(256)
        b = bytes(b)
        if _libzstd_reads(b, size):
            assert _passes(b, size), (seed, t)
        else:
            refused += 1
    assert refused > 300


def test_noise_in_a_compressed_block_behind_a_valid_header_is_mostly_refused_on_the_host():
    rnd = random.Random(7)
    caught = refused_by_libzstd = 0
    frames = [(f, s) for f, s in _frames() if _first_compressed_block(bytearray(f))]
    for t in range(400):
        frame, size = frames[t % len(frames)]
        b = bytearray(frame)
        at, n = _first_compressed_block(b)
        b[at : at + n] = rnd.randbytes(n)
        b = bytes(b)
        if _libzstd_reads(b, size):
            assert _passes(b, size)
            continue
        refused_by_libzstd += 1
        caught += not _passes(b, size)
    assert refused_by_libzstd > 350
    # Without the section checks none is caught (the frame and block headers are intact).
    assert caught >= 0.9 * refused_by_libzstd, (caught, refused_by_libzstd)
