"""Cluster shapes: WORKERSxTHREADS, parsed and named, and the default set.

A run measures every shape asked for, one LocalCluster each. The default
set, on a machine with C cores: ``4x(C/4)`` (the shape of the earlier
runs), ``Cx1`` (a process per core: the GPU service merges many clients'
pages) and ``1xC`` (one process: no inter-process cost); 4x4, 16x1, 1x16
on 16 cores. The threaded scheduler runs in this process, so it has one
shape per total of threads (``1x16`` for all three).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

__all__ = ["ClusterShape", "parse_shape", "parse_shapes", "default_shapes", "threaded_shapes"]


@dataclass(frozen=True)
class ClusterShape:
    """Workers × threads per worker; ``str`` is ``"4x4"``."""

    workers: int
    threads: int

    def __post_init__(self):
        if self.workers < 1 or self.threads < 1:
            raise ValueError(f"a cluster shape needs at least 1 worker and 1 thread, got {self.workers}x{self.threads}")

    def __str__(self) -> str:
        return f"{self.workers}x{self.threads}"

    @property
    def total_threads(self) -> int:
        return self.workers * self.threads


def parse_shape(text) -> ClusterShape:
    """``"4x4"`` (or a ClusterShape, or a ``(workers, threads)`` pair) as a :class:`ClusterShape`.

    Raises
    ------
    ValueError
        Not WORKERSxTHREADS, or a zero.
    """
    if isinstance(text, ClusterShape):
        return text
    if isinstance(text, (tuple, list)) and len(text) == 2:
        return ClusterShape(int(text[0]), int(text[1]))
    m = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*", str(text))
    if not m:
        raise ValueError(f"{text!r} is not WORKERSxTHREADS, e.g. 4x4")
    return ClusterShape(int(m.group(1)), int(m.group(2)))


def parse_shapes(text) -> tuple[ClusterShape, ...]:
    """``"4x4,16x1"`` (or a sequence of shapes) as shapes, in order, each once.

    Raises
    ------
    ValueError
        An entry that is not WORKERSxTHREADS, or no entry.
    """
    items = [x for x in text.split(",") if x.strip()] if isinstance(text, str) else list(text)
    shapes = tuple(dict.fromkeys(parse_shape(x) for x in items))
    if not shapes:
        raise ValueError(f"{text!r} names no cluster shape; give WORKERSxTHREADS[,WORKERSxTHREADS...], e.g. 4x4,16x1")
    return shapes


def default_shapes(cores: int | None = None) -> tuple[ClusterShape, ...]:
    """``4x(C/4), Cx1, 1xC`` for ``cores`` C (default: this machine's), each once.

    Fewer than 4 cores give ``Cx1`` for the first (never more threads
    than cores).
    """
    cores = max(1, cores or os.cpu_count() or 1)
    workers = min(4, cores)
    return parse_shapes([(workers, max(1, cores // workers)), (cores, 1), (1, cores)])


def threaded_shapes(shapes) -> tuple[ClusterShape, ...]:
    """The threaded scheduler's shapes for cluster ``shapes``: ``1xN`` per total N of threads, each once."""
    return tuple(dict.fromkeys(ClusterShape(1, s.total_threads) for s in parse_shapes(shapes)))
