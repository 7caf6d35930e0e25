"""The gather's copy table, compiled: every piece cut into tiles and written where the kernel reads them.

:func:`~.gather.copy_pieces` runs in the decoder runner, under the GPU
service's one GIL, once a run of several thousand pieces. In NumPy the
tiling was a dozen array calls over every tile (about 2 ms a run on the
H200's host); here it is one loop that writes the tiles straight into the
staging buffer's table, keeping the GIL (the runner would otherwise wait
to take it back, see :mod:`~.uploads_kernels`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["count_tiles", "write_tiles"]


@njit(cache=True)
def count_tiles(sizes, tile_bytes):
    """Tiles of at most ``tile_bytes`` that pieces of ``sizes`` bytes make (pieces of no bytes make none)."""
    n = 0
    for k in range(sizes.shape[0]):
        if sizes[k] > 0:
            n += (sizes[k] + tile_bytes - 1) // tile_bytes
    return n


@njit(cache=True)
def write_tiles(rows, tile_bytes, align, out):
    """Cut ``rows`` (source address, destination offset, bytes) into tiles, written into ``out``.

    Sources are written relative to the window's first byte: the lowest
    source of a piece with bytes, rounded down to ``align`` (a power of
    two). ``out`` (int64) takes three values a tile, the tiles of a row
    after each other, rows of no bytes skipped.

    Returns
    -------
    (base, span, tiles)
        The window's first address and its bytes (to the end of the
        highest source), and the tiles written. ``(0, 0, 0)`` when no row
        has bytes.
    """
    lo = np.int64(-1)
    hi = np.int64(0)
    for k in range(rows.shape[0]):
        if rows[k, 2] > 0:
            if lo < 0 or rows[k, 0] < lo:
                lo = rows[k, 0]
            if rows[k, 0] + rows[k, 2] > hi:
                hi = rows[k, 0] + rows[k, 2]
    if lo < 0:
        return np.int64(0), np.int64(0), np.int64(0)
    base = lo & ~np.int64(align - 1)
    t = 0
    for k in range(rows.shape[0]):
        n = rows[k, 2]
        skip = np.int64(0)
        while skip < n:
            size = n - skip
            if size > tile_bytes:
                size = tile_bytes
            out[3 * t] = rows[k, 0] + skip - base
            out[3 * t + 1] = rows[k, 1] + skip
            out[3 * t + 2] = size
            t += 1
            skip += tile_bytes
    return base, hi - base, np.int64(t)
