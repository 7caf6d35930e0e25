"""Fetching byte ranges of files into one host buffer.

Ranges of one file are coalesced when they touch or nearly touch; a local
file is read with ``readinto`` straight into the buffer (pinned, for a GPU
backend); other fsspec filesystems through ``cat_ranges``.
"""

from __future__ import annotations

from dataclasses import dataclass

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ..errors import CorruptMetadataError, PageLocation

__all__ = ["Range", "coalesce", "fetch_into", "is_local"]

GAP = 64 * 1024


@dataclass
class Range:
    """``length`` bytes of ``path`` at ``start``, to land at ``dst`` in the buffer."""

    path: str
    start: int
    length: int
    dst: int = 0


def coalesce(ranges: list[tuple[int, int]], gap: int = GAP) -> list[tuple[int, int]]:
    """Merge (start, length) ranges that overlap or lie within ``gap``."""
    merged: list[list[int]] = []
    for start, length in sorted(ranges):
        if merged and start <= merged[-1][0] + merged[-1][1] + gap:
            end = max(merged[-1][0] + merged[-1][1], start + length)
            merged[-1][1] = end - merged[-1][0]
        else:
            merged.append([start, length])
    return [(s, n) for s, n in merged]


def is_local(fs) -> bool:
    return isinstance(fs, LocalFileSystem)


def fetch_into(fs: fsspec.AbstractFileSystem, ranges: list[Range], view: memoryview) -> None:
    """Read every range into ``view[r.dst : r.dst + r.length]``.

    Raises
    ------
    CorruptMetadataError
        A short read (the file is smaller than its footer says).
    """
    if is_local(fs):
        by_path: dict[str, list[Range]] = {}
        for r in ranges:
            by_path.setdefault(r.path, []).append(r)
        for path, rs in by_path.items():
            with open(fs._strip_protocol(path), "rb", buffering=0) as f:
                for r in rs:
                    f.seek(r.start)
                    got = 0
                    while got < r.length:
                        n = f.readinto(view[r.dst + got : r.dst + r.length])
                        if not n:
                            break
                        got += n
                    _check(r, got)
        return
    blobs = fs.cat_ranges(
        [r.path for r in ranges],
        [r.start for r in ranges],
        [r.start + r.length for r in ranges],
    )
    for r, blob in zip(ranges, blobs):
        if isinstance(blob, Exception):
            raise blob
        _check(r, len(blob))
        view[r.dst : r.dst + r.length] = blob


def _check(r: Range, got: int) -> None:
    if got != r.length:
        raise CorruptMetadataError(
            f"short read: {got} of {r.length} bytes at offset {r.start}", PageLocation(file=r.path)
        )
