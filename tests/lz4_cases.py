"""LZ4 blocks for the tests of the LZ4 walk: the library's own, mutated ones, and its verdict on them."""

from __future__ import annotations

import random

import cramjam
import numpy as np

__all__ = ["compress", "library_reads", "datas", "mutants"]


def compress(data: bytes) -> bytes:
    """An LZ4 block, as an LZ4_RAW page stores it (no size prefix)."""
    return bytes(cramjam.lz4.compress_block(data, store_size=False))


def library_reads(block: bytes, size: int) -> bool:
    """The LZ4 library decodes ``block`` to exactly ``size`` bytes (what a Parquet reader requires)."""
    out = np.zeros(max(size, 1), np.uint8)
    try:
        return cramjam.lz4.decompress_block_into(block, out) == size
    except cramjam.DecompressionError:
        return False


def datas() -> list[bytes]:
    """Pages of several kinds of data, uncompressed."""
    rng = np.random.default_rng(5)
    return [
        rng.integers(0, 50, 6000).astype(np.int64).tobytes(),  # small integers: many short matches
        b"a column of text, a column of text; " * 300,
        rng.bytes(4000),  # incompressible: one literal run
        bytes(3000),  # one long match
        np.repeat(rng.integers(0, 1 << 30, 400), 7).astype(np.int32).tobytes(),
    ]


def mutants(count: int, seed: int = 0):
    """(block, declared size) pairs: bits flipped, bytes replaced, blocks cut short, sizes misdeclared."""
    rnd = random.Random(seed)
    pages = datas()
    blocks = [compress(d) for d in pages]
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
