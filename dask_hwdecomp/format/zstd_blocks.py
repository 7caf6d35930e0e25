"""The blocks of one Zstandard frame (RFC 8878, 3.1.1.2), walked by compiled code.

After a frame's header come its blocks, each a 3-byte little-endian header
(last-block bit, block type, block size) and its stored bytes: all of them
for a raw or compressed block, one byte for an RLE block. A host check
walks every block header before a GPU decoder sees the frame, so that a
frame that runs past its page or declares a block larger than the format
allows is refused first. :func:`zstd_blocks` is that walk, compiled and
without the GIL, for the table-wide check
(:mod:`~dask_hwdecomp.decompress.table_checks`) and, called from Python,
for the reference (:mod:`~dask_hwdecomp.decompress.validate`) that names
what it found.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

__all__ = ["ZstdBlocks", "BLOCK_OK", "BLOCK_HEADER_PAST", "BLOCK_RESERVED", "BLOCK_TOO_LARGE", "BLOCK_DATA_PAST",
           "zstd_block_max", "zstd_blocks"]

# The largest block of any frame (Block_Maximum_Size).
_BLOCK_MAX = 128 << 10

# What zstd_blocks found wrong.
BLOCK_OK = 0
BLOCK_HEADER_PAST = 1  # a block header runs past the input
BLOCK_RESERVED = 2  # a block of the reserved type
BLOCK_TOO_LARGE = 3  # a block larger than the frame allows
BLOCK_DATA_PAST = 4  # a block's stored bytes run past the input


class ZstdBlocks(NamedTuple):
    """What :func:`zstd_blocks` found in the blocks of one frame.

    Attributes
    ----------
    fault : int
        ``BLOCK_OK``, or what is wrong (one of the ``BLOCK_`` codes).
    at : int
        Where the walk ended: just past the last block, or at the header
        of the block at fault.
    produced : int
        Bytes the raw and RLE blocks walked decompress to (compressed
        blocks do not say).
    size : int
        For ``BLOCK_RESERVED`` and ``BLOCK_TOO_LARGE`` the block's size
        field, for ``BLOCK_DATA_PAST`` the bytes it stores; else 0.
    """

    fault: int
    at: int
    produced: int
    size: int


@njit(nogil=True, cache=True)
def zstd_block_max(window):
    """The largest block a frame of ``window`` bytes may hold (-1: the window is not known)."""
    return min(_BLOCK_MAX, max(window, 0)) if window >= 0 else _BLOCK_MAX


@njit(nogil=True, cache=True)
def zstd_blocks(src, pos, end, block_max):
    """Walk the blocks of a frame from its first block header at ``src[pos]`` to its last block.

    Parameters
    ----------
    src : uint8 array
    pos, end : int
        The first block header, and the end of the input the frame must
        lie in.
    block_max : int
        The frame's largest block (:func:`zstd_block_max`).

    Returns
    -------
    ZstdBlocks
    """
    produced = np.int64(0)
    while True:
        if pos + 3 > end:
            return ZstdBlocks(BLOCK_HEADER_PAST, pos, produced, 0)
        bh = np.int64(src[pos]) | (np.int64(src[pos + 1]) << 8) | (np.int64(src[pos + 2]) << 16)
        btype = (bh >> 1) & 3
        bsize = bh >> 3
        if btype == 3:
            return ZstdBlocks(BLOCK_RESERVED, pos, produced, bsize)
        if bsize > block_max:
            return ZstdBlocks(BLOCK_TOO_LARGE, pos, produced, bsize)
        stored = 1 if btype == 1 else bsize  # RLE stores one byte
        if pos + 3 + stored > end:
            return ZstdBlocks(BLOCK_DATA_PAST, pos, produced, stored)
        if btype != 2:
            produced += bsize
        pos += 3 + stored
        if bh & 1:
            return ZstdBlocks(BLOCK_OK, pos, produced, 0)
