"""The compiled cores of :mod:`~.uploads`: kept outputs found in their spans, ranges cut against them.

The GPU service's decoder runner plans the upload of every request of a
run, under the service's one GIL. Written in NumPy the plan of one request
took about 250 array calls (about 1 ms, a read of 32 files about 35 ms of
the runner); compiled, it is a few loops over the rows. They keep the GIL:
they take microseconds, and a runner that lets the GIL go waits to take it
back while the service's other threads run Python (py-spy with native frames
at scale, H100: 40 % of the runner's busy time went to taking it back).
:mod:`~.uploads` keeps the interface and the error messages; these
functions return a status where it raises.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["OK", "OUT_OF_RANGE", "OUTSIDE_SPANS", "OVERLAP", "outputs_table", "cut_ranges"]

# outputs_table's status
OK = 0
OUT_OF_RANGE = 1  # a negative offset, or offsets too large to key by block
OUTSIDE_SPANS = 2  # an output outside its block's spans (the lowest such block returned)
OVERLAP = 3  # two outputs overlap


@njit(cache=True)
def _first_above(values, q):
    """Index of the first of the sorted ``values`` that is > ``q``."""
    lo = 0
    hi = values.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] <= q:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _last_at_or_before(keys, q):
    """Index of the last of the sorted ``keys`` that is <= ``q`` (-1 if none)."""
    return _first_above(keys, q) - 1


@njit(cache=True)
def _first_at_or_above(values, q):
    """Index of the first of the sorted integer ``values`` that is >= ``q``."""
    return _first_above(values, q - 1)


@njit(cache=True)
def outputs_table(spans, sblock, outs, oblock, nblocks):
    """Every output of every block: rows (start, end, block, span id, offset in the block), by start.

    Parameters
    ----------
    spans : int64 (S, 3)
        Every block's spans laid end to end (buffer offset, bytes, offset
        in the block); a span's id is its row here.
    sblock : int64 (S,)
        Each span's block.
    outs : int64 (M, 2)
        Every block's outputs (buffer offset, bytes); those of no bytes are left out.
    oblock : int64 (M,)
        Each output's block.
    nblocks : int
        How many blocks.

    Returns
    -------
    (table, status, block)
        ``status`` is :data:`OK` or why the table is empty; ``block``, for
        :data:`OUTSIDE_SPANS`, the lowest block with an output outside its spans.
    """
    empty = np.zeros((0, 5), np.int64)
    m = 0
    for i in range(outs.shape[0]):
        if outs[i, 1] > 0:
            m += 1
    o = np.empty((m, 2), np.int64)
    ob = np.empty(m, np.int64)
    j = 0
    for i in range(outs.shape[0]):
        if outs[i, 1] > 0:
            o[j, 0] = outs[i, 0]
            o[j, 1] = outs[i, 1]
            ob[j] = oblock[i]
            j += 1
    top = 0
    for i in range(spans.shape[0]):
        if spans[i, 0] < 0:
            return empty, OUT_OF_RANGE, -1
        top = max(top, spans[i, 0] + spans[i, 1])
    for i in range(m):
        if o[i, 0] < 0:
            return empty, OUT_OF_RANGE, -1
        top = max(top, o[i, 0] + o[i, 1])
    top += 1
    if nblocks > 0 and top > ((1 << 62) - 1) // nblocks:
        return empty, OUT_OF_RANGE, -1
    # spans by (block, start), stable: each block's own sort
    key = np.empty(spans.shape[0], np.int64)
    for i in range(spans.shape[0]):
        key[i] = sblock[i] * top + spans[i, 0]
    order = np.argsort(key, kind="mergesort")
    sorted_key = key[order]
    table = np.empty((m, 5), np.int64)
    bad = -1
    for i in range(m):
        at = _last_at_or_before(sorted_key, ob[i] * top + o[i, 0])
        span = order[max(at, 0)]
        inside = at >= 0 and sblock[span] == ob[i] and o[i, 0] + o[i, 1] <= spans[span, 0] + spans[span, 1]
        if not inside:
            if bad < 0 or ob[i] < bad:
                bad = ob[i]
            continue
        table[i, 0] = o[i, 0]
        table[i, 1] = o[i, 0] + o[i, 1]
        table[i, 2] = ob[i]
        table[i, 3] = span
        table[i, 4] = spans[span, 2] + (o[i, 0] - spans[span, 0])
    if bad >= 0:
        return empty, OUTSIDE_SPANS, bad
    by_start = np.argsort(table[:, 0], kind="mergesort")
    table = table[by_start]
    for i in range(1, m):
        if table[i, 0] < table[i - 1, 1]:
            return empty, OVERLAP, -1
    return table, OK, -1


@njit(cache=True)
def cut_ranges(ranges, table, nblocks):
    """Cut each range (source offset, bytes, offset in ``data``; none empty) against the kept outputs.

    Returns
    -------
    host : int64 (H, 3)
        What no kept output covers, per range in order: source offset,
        bytes, offset in ``data``.
    pieces : int64 (P, 4)
        Each hit clipped to its range: block, offset in the block, offset
        in ``data``, bytes.
    device : int64 (D, 3)
        Consecutive hits of one span within one range as one copy (offset
        in the block, offset in ``data``, bytes), by block (stable).
    device_counts : int64 (nblocks,)
        How many of ``device``'s rows each block has.
    """
    n = ranges.shape[0]
    starts = table[:, 0]
    ends = table[:, 1]
    lo = np.empty(n, np.int64)
    hi = np.empty(n, np.int64)
    hits = 0
    for r in range(n):
        so = ranges[r, 0]
        end = so + ranges[r, 1]
        lo[r] = _first_above(ends, so)
        hi[r] = _first_at_or_above(starts, end)
        if hi[r] > lo[r]:
            hits += hi[r] - lo[r]
    host = np.empty((hits + n, 3), np.int64)
    pieces = np.empty((hits, 4), np.int64)
    dev = np.empty((hits, 3), np.int64)
    dev_block = np.empty(hits, np.int64)
    nh = 0
    npc = 0
    nd = 0
    for r in range(n):
        so = ranges[r, 0]
        end = so + ranges[r, 1]
        shift = ranges[r, 2] - so
        cut = so
        prev_span = -1
        for h in range(lo[r], hi[r]):
            s = max(table[h, 0], so)
            e = min(table[h, 1], end)
            if s > cut:
                host[nh, 0] = cut
                host[nh, 1] = s - cut
                host[nh, 2] = cut + shift
                nh += 1
            cut = e
            boff = table[h, 4] + (s - table[h, 0])
            pieces[npc, 0] = table[h, 2]
            pieces[npc, 1] = boff
            pieces[npc, 2] = s + shift
            pieces[npc, 3] = e - s
            npc += 1
            if table[h, 3] != prev_span:  # a new copy: the range's first hit, or another span
                dev[nd, 0] = boff
                dev[nd, 1] = s + shift
                dev[nd, 2] = e - s
                dev_block[nd] = table[h, 2]
                nd += 1
                prev_span = table[h, 3]
            else:  # the same span: the copy grows to this hit's end (with the bytes between)
                dev[nd - 1, 2] = e - (dev[nd - 1, 1] - shift)
        if end > cut:
            host[nh, 0] = cut
            host[nh, 1] = end - cut
            host[nh, 2] = cut + shift
            nh += 1
    counts = np.zeros(nblocks, np.int64)
    for k in range(nd):
        counts[dev_block[k]] += 1
    first = np.zeros(nblocks, np.int64)
    for b in range(1, nblocks):
        first[b] = first[b - 1] + counts[b - 1]
    device = np.empty((nd, 3), np.int64)
    for k in range(nd):
        b = dev_block[k]
        device[first[b]] = dev[k]
        first[b] += 1
    return host[:nh], pieces, device, counts
