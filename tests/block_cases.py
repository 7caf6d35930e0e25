"""LZ4 and Snappy blocks for the tests of the block checks: the libraries' own, mutated ones, their verdicts.

The verdicts are the reference decoders Parquet reads with: the LZ4
library (``LZ4_decompress_safe`` through cramjam) and Google's Snappy
(through pyarrow's codec), each to exactly the page's declared size.
"""

from __future__ import annotations

import random

import cramjam
import numpy as np
import pyarrow as pa

__all__ = ["FORMATS", "compress", "library_reads", "datas", "mutants"]

FORMATS = ("lz4", "snappy")


def compress(fmt: str, data: bytes) -> bytes:
    """A block as a page stores it: LZ4 with no size prefix, Snappy raw (its length varint first)."""
    if fmt == "lz4":
        return bytes(cramjam.lz4.compress_block(data, store_size=False))
    return bytes(cramjam.snappy.compress_raw(data))


def _snappy_length(block: bytes) -> int | None:
    value = shift = 0
    for b in block[:5]:
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value
        shift += 7
    return None


def library_reads(fmt: str, block: bytes, size: int) -> bool:
    """The reference decoder decodes ``block`` to exactly ``size`` bytes (what a Parquet reader requires)."""
    if fmt == "lz4":
        out = np.zeros(max(size, 1), np.uint8)
        try:
            return cramjam.lz4.decompress_block_into(block, out) == size
        except cramjam.DecompressionError:
            return False
    if _snappy_length(block) != size:
        return False
    try:
        pa.Codec("snappy").decompress(block, decompressed_size=size)
    except (OSError, pa.ArrowInvalid):
        return False
    return True


def datas() -> list[bytes]:
    """Pages of several kinds of data, uncompressed."""
    rng = np.random.default_rng(5)
    return [
        rng.integers(0, 50, 6000).astype(np.int64).tobytes(),  # small integers: many short matches
        b"a column of text, a column of text; " * 300,
        rng.bytes(4000),  # incompressible: one literal run
        bytes(3000),  # one long match
        np.repeat(rng.integers(0, 1 << 30, 400), 7).astype(np.int32).tobytes(),
        rng.bytes(70000) + bytes(70000),  # literals longer than 64 KiB, then copies far back
    ]


def mutants(fmt: str, count: int, seed: int = 0):
    """(block, declared size) pairs: bits flipped, bytes replaced, blocks cut short, sizes misdeclared."""
    rnd = random.Random(seed)
    pages = datas()
    blocks = [compress(fmt, d) for d in pages]
    for t in range(count):
        k = t % len(pages)
        block, size = bytearray(blocks[k]), len(pages[k])
        kind = t % 4
        if kind == 0:
            for _ in range(rnd.randint(1, 3)):
                at = rnd.randrange(len(block))
                block[at] ^= 1 << rnd.randrange(8)
        elif kind == 1:
            block[rnd.randrange(len(block))] = rnd.randrange(256)
        elif kind == 2:
            block = block[: rnd.randrange(1, len(block))]
        else:
            size += rnd.choice((-1, 1, -5, 7))
        yield bytes(block), size
