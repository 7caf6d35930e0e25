"""XXH64, the hash of Zstd's content checksum, and checking it with libzstd.

:func:`xxh64` is the reference algorithm in pure Python: slow (tens of ms
per MiB), used only to name the actual value of a checksum that failed and
by tests that build checksummed frames (cramjam's encoder never sets the
flag). :func:`content_checksum_matches` checks a decompressed frame's content
against its checksum at memory speed: it wraps the content in a Zstd frame
of raw blocks that carries the expected checksum and lets libzstd (cramjam)
decode it, which hashes the content and compares.
"""

from __future__ import annotations

import struct

import cramjam
import numpy as np

__all__ = ["xxh64", "zstd_with_checksum", "content_checksum_matches"]

_M = (1 << 64) - 1
P1 = 0x9E3779B185EBCA87
P2 = 0xC2B2AE3D27D4EB4F
P3 = 0x165667B19E3779F9
P4 = 0x85EBCA77C2B2AE63
P5 = 0x27D4EB2F165667C5


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * P2) & _M
    return (_rotl(acc, 31) * P1) & _M


def _merge(acc: int, val: int) -> int:
    acc ^= _round(0, val)
    return (acc * P1 + P4) & _M


def xxh64(data: bytes, seed: int = 0) -> int:
    """The 64-bit XXH64 of ``data``."""
    data = bytes(data)
    n = len(data)
    pos = 0
    if n >= 32:
        v = [(seed + P1 + P2) & _M, (seed + P2) & _M, seed & _M, (seed - P1) & _M]
        while pos + 32 <= n:
            lanes = struct.unpack_from("<4Q", data, pos)
            v = [_round(a, b) for a, b in zip(v, lanes)]
            pos += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
        for a in v:
            h = _merge(h, a)
    else:
        h = (seed + P5) & _M
    h = (h + n) & _M
    while pos + 8 <= n:
        (k,) = struct.unpack_from("<Q", data, pos)
        h ^= _round(0, k)
        h = (_rotl(h, 27) * P1 + P4) & _M
        pos += 8
    if pos + 4 <= n:
        (k,) = struct.unpack_from("<I", data, pos)
        h ^= (k * P1) & _M
        h = (_rotl(h, 23) * P2 + P3) & _M
        pos += 4
    while pos < n:
        h ^= (data[pos] * P5) & _M
        h = (_rotl(h, 11) * P1) & _M
        pos += 1
    h ^= h >> 33
    h = (h * P2) & _M
    h ^= h >> 29
    h = (h * P3) & _M
    h ^= h >> 32
    return h


def zstd_with_checksum(frame: bytes, content: bytes) -> bytes:
    """A one-frame Zstd page with the content checksum flag set and its checksum appended.

    ``frame`` must be one frame without a checksum (cramjam's output).
    """
    edited = bytearray(frame)
    if edited[4] & 0x04:
        raise ValueError("the frame already has a checksum")
    edited[4] |= 0x04
    return bytes(edited) + struct.pack("<I", xxh64(content) & 0xFFFFFFFF)


_BLOCK = 128 << 10  # Zstd's largest block


def content_checksum_matches(content, expected: int) -> bool:
    """Whether ``content`` has the Zstd content checksum ``expected`` (XXH64's low 32 bits).

    Parameters
    ----------
    content : bytes-like
        A frame's decompressed content.
    expected : int
        The 4-byte checksum stored at the frame's end.
    """
    content = memoryview(content).cast("B")
    n = len(content)
    # Single segment (no window descriptor), 8-byte content size, checksum flag.
    parts = [struct.pack("<IBQ", 0xFD2FB528, 0xE4, n)]
    if n == 0:
        parts.append(struct.pack("<I", 1)[:3])  # one empty last raw block
    for pos in range(0, n, _BLOCK):
        size = min(_BLOCK, n - pos)
        last = 1 if pos + size >= n else 0
        parts.append(struct.pack("<I", (size << 3) | last)[:3])
        parts.append(content[pos : pos + size])
    parts.append(struct.pack("<I", expected & 0xFFFFFFFF))
    frame = b"".join(parts)
    out = np.empty(max(n, 1), dtype=np.uint8)
    try:
        cramjam.zstd.decompress_into(frame, out.data)
    except Exception as exc:  # cramjam.DecompressionError: the checksum differs
        if "checksum" in str(exc):
            return False
        raise
    return True
