"""Zstd frames with one Huffman literal stream made a byte shorter or longer than its literals need.

Ported from the crafting of 2026-12-07 (``benchmarks/results/2026-12-07-h100-lz4walk/zstd-overread/craft.py``):
compress data with libzstd, then in the first compressed block whose
literals are Huffman-coded delete the first byte of stream ``k`` (the last
8 bits its backward reading reaches: the stream is over-read) or insert a
zero byte there (8 bits are left over), and fix the sizes: the jump table
entry of a stream before the last, the literals header's compressed size
and the block header's size. libzstd's fast four-stream path decodes an
over-read stream from the bytes below it without an error; its one-stream
decoder checks the stream's end and refuses it.
"""

from __future__ import annotations

import random
import struct
from typing import NamedTuple

import numpy as np
import pyarrow as pa


class Literals(NamedTuple):
    """Where a compressed block's Huffman literals section lies in its frame."""

    block: int  # the block header
    bsize: int
    lit: int  # the literals section header
    hsize: int
    regen: int
    csize: int
    cshift: int
    cbits: int
    jump: int  # the jump table (four streams), or the single stream's start
    sizes: list
    starts: list
    streams: int  # 1 or 4


def _first_block(frame: bytes) -> int:
    fhd = frame[4]
    single, did, fcs_flag = (fhd >> 5) & 1, fhd & 3, fhd >> 6
    return 5 + (0 if single else 1) + [0, 1, 2, 4][did] + [1 if single else 0, 2, 4, 8][fcs_flag]


def huffman_literals(frame: bytes, streams: int = 4) -> Literals | None:
    """The first compressed block with a Huffman tree and ``streams`` literal streams, or None."""
    p = _first_block(frame)
    while True:
        bh = int.from_bytes(frame[p : p + 3], "little")
        last, btype, bsize = bh & 1, (bh >> 1) & 3, bh >> 3
        if btype == 2:
            q = p + 3
            b0 = frame[q]
            ltype, sf = b0 & 3, (b0 >> 2) & 3
            if ltype == 2 and (sf == 0) == (streams == 1):
                h = int.from_bytes(frame[q : q + 5], "little")
                if sf <= 1:
                    hsize, regen, csize, cshift, cbits = 3, (h >> 4) & 0x3FF, (h >> 14) & 0x3FF, 14, 10
                elif sf == 2:
                    hsize, regen, csize, cshift, cbits = 4, (h >> 4) & 0x3FFF, (h >> 18) & 0x3FFF, 18, 14
                else:
                    hsize, regen, csize, cshift, cbits = 5, (h >> 4) & 0x3FFFF, (h >> 22) & 0x3FFFF, 22, 18
                hb = frame[q + hsize]
                tree = 1 + (hb if hb < 128 else ((hb - 127) + 1) // 2)
                jump = q + hsize + tree
                send = q + hsize + csize
                if streams == 1:
                    sizes, starts = [send - jump], [jump]
                else:
                    sizes = [int.from_bytes(frame[jump + 2 * i : jump + 2 * i + 2], "little") for i in range(3)]
                    sizes.append(send - jump - 6 - sum(sizes))
                    starts = [jump + 6]
                    for s in sizes[:3]:
                        starts.append(starts[-1] + s)
                return Literals(p, bsize, q, hsize, regen, csize, cshift, cbits, jump, sizes, starts, streams)
        p += 3 + (1 if btype == 1 else bsize)
        if last:
            return None


def resized(frame: bytes, lits: Literals, k: int, delta: int) -> bytes:
    """``frame`` with stream ``k``'s first byte deleted (``delta`` -1) or a zero byte put before it (+1)."""
    f = bytearray(frame)
    at = lits.starts[k]
    if delta < 0:
        del f[at : at + 1]
    else:
        f[at:at] = b"\x00"
    if lits.streams == 4 and k < 3:
        pos = lits.jump + 2 * k
        f[pos : pos + 2] = (lits.sizes[k] + delta).to_bytes(2, "little")
    q, hsize = lits.lit, lits.hsize
    h = int.from_bytes(f[q : q + hsize], "little")
    mask = ((1 << lits.cbits) - 1) << lits.cshift
    h = (h & ~mask) | ((lits.csize + delta) << lits.cshift)
    f[q : q + hsize] = h.to_bytes(hsize, "little")
    b = lits.block
    bh = int.from_bytes(f[b : b + 3], "little")
    f[b : b + 3] = ((bh & 7) | ((lits.bsize + delta) << 3)).to_bytes(3, "little")
    return bytes(f)


def datasets() -> list[tuple[str, bytes]]:
    """Data whose frames have Huffman literals: random integers of a few ranges, words, skewed bytes."""
    rng = random.Random(1137)
    words = [f"value-{i}" for i in range(300)] + ["alpha", "beta", "gamma", "delta", "the", "of"]
    return [
        ("int64-0-999-x600", struct.pack("<600q", *[rng.randrange(1000) for _ in range(600)])),
        ("int64-0-99999-x12000", struct.pack("<12000q", *[rng.randrange(100000) for _ in range(12000)])),
        ("text-words", " ".join(rng.choice(words) for _ in range(160000)).encode()[:1200000]),
        ("skewed-bytes", bytes(min(255, int(rng.expovariate(0.05))) for _ in range(60000))),
        ("short-text", " ".join(rng.choice(words) for _ in range(30)).encode()),
    ]


def zstd(data: bytes, level: int) -> bytes:
    """libzstd's frame of ``data`` (pyarrow's codec)."""
    return pa.Codec("zstd", compression_level=level).compress(data).to_pybytes()


def unzstd(frame: bytes, size: int) -> bytes:
    """libzstd's output of ``frame`` (pyarrow's codec); raises as pyarrow does."""
    return pa.Codec("zstd").decompress(frame, decompressed_size=size).to_pybytes()


class FarStreams(NamedTuple):
    """Streams of random bytes read with a real Huffman tree, most with counts far from their bits."""

    src: np.ndarray
    start: np.ndarray
    end: np.ndarray
    count: np.ndarray
    lengths_at: np.ndarray  # per stream, the tree's table resolved
    table_log: np.ndarray
    lengths: np.ndarray


def far_streams() -> FarStreams:
    """Random streams of 1 to 300 bytes with a tree of libzstd's, counted as the host steps them.

    Three count the literals that take them to their start (the last may
    reach below it); then one counts none, one a third of them, one one
    fewer (bits left over, the literals ending in an early or in the last
    piece of a walk in lanes), one 40 more (an over-read: the literals past
    the stream's start read zeros), and the last has no end mark.
    """
    from dask_hwdecomp.format.zstd_streams import pages_streams, step_py

    frame = np.frombuffer(zstd(datasets()[0][1], 3), np.uint8)
    s = pages_streams(frame, np.zeros(1, np.int64), np.array([len(frame)], np.int64))
    at, log = int(s.lengths_at[0]), int(s.table_log[0])
    rng = np.random.default_rng(11)
    pieces, starts, ends, counts = [], [], [], []
    pos = 0
    for size in (1, 9, 40, 300, 300, 300, 300):
        body = rng.integers(0, 256, size, dtype=np.uint8)
        body[-1] |= 0x10
        pieces.append(body)
        starts.append(pos)
        pos += size
        ends.append(pos)
    src = np.concatenate(pieces)
    for a, b in zip(starts, ends):  # each stream's literals to its end, stepped as the host steps
        p, n = (b - a - 1) * 8 + int(src[b - 1]).bit_length() - 1, 0
        while p > 0:
            p, n = step_py(src, a, b, p, log, s.lengths, at), n + 1
        counts.append(n)
    counts[3:7] = [0, counts[4] // 3, counts[5] - 1, counts[6] + 40]
    src = np.concatenate([src, np.array([7, 0], np.uint8)])  # no end mark
    starts.append(pos)
    ends.append(pos + 2)
    counts.append(3)
    m = len(starts)
    return FarStreams(src, np.array(starts, np.int64), np.array(ends, np.int64), np.array(counts, np.int64),
                      np.full(m, at, np.int64), np.full(m, log, np.int64), np.ascontiguousarray(s.lengths))
