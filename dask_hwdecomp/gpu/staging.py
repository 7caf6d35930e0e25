"""Laying a GPU call out in a device arena, and the copies in and out.

A call is one or more *parts* (a caller's jobs with its own ``src`` and
``dst`` host buffers). Compressed inputs are copied to the device in *runs*:
jobs whose host ranges are close (gap up to :data:`MAX_GAP`) share one copy,
so a column chunk's pages, with their headers between them, go in one copy
straight from the pinned buffer the reader fetched into. Inputs of
bitstreams that need an aligned start (raw deflate: 4 bytes in nvCOMP) get a
copy each, to an aligned device address, instead of a host-side repack.
A job that carries a Parquet page CRC (``verify_checksums``) brings its
whole page's stored bytes to the device (levels, gzip framing), where the
call's CRC-32 runs over them.

Outputs land on the device with the same relative offsets as in the host
``dst``, and come back in runs too: a run also carries the bytes between two
outputs (page headers, still unwritten: the reader writes them after the
backends return), except where the caller *protects* a range (the output of
another backend of the same read) or the gap exceeds :data:`MAX_GAP`.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ..jobs import Job
from ..rounding import round_up

__all__ = ["Part", "Copy", "Placement", "place", "MAX_GAP", "DEVICE_ALIGN"]

MAX_GAP = 64 << 10
DEVICE_ALIGN = 256


@dataclass
class Part:
    """One caller's share of a call.

    ``protect`` holds sorted, disjoint ``(start, end)`` ranges of ``dst`` that
    copies back must not touch. ``keep``, a
    :class:`~dask_hwdecomp.gpu.stream_runner.Keeper`, also keeps the part's
    outputs on the device when all its jobs succeed.
    """

    jobs: Sequence[Job]
    src: memoryview
    dst: memoryview
    protect: Sequence[tuple[int, int]] = ()
    owner: Any = None  # whatever the batcher uses to hand results back
    keep: Any = None

    @property
    def out_bytes(self) -> int:
        return sum(j.dst_size for j in self.jobs)


class Copy(NamedTuple):
    """One copy between a part's host buffer and the arena.

    Host to device it reads the part's ``src``, device to host it writes the
    part's ``dst``.
    """

    part: int  # index of the part whose buffer it copies
    host_offset: int
    arena_offset: int
    nbytes: int


class _Run(NamedTuple):
    """Host ranges that go in one copy: ``[start, end)`` and the indices of the jobs in it."""

    start: int
    end: int
    members: list[int]


@dataclass
class Placement:
    """Where every job of a call lives in the arena (offsets from its base).

    Attributes
    ----------
    jobs : list of Job
        All jobs of the call, grouped by bitstream (stable within a group).
    part_of : numpy.ndarray
        Index of the part each job came from.
    src_dev, dst_dev : numpy.ndarray of uint64
        Arena offsets of each job's input and output.
    page_dev : numpy.ndarray of uint64
        Arena offset of each job's page bytes (where ``job.page_crc`` is set).
    h2d : list of Copy
        Copies of inputs (and CRC-checked pages) from the parts' ``src``.
    d2h : list of Copy
        Copies of outputs back to the parts' ``dst``.
    nbytes : int
        Arena bytes the inputs and outputs take (scratch goes after).
    """

    jobs: list
    part_of: np.ndarray
    src_dev: np.ndarray
    dst_dev: np.ndarray
    page_dev: np.ndarray
    h2d: list[Copy] = field(default_factory=list)
    d2h: list[Copy] = field(default_factory=list)
    nbytes: int = 0


def _runs(ranges: list[tuple[int, int, int]], barrier: Callable[[int, int], bool]) -> Iterator[_Run]:
    """Group sorted ``(start, end, idx)`` into runs."""
    run_start = run_end = 0
    members: list[int] = []  # empty until the first range
    for start, end, idx in ranges:
        if members and start - run_end <= MAX_GAP and not barrier(run_end, start):
            run_end = max(run_end, end)
            members.append(idx)
            continue
        if members:
            yield _Run(run_start, run_end, members)
        run_start, run_end, members = start, end, [idx]
    if members:
        yield _Run(run_start, run_end, members)


def _barrier(protect: Sequence[tuple[int, int]]):
    starts = [p[0] for p in protect]

    def crosses(a: int, b: int) -> bool:
        # Any protected range overlapping [a, b)?
        i = bisect.bisect_right(starts, b - 1) - 1
        while i >= 0 and protect[i][1] > a:
            if protect[i][0] < b:
                return True
            i -= 1
        return False

    return crosses if protect else (lambda a, b: False)


def _input_range(job: Job) -> tuple[int, int]:
    """Host ``[lo, hi)`` a job needs on the device: its input, and its page if CRC-checked."""
    lo, hi = job.src_offset, job.src_offset + job.src_size
    if job.page_crc is not None:
        lo = min(lo, job.page_crc.offset)
        hi = max(hi, job.page_crc.offset + job.page_crc.size)
    return lo, hi


def place(parts: Sequence[Part], input_align: Callable[[object], int], order: Callable[[Job], object]) -> Placement:
    """Plan the arena layout and the copies of a call.

    Parameters
    ----------
    parts : sequence of Part
    input_align : callable
        ``input_align(algo)``: the alignment a bitstream's input needs.
    order : callable
        Sort key grouping jobs for the launch (usually the bitstream).

    Returns
    -------
    Placement
    """
    flat = [(order(j), p, i) for p, part in enumerate(parts) for i, j in enumerate(part.jobs)]
    flat.sort(key=lambda t: (t[0], t[1], t[2]))  # Python sort is stable; keys total anyway
    index = {(p, i): k for k, (_, p, i) in enumerate(flat)}
    n = len(flat)
    src_dev = np.zeros(n, dtype=np.uint64)
    dst_dev = np.zeros(n, dtype=np.uint64)
    page_dev = np.zeros(n, dtype=np.uint64)
    part_of = np.fromiter((p for _, p, _ in flat), dtype=np.int64, count=n)
    jobs = [parts[p].jobs[i] for _, p, i in flat]
    h2d: list[Copy] = []
    d2h: list[Copy] = []
    pos = 0
    for p, part in enumerate(parts):
        runs_in = []
        for i, job in enumerate(part.jobs):
            lo, hi = _input_range(job)
            align = input_align(job.algo)
            if align > 1:
                # A copy of its own at an aligned address (no host repack).
                at = pos + (lo - job.src_offset) % align
                h2d.append(Copy(p, lo, at, hi - lo))
                src_dev[index[(p, i)]] = at + job.src_offset - lo
                if job.page_crc is not None:
                    page_dev[index[(p, i)]] = at + job.page_crc.offset - lo
                pos = round_up(at + hi - lo, DEVICE_ALIGN)
            else:
                runs_in.append((lo, hi, i))
        runs_in.sort()
        for run in _runs(runs_in, lambda a, b: False):
            h2d.append(Copy(p, run.start, pos, run.end - run.start))
            for i in run.members:
                job = part.jobs[i]
                src_dev[index[(p, i)]] = pos + job.src_offset - run.start
                if job.page_crc is not None:
                    page_dev[index[(p, i)]] = pos + job.page_crc.offset - run.start
            pos = round_up(pos + run.end - run.start, DEVICE_ALIGN)
        outs = sorted((j.dst_offset, j.dst_offset + j.dst_size, i) for i, j in enumerate(part.jobs))
        for run in _runs(outs, _barrier(part.protect)):
            d2h.append(Copy(p, run.start, pos, run.end - run.start))
            for i in run.members:
                dst_dev[index[(p, i)]] = pos + part.jobs[i].dst_offset - run.start
            pos = round_up(pos + run.end - run.start, DEVICE_ALIGN)
    return Placement(jobs, part_of, src_dev, dst_dev, page_dev, h2d, d2h, pos)
