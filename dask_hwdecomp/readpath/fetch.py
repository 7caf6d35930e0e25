"""Fetching the column chunks of a batch's pieces into one host buffer.

:func:`plan_fetch` says which byte ranges to read and where each column
chunk lands in the buffer; ranges of one file are coalesced when they touch
or nearly touch. :func:`fetch_into` reads them: a local file with
``readinto`` straight into the buffer (pinned, for a GPU backend), other
fsspec filesystems through ``cat_ranges``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ..errors import CorruptMetadataError, PageLocation
from ..format.fastlayout import ChunkSpec, FileSpec
from .plan import PiecePlan

__all__ = ["Range", "FetchPlan", "plan_fetch", "coalesce", "fetch_into", "is_local"]

GAP = 64 * 1024


@dataclass(frozen=True)
class Range:
    """``length`` bytes of ``path`` at ``start``, to land at ``dst`` in the buffer."""

    path: str
    start: int
    length: int
    dst: int = 0


@dataclass(frozen=True)
class FetchPlan:
    """What to read for a batch, and where every column chunk lands.

    Attributes
    ----------
    ranges : list of Range
        The reads, coalesced per file, laid end to end in the buffer.
    nbytes : int
        The size of the buffer they fill.
    files : list of FileSpec
        Per piece, in the order given, the image to build from its chunks
        (each chunk's ``src_base`` is its place in the buffer).
    """

    ranges: list[Range]
    nbytes: int
    files: list[FileSpec]


def plan_fetch(plans: list[PiecePlan]) -> FetchPlan:
    """The reads for ``plans``' column chunks, and where each chunk lands.

    Raises
    ------
    ValueError
        A plan has no footer (the planner gives such pieces to pyarrow).
    """
    ranges: list[Range] = []
    files: list[FileSpec] = []
    pos = 0
    for plan in plans:
        if plan.footer is None:
            raise ValueError(f"{plan.piece.path}: a piece without a footer has no pages to decompress")
        mine = []
        for start, length in coalesce([(c.rng.start, c.rng.length) for c in plan.chunks if c.rng.length]):
            mine.append(Range(plan.piece.path, start, length, pos))
            pos += length
        starts = [r.start for r in mine]
        chunks = []
        for c in plan.chunks:
            src_base = 0  # an empty chunk reads nothing
            if c.rng.length:
                r = mine[bisect.bisect_right(starts, c.rng.start) - 1]  # the range holding the chunk
                src_base = r.dst + c.rng.start - r.start
            chunks.append(ChunkSpec(c.row_group, c.column, c.rng, c.where, src_base))
        ranges.extend(mine)
        files.append(FileSpec(plan.footer, list(plan.row_groups), chunks))
    return FetchPlan(ranges, pos, files)


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
