"""The gather kernel: every device piece of a decode's bytes copied in one launch.

A *tile* is a row of (offset in ``src``, offset in ``dst``, bytes), at most
a few tens of KiB, so that a large piece spreads over many blocks and many
small ones share none. A block copies a tile a destination word (8 bytes)
a thread, with the bytes before the first aligned word and after the last
one byte by byte. Where the source is not aligned like the destination,
a word is assembled from the two aligned source words it straddles: each
of them holds at least one byte of the piece, so no read leaves the
source's allocation.
"""

from __future__ import annotations

import numpy as np

from ..gpu.cuda_jit import cuda

__all__ = ["gather_kernel"]


@cuda.jit(cache=True)
def gather_kernel(src8, src64, dst8, dst64, tiles):
    """Copy every tile (``tiles``: int64, three a tile, flat) from ``src`` into ``dst``.

    ``src8``/``src64`` and ``dst8``/``dst64`` are one byte range each, as
    uint8 and uint64 arrays from the same (8-byte aligned) first byte.
    Tiles must not overlap in ``dst``: blocks copy them in no order.
    """
    i = cuda.threadIdx.x
    step = cuda.blockDim.x
    for t in range(cuda.blockIdx.x, tiles.shape[0] // 3, cuda.gridDim.x):
        s = tiles[3 * t]
        d = tiles[3 * t + 1]
        n = tiles[3 * t + 2]
        head = (8 - (d & 7)) & 7
        if head > n:
            head = n
        if i < head:
            dst8[d + i] = src8[s + i]
        words = (n - head) >> 3
        wd = (d + head) >> 3
        ws = (s + head) >> 3
        r = (s + head) & 7
        j = i
        if r == 0:
            while j < words:
                dst64[wd + j] = src64[ws + j]
                j += step
        else:
            down = np.uint64(8 * r)
            up = np.uint64(64 - 8 * r)
            while j < words:
                dst64[wd + j] = (src64[ws + j] >> down) | (src64[ws + j + 1] << up)
                j += step
        j = head + words * 8 + i
        while j < n:
            dst8[d + j] = src8[s + j]
            j += step
