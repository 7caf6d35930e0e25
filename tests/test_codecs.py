"""Codec planning: page bodies to plain bitstream jobs."""

from __future__ import annotations

import gzip
import os

import cramjam
import numpy as np
import pytest

from dask_hwdecomp.decompress.cpu import decompress_one
from dask_hwdecomp.errors import CorruptPageError, PageLocation
from dask_hwdecomp.format.codecs import plan_body
from dask_hwdecomp.format.structs import Codec
from dask_hwdecomp.jobs import Algo, Job

WHERE = PageLocation(file="f.parquet", row_group=0, column="c", page=3)


def _run(codec, body: bytes, expected: int) -> bytes:
    spans = plan_body(codec, memoryview(body), expected, WHERE)
    dst = np.zeros(expected, np.uint8)
    src = memoryview(body)
    for s in spans:
        job = Job(s.algo, s.src_offset, s.src_size, s.dst_offset, s.dst_size, codec, WHERE, s.crc32, s.preamble)
        decompress_one(job, src, memoryview(dst))
    return dst.tobytes(), spans


@pytest.mark.parametrize(
    "members",
    [[b"abc" * 100], [b"abc" * 50, b"xyz" * 70], [b"", b"all of it" * 30], [b"", b"", b"q" * 99], [b"a" * 10, b""]],
    ids=["one", "two", "empty-first", "two-empty-first", "empty-last"],
)
def test_gzip_members(members):
    body = b"".join(gzip.compress(m) for m in members)
    want = b"".join(members)
    got, spans = _run(Codec.GZIP, body, len(want))
    assert got == want
    # one member (and only then) goes to the deflate path GPUs take
    assert (spans[0].algo is Algo.DEFLATE) == (len(members) == 1)


def test_gzip_crc_mismatch_is_a_corrupt_page():
    body = bytearray(gzip.compress(b"hello world" * 20))
    body[-8] ^= 0xFF  # CRC
    with pytest.raises(CorruptPageError, match="CRC") as info:
        _run(Codec.GZIP, bytes(body), 220)
    assert info.value.location == WHERE


def test_snappy_declared_length_must_match():
    body = bytes(cramjam.snappy.compress_raw(b"x" * 1000))
    with pytest.raises(CorruptPageError, match="snappy block declares 1000"):
        plan_body(Codec.SNAPPY, memoryview(body), 999, WHERE)


def test_hadoop_lz4_blocks_and_bare_fallback():
    parts = [os.urandom(50) * 4, b"z" * 300]
    framed = b""
    for p in parts:
        block = bytes(cramjam.lz4.compress_block(p, store_size=False))
        framed += len(p).to_bytes(4, "big") + len(block).to_bytes(4, "big") + block
    got, spans = _run(Codec.LZ4, framed, 500)
    assert got == b"".join(parts) and len(spans) == 2
    bare = bytes(cramjam.lz4.compress_block(b"".join(parts), store_size=False))
    got, spans = _run(Codec.LZ4, bare, 500)
    assert got == b"".join(parts) and len(spans) == 1


def test_zero_expected_size_plans_nothing():
    assert plan_body(Codec.ZSTD, memoryview(bytes(cramjam.zstd.compress(b""))), 0, WHERE) == []


def test_lzo_is_unsupported():
    from dask_hwdecomp.errors import UnsupportedFeatureError

    with pytest.raises(UnsupportedFeatureError, match="LZO"):
        plan_body(Codec.LZO, memoryview(b"abc"), 10, WHERE)
