"""The Huffman stream walk as a CUDA kernel: the lanes of a block walk the pieces of one stream.

A stream of tens of thousands of literals walked by one thread takes
milliseconds (each literal waits on two loads), longer than nvCOMP's
decoding of the page. Here a block of :data:`LANES` threads walks one
stream: lane ``j`` takes the ``j``-th of as many equal pieces of its bits
(at least :data:`MIN_PIECE_BITS` each) and first walks it from the
piece's top as if a literal began there. That guess is mostly wrong, but
a Huffman code falls back into step within a few literals, so each lane
then walks again from where the lane before it really ended, only until it
meets its first walk's path (positions it kept, :data:`KEPT`), and takes
that walk's count from there. The lanes repeat this until none moves;
lane ``j`` is right once lane ``j - 1`` is, so at most :data:`LANES`
rounds. The literals of the stream are the lanes' counts added, and the
bits left come out of the last lane's end; where the literals end before
the bits do (bits left over), lane 0 walks the one piece where they end
again.

Each step is :func:`~dask_hwdecomp.format.zstd_streams.step_py`, the host
walk's own text compiled as a device function, so the result is the host
walk's (:func:`~dask_hwdecomp.format.zstd_streams.bits_left`) exactly.
Imported only where a kernel runs (numba-cuda is a heavy import).
"""

from __future__ import annotations

from numba import int64

from ..format.zstd_streams import NO_END_MARK, payload_bits_py, step_py
from ..gpu.cuda_jit import cuda

__all__ = ["walk_kernel", "LANES", "MIN_PIECE_BITS", "KEPT"]

LANES = 32  # threads per block, one block per stream
MIN_PIECE_BITS = 64  # a lane's piece is at least this long (a literal is at most 11 bits)
KEPT = 16  # positions of its first walk a lane keeps, to see a later walk meet it

_payload_bits = cuda.jit(device=True, cache=True)(payload_bits_py)
_step = cuda.jit(device=True, cache=True)(step_py)


@cuda.jit(cache=True)
def walk_kernel(src, start, end, count, lengths_at, table_log, lengths, out):  # pragma: no cover - compiled
    """``out[k]``: the bits left after walking the ``count[k]`` literals of stream ``k`` of ``src``.

    Launched with one block of :data:`LANES` threads per stream. ``start``,
    ``end``, ``count``, ``lengths_at`` and ``table_log`` are per stream
    (its tree's table resolved already), ``lengths`` every tree's table of
    code lengths. The result is :func:`~dask_hwdecomp.format.zstd_streams.bits_left`'s.
    """
    k = cuda.blockIdx.x
    lane = cuda.threadIdx.x
    ends = cuda.shared.array(LANES, int64)  # each lane's end (the first position at or below its piece)
    counts = cuda.shared.array(LANES, int64)  # and the literals it walked to get there
    stuck = cuda.shared.array(1, int64)  # a lane's walk did not get through its piece
    kept = cuda.local.array(KEPT, int64)
    st, en, n_all = start[k], end[k], count[k]
    at, tl = lengths_at[k], table_log[k]
    top = _payload_bits(src, st, en)
    pieces = min(LANES, max(1, top // MIN_PIECE_BITS))
    size = (top + pieces - 1) // pieces if top > 0 else 0
    hi = top - lane * size
    lo = max(hi - size, 0)
    if lane == pieces - 1:
        lo = 0
    # Every literal takes a bit at least: more steps than this never leave a piece (a table that
    # says otherwise is no Huffman table; the stream is then walked by one thread, as the host does).
    most = size + tl + 1
    mine = lane < pieces and top >= 0
    if lane == 0:
        stuck[0] = 0
    # The first walk, from the top of the piece.
    n_first = 0
    held = 0
    p = hi
    if mine:
        while p > lo and n_first < most:
            if held < KEPT:
                kept[held] = p
                held += 1
            p = _step(src, st, en, p, tl, lengths, at)
            n_first += 1
    e_first = p
    ends[lane] = p
    counts[lane] = n_first
    from_ = hi
    cuda.syncthreads()
    # Walk again from where the lane before ended, until the first walk is met; until no lane moves.
    for _ in range(LANES):
        entry = from_
        if mine and lane > 0:
            entry = ends[lane - 1]
        cuda.syncthreads()
        moved = 0
        if entry != from_:
            moved = 1
            from_ = entry
            q = entry
            steps = 0
            i = 0
            met = False
            while q > lo and steps < most:
                while i < held and kept[i] > q:
                    i += 1
                if i < held and kept[i] == q:
                    met = True
                    break
                q = _step(src, st, en, q, tl, lengths, at)
                steps += 1
            if met:
                ends[lane] = e_first
                counts[lane] = steps + n_first - i
            else:
                ends[lane] = q
                counts[lane] = steps
        if not cuda.syncthreads_or(moved):
            break
    if mine and ends[lane] > lo:
        stuck[0] = 1
    cuda.syncthreads()
    if lane != 0:
        return
    if top < 0:
        out[k] = NO_END_MARK
        return
    total = int64(0)
    for j in range(pieces):
        total += counts[j]
    if stuck[0] != 0:  # one thread walks it all
        q = top
        for _ in range(n_all):
            q = _step(src, st, en, q, tl, lengths, at)
        out[k] = q
    elif total == n_all:
        out[k] = ends[pieces - 1]
    elif total < n_all:  # below the stream's start every literal reads zeros
        out[k] = ends[pieces - 1] - (n_all - total) * int64(lengths[at])
    else:  # the literals end inside piece j (bits are left over): walk it again to where they do
        before = int64(0)
        j = 0
        while before + counts[j] < n_all:
            before += counts[j]
            j += 1
        q = top if j == 0 else ends[j - 1]
        for _ in range(n_all - before):
            q = _step(src, st, en, q, tl, lengths, at)
        out[k] = q
