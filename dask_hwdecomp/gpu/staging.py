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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from numba import njit

from ..jobs import ALGOS, JOB_DTYPE, Job, JobTable, as_table

__all__ = ["Part", "Copy", "Placement", "place", "MAX_GAP", "DEVICE_ALIGN"]

MAX_GAP = 64 << 10
DEVICE_ALIGN = 256


@dataclass
class Part:
    """One caller's share of a call.

    ``jobs`` is a :class:`~dask_hwdecomp.jobs.JobTable` (a sequence of
    :class:`~dask_hwdecomp.jobs.Job` is made one). ``protect`` holds sorted,
    disjoint ``(start, end)`` ranges of ``dst`` that copies back must not
    touch. ``keep``, a :class:`~dask_hwdecomp.gpu.stream_runner.Keeper`,
    also keeps the part's outputs on the device when all its jobs succeed.
    ``beside`` is what the runner's :class:`~dask_hwdecomp.gpu.stream_runner.Beside`
    work prepared for the part before the call (None: nothing, or not yet).
    """

    jobs: JobTable
    src: memoryview
    dst: memoryview
    protect: Any = ()
    owner: Any = None  # whatever the batcher uses to hand results back
    keep: Any = None
    beside: Any = None
    out_bytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.jobs = as_table(self.jobs)
        self.protect = np.asarray(self.protect, dtype=np.int64).reshape(-1, 2)
        self.out_bytes = int(self.jobs.rows["dst_size"].sum())


class Copy(NamedTuple):
    """One copy between a part's host buffer and the arena.

    Host to device it reads the part's ``src``, device to host it writes the
    part's ``dst``.
    """

    part: int  # index of the part whose buffer it copies
    host_offset: int
    arena_offset: int
    nbytes: int


@dataclass
class Placement:
    """Where every job of a call lives in the arena (offsets from its base).

    Attributes
    ----------
    rows : numpy.ndarray of JOB_DTYPE
        All jobs of the call, grouped by the launcher's order (stable
        within a group: by part, then the part's order).
    part_of, member : numpy.ndarray of int64
        The part each job came from, and its row in that part's table.
    src_dev, dst_dev : numpy.ndarray of uint64
        Arena offsets of each job's input and output.
    page_dev : numpy.ndarray of uint64
        Arena offset of each job's page bytes (where it has a page CRC).
    h2d : list of Copy
        Copies of inputs (and CRC-checked pages) from the parts' ``src``.
    d2h : list of Copy
        Copies of outputs back to the parts' ``dst``.
    nbytes : int
        Arena bytes the inputs and outputs take (scratch goes after).
    tables : list of JobTable
        The parts' tables (``job(k)`` reads them).
    """

    rows: np.ndarray
    part_of: np.ndarray
    member: np.ndarray
    src_dev: np.ndarray
    dst_dev: np.ndarray
    page_dev: np.ndarray
    h2d: list[Copy] = field(default_factory=list)
    d2h: list[Copy] = field(default_factory=list)
    nbytes: int = 0
    tables: list = field(default_factory=list)

    def job(self, k: int) -> Job:
        """Job ``k`` of the call as a record (for errors and reports)."""
        return self.tables[int(self.part_of[k])].job(int(self.member[k]))

    @property
    def jobs(self) -> list[Job]:
        """Every job of the call as a record, in call order (tests, reports)."""
        return [self.job(k) for k in range(len(self.rows))]


@njit(nogil=True, cache=True)
def _run_ids(starts, ends, gap, p_starts, p_ends):  # pragma: no cover - compiled
    """The run of each of the sorted ranges: a range joins the run before it while it starts
    within ``gap`` of the run's end and no protected range lies between them."""
    n = starts.shape[0]
    ids = np.empty(n, np.int64)
    run = -1
    run_end = 0
    for k in range(n):
        start, end = starts[k], ends[k]
        joins = run >= 0 and start - run_end <= gap
        if joins and p_starts.shape[0]:
            # any protected range overlapping [run_end, start)?
            i = np.searchsorted(p_starts, start - 1, side="right") - 1
            while i >= 0 and p_ends[i] > run_end:
                if p_starts[i] < start:
                    joins = False
                    break
                i -= 1
        if joins:
            if end > run_end:
                run_end = end
        else:
            run += 1
            run_end = end
        ids[k] = run
    return ids


def _runs(starts: np.ndarray, ends: np.ndarray, protect: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group ranges already sorted by start: (run of each, each run's start, each run's end)."""
    if not len(starts):
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    ids = _run_ids(starts, ends, MAX_GAP, np.ascontiguousarray(protect[:, 0]), np.ascontiguousarray(protect[:, 1]))
    heads = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    return ids, starts[heads], np.maximum.reduceat(ends, heads)


def _lay_out(sizes: np.ndarray, pos: int) -> tuple[np.ndarray, int]:
    """Arena offsets of blocks of ``sizes`` bytes laid end to end from ``pos``, each aligned; the end."""
    steps = (sizes + (DEVICE_ALIGN - 1)) // DEVICE_ALIGN * DEVICE_ALIGN
    at = pos + np.concatenate([[0], np.cumsum(steps)[:-1]]) if len(sizes) else np.zeros(0, np.int64)
    return at.astype(np.int64), pos + int(steps.sum())


def place(parts: Sequence[Part], input_align: Callable[[object], int], order: Callable[[object], object]) -> Placement:
    """Plan the arena layout and the copies of a call.

    Parameters
    ----------
    parts : sequence of Part
    input_align : callable
        ``input_align(algo)``: the alignment a bitstream's input needs.
    order : callable
        ``order(algo)``: the sort key grouping jobs for the launch (usually
        the bitstream).

    Returns
    -------
    Placement
    """
    tables = [p.jobs for p in parts]
    # Asked only of the bitstreams the call holds (a launcher knows only its own).
    present = sorted(set().union(*(np.unique(t.rows["algo"]).tolist() for t in tables))) if tables else []
    align_of = np.ones(len(ALGOS), dtype=np.int64)
    rank_of = np.zeros(len(ALGOS), dtype=np.int64)
    keys: dict[int, Any] = {code: order(ALGOS[code]) for code in present}
    rank = {k: r for r, k in enumerate(sorted(set(keys.values())))}
    for code in present:
        align_of[code] = input_align(ALGOS[code])
        rank_of[code] = rank[keys[code]]
    counts = [len(t) for t in tables]
    n = sum(counts)
    part_of = np.repeat(np.arange(len(parts), dtype=np.int64), counts)
    member = np.concatenate([np.arange(c, dtype=np.int64) for c in counts]) if n else np.zeros(0, np.int64)
    rows = np.concatenate([t.rows for t in tables]) if n else np.zeros(0, JOB_DTYPE)
    src_dev = np.zeros(n, dtype=np.int64)
    dst_dev = np.zeros(n, dtype=np.int64)
    page_dev = np.zeros(n, dtype=np.int64)
    h2d: list[Copy] = []
    d2h: list[Copy] = []
    pos = 0
    first = 0
    for p, part in enumerate(parts):
        r = part.jobs.rows
        here = slice(first, first + len(r))
        first += len(r)
        so, ss = r["src_offset"], r["src_size"]
        checked = r["page_crc"] >= 0
        po, ps = r["page_crc_offset"], r["page_crc_size"]
        lo = np.where(checked, np.minimum(so, po), so)
        hi = np.where(checked, np.maximum(so + ss, po + ps), so + ss)
        align = align_of[r["algo"]] if len(r) else np.zeros(0, np.int64)
        s_dev, p_dev = np.zeros(len(r), np.int64), np.zeros(len(r), np.int64)
        # A copy of its own at an aligned address (no host repack).
        own = np.flatnonzero(align > 1)
        if len(own):
            skew = (lo[own] - so[own]) % align[own]
            base, pos = _lay_out(skew + hi[own] - lo[own], pos)
            at = base + skew
            h2d.extend(Copy(p, int(a), int(b), int(c)) for a, b, c in zip(lo[own], at, hi[own] - lo[own]))
            s_dev[own] = at + so[own] - lo[own]
            p_dev[own] = at + po[own] - lo[own]
        rest = np.flatnonzero(align <= 1)
        if len(rest):
            order_in = rest[np.lexsort((rest, hi[rest], lo[rest]))]
            ids, starts, ends = _runs(lo[order_in], hi[order_in], np.zeros((0, 2), np.int64))
            at, pos = _lay_out(ends - starts, pos)
            h2d.extend(Copy(p, int(a), int(b), int(c)) for a, b, c in zip(starts, at, ends - starts))
            run_at = at[ids] - starts[ids]
            s_dev[order_in] = run_at + so[order_in]
            p_dev[order_in] = run_at + po[order_in]
        d_dev = np.zeros(len(r), np.int64)
        if len(r):
            do, de = r["dst_offset"], r["dst_offset"] + r["dst_size"]
            outs = np.lexsort((np.arange(len(r)), de, do))
            ids, starts, ends = _runs(do[outs], de[outs], part.protect)
            at, pos = _lay_out(ends - starts, pos)
            d2h.extend(Copy(p, int(a), int(b), int(c)) for a, b, c in zip(starts, at, ends - starts))
            d_dev[outs] = at[ids] - starts[ids] + do[outs]
        src_dev[here], dst_dev[here], page_dev[here] = s_dev, d_dev, np.where(checked, p_dev, 0)
    # The call's order: by the launcher's key, then part, then the part's own order.
    flat = np.lexsort((member, part_of, rank_of[rows["algo"]])) if n else np.zeros(0, np.int64)
    return Placement(rows[flat], part_of[flat], member[flat], src_dev[flat].astype(np.uint64),
                     dst_dev[flat].astype(np.uint64), page_dev[flat].astype(np.uint64), h2d, d2h, pos, tables)
