"""The gather kernel: every device piece of a decode's bytes copied in one launch.

A *tile* is a row of (offset in ``src``, offset in ``dst``, bytes), at most
a few tens of KiB, so that a large piece spreads over many blocks and many
small ones share none. A block copies a tile with the widest word both
offsets allow: 8 bytes where they agree modulo 8, 4 where modulo 4, else
bytes (the head and tail around the words byte by byte).
"""

from __future__ import annotations

from .cuda_jit import cuda

__all__ = ["gather_kernel"]


@cuda.jit(device=True, cache=True)
def _copy_words(src8, srcw, dst8, dstw, s, d, n, width):
    """Tile bytes [0, n) from ``s`` to ``d``: bytes up to ``d``'s ``width`` boundary, words, bytes."""
    i = cuda.threadIdx.x
    step = cuda.blockDim.x
    head = (width - (d & (width - 1))) & (width - 1)
    if head > n:
        head = n
    if i < head:
        dst8[d + i] = src8[s + i]
    words = (n - head) // width
    ws = (s + head) // width
    wd = (d + head) // width
    j = i
    while j < words:
        dstw[wd + j] = srcw[ws + j]
        j += step
    j = head + words * width + i
    while j < n:
        dst8[d + j] = src8[s + j]
        j += step


@cuda.jit(cache=True)
def gather_kernel(src8, src32, src64, dst8, dst32, dst64, tiles):
    """Copy every tile (``tiles``: int64, three a tile, flat) from ``src`` into ``dst``.

    ``src*`` and ``dst*`` are one byte range each, as uint8, uint32 and
    uint64 arrays from the same first byte. Tiles must not overlap in
    ``dst``: blocks copy them in no order.
    """
    for t in range(cuda.blockIdx.x, tiles.shape[0] // 3, cuda.gridDim.x):
        s = tiles[3 * t]
        d = tiles[3 * t + 1]
        n = tiles[3 * t + 2]
        if ((s ^ d) & 7) == 0:
            _copy_words(src8, src64, dst8, dst64, s, d, n, 8)
        elif ((s ^ d) & 3) == 0:
            _copy_words(src8, src32, dst8, dst32, s, d, n, 4)
        else:
            i = cuda.threadIdx.x
            while i < n:
                dst8[d + i] = src8[s + i]
                i += cuda.blockDim.x
