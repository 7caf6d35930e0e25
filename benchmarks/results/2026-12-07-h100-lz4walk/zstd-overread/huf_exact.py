"""The host-side rule, sketched: each Huffman literal stream of a compressed block must be consumed
exactly (RFC 8878 4.2.2). Only the code LENGTHS matter, so the compiled loop walks a table of
2^max_bits code lengths (no symbols written, no sequences executed).

streams_bits_left(src, starts, ends, counts, lengths, max_bits) -> bits left per stream
(0 = exact; < 0 = over-read: libzstd's fast path reads the bytes below the stream and nvCOMP,
apparently, zeros; > 0 = bits left over, which both ignore).

The Huffman table is read here with zstd_trace's Python parser (in the project it would join the
compiled walk in format/zstd_blocks.py, which already finds the tree description and jump table).

Usage: python huf_exact.py FRAME...   (prints bits left per stream and the time per literal)
"""
from __future__ import annotations

import sys
import time

import numpy as np
from numba import njit

from zstd_trace import Decoder, build_huffman_table, read_huffman_tree


@njit(nogil=True, cache=True)
def streams_bits_left(src, starts, ends, counts, lengths, max_bits):
    out = np.zeros(len(starts), np.int64)
    mask = (1 << max_bits) - 1
    for k in range(len(starts)):
        s, e, n = starts[k], ends[k], counts[k]
        last = np.int64(src[e - 1])
        if last == 0:
            out[k] = -(1 << 40)  # no end mark: refused anyway
            continue
        hb = 0
        while (last >> (hb + 1)) != 0:
            hb += 1
        pos = np.int64((e - s - 1) * 8 + hb)  # payload bits
        for _ in range(n):
            lo = pos - max_bits
            if lo >= 0:
                b = s + (lo >> 3)
                v = np.int64(src[b])
                if b + 1 < e:
                    v |= np.int64(src[b + 1]) << 8
                if b + 2 < e:
                    v |= np.int64(src[b + 2]) << 16
                v = (v >> (lo & 7)) & mask
            elif pos > 0:
                v = (np.int64(src[s]) | (np.int64(src[s + 1]) << 8 if s + 1 < e else 0)) & ((1 << pos) - 1)
                v = (v << (-lo)) & mask
            else:
                v = 0
            pos -= lengths[v]
        out[k] = pos
    return out


def literal_streams(frame: bytes):
    """(starts, ends, counts, lengths, max_bits) of the first compressed block's 4-stream literals, via the trace parser."""
    d = Decoder(frame, verbose=False)
    d.decode()  # reuse its parsing; the project would read only the literals section
    info = d.blocks[0]
    table = d.huf[0]
    max_bits = d.huf[1]
    lengths = np.array([nb for _, nb in table], np.int64)
    st = info["streams"]
    return (np.array([x["start"] for x in st], np.int64), np.array([x["end"] for x in st], np.int64),
            np.array([x["count"] for x in st], np.int64), lengths, max_bits)


def main(paths):
    for p in paths:
        frame = open(p, "rb").read()
        src = np.frombuffer(frame, np.uint8)
        starts, ends, counts, lengths, max_bits = literal_streams(frame)
        left = streams_bits_left(src, starts, ends, counts, lengths, max_bits)
        reps = max(1, 2_000_000 // int(counts.sum()))
        t = time.perf_counter()
        for _ in range(reps):
            streams_bits_left(src, starts, ends, counts, lengths, max_bits)
        dt = (time.perf_counter() - t) / reps
        print(f"{p}: {int(counts.sum())} literals, max_bits {max_bits}, bits left {left.tolist()} "
              f"({'EXACT' if not left.any() else 'NOT EXACT'}); {dt * 1e6:.1f} us, "
              f"{dt / counts.sum() * 1e9:.2f} ns/literal")


if __name__ == "__main__":
    main(sys.argv[1:])
