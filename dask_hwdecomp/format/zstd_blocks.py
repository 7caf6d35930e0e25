"""The blocks of one Zstandard frame (RFC 8878, 3.1.1.2), walked by compiled code.

After a frame's header come its blocks, each a 3-byte little-endian header
(last-block bit, block type, block size) and its stored bytes: all of them
for a raw or compressed block, one byte for an RLE block. A host check
walks every block header before a GPU decoder sees the frame, so that a
frame that runs past its page or declares a block larger than the format
allows is refused first.

Of a compressed block it also reads the section headers, as libzstd does
before decoding anything (RFC 8878, 3.1.1.3): the literals section's type
and sizes against the block (a treeless one needs a Huffman table earlier
in the frame; a compressed one's Huffman tree description must be one
libzstd accepts, :func:`~dask_hwdecomp.format.zstd_huffman.huffman_tree`;
four Huffman streams need 6 literals or more, and each stream at least
one byte, ending in its end mark), and the sequences
section's count, its modes' reserved bits, a repeated table only after a
block with sequences, an RLE symbol within its alphabet, and the sequences
bitstream's end mark. Noise behind a valid block header (what made nvCOMP
read outside its buffers) mostly fails these; what passes them is decoded
on the GPU.

:func:`zstd_blocks` is that walk, compiled and without the GIL, for the
table-wide check (:mod:`~dask_hwdecomp.decompress.table_checks`) and,
called from Python, for the reference
(:mod:`~dask_hwdecomp.decompress.validate`) that names what it found.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from .codec_kernels import read_le
from .zstd_huffman import huffman_tree

__all__ = ["ZstdBlocks", "BLOCK_OK", "BLOCK_HEADER_PAST", "BLOCK_RESERVED", "BLOCK_TOO_LARGE", "BLOCK_DATA_PAST",
           "BLOCK_LITERALS", "BLOCK_SEQUENCES", "zstd_block_max", "zstd_blocks", "compressed_block_fault"]

# The largest block of any frame (Block_Maximum_Size).
_BLOCK_MAX = 128 << 10

# What zstd_blocks found wrong.
BLOCK_OK = 0
BLOCK_HEADER_PAST = 1  # a block header runs past the input
BLOCK_RESERVED = 2  # a block of the reserved type
BLOCK_TOO_LARGE = 3  # a block larger than the frame allows
BLOCK_DATA_PAST = 4  # a block's stored bytes run past the input
BLOCK_LITERALS = 5  # a compressed block's literals section contradicts the block, or its Huffman tree is invalid
BLOCK_SEQUENCES = 6  # a compressed block's sequences section header contradicts the block

# Largest symbol of each sequence code's alphabet (literal lengths, offsets, match lengths).
_MAX_LL, _MAX_OF, _MAX_ML = 35, 31, 52


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
    tables = 0  # what earlier blocks of the frame defined: 1 a Huffman table, 2 sequence tables
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
        else:
            fault, tables = compressed_block_fault(src, pos + 3, bsize, block_max, tables)
            if fault != BLOCK_OK:
                return ZstdBlocks(fault, pos, produced, bsize)
        pos += 3 + stored
        if bh & 1:
            return ZstdBlocks(BLOCK_OK, pos, produced, 0)


@njit(nogil=True, cache=True)
def compressed_block_fault(src, p, n, block_max, tables):
    """Check the section headers of the compressed block ``src[p:p+n]`` as libzstd does before decoding.

    ``tables``: bit 1 set once a block of the frame defined a Huffman
    table (compressed literals with a tree description libzstd accepts),
    bit 2 once one had sequences. Returns
    ``(fault, tables)``: ``BLOCK_OK``, ``BLOCK_LITERALS`` or
    ``BLOCK_SEQUENCES``, and the bits with this block's.
    """
    if n < 2:
        return BLOCK_LITERALS, tables
    kind = np.int64(src[p]) & 3
    lhl = (np.int64(src[p]) >> 2) & 3
    end = p + n
    if kind >= 2:  # Huffman-coded literals: compressed (2) or treeless (3)
        if kind == 3 and not tables & 1:
            return BLOCK_LITERALS, tables
        if n < 5:
            return BLOCK_LITERALS, tables
        lhc = read_le(src, p, 4)
        single = lhl == 0
        if lhl <= 1:
            lh, lit, litc = 3, (lhc >> 4) & 0x3FF, (lhc >> 14) & 0x3FF
        elif lhl == 2:
            lh, lit, litc = 4, (lhc >> 4) & 0x3FFF, lhc >> 18
        else:
            lh, lit, litc = 5, (lhc >> 4) & 0x3FFFF, (lhc >> 22) + (np.int64(src[p + 4]) << 10)
        if lit > block_max or (not single and lit < 6) or litc + lh > n:
            return BLOCK_LITERALS, tables
        q = p + lh
        streams_end = q + litc
        if kind == 2:  # the Huffman tree description comes first
            if litc < 1:
                return BLOCK_LITERALS, tables
            head = np.int64(src[q])
            tree = 1 + (head if head < 128 else (head - 127 + 1) // 2)
            if tree >= litc:
                return BLOCK_LITERALS, tables
            size, _, _ = huffman_tree(src, q, streams_end, np.empty(256, np.uint8))
            if size != tree:
                return BLOCK_LITERALS, tables
            q += tree
        size = streams_end - q
        if single:
            if size < 1 or src[streams_end - 1] == 0:
                return BLOCK_LITERALS, tables
        else:
            if size < 10:
                return BLOCK_LITERALS, tables
            s1, s2, s3 = read_le(src, q, 2), read_le(src, q + 2, 2), read_le(src, q + 4, 2)
            s4 = size - 6 - s1 - s2 - s3
            if s1 < 1 or s2 < 1 or s3 < 1 or s4 < 1:
                return BLOCK_LITERALS, tables
            at = q + 6
            if src[at + s1 - 1] == 0 or src[at + s1 + s2 - 1] == 0 or src[at + s1 + s2 + s3 - 1] == 0 \
                    or src[streams_end - 1] == 0:
                return BLOCK_LITERALS, tables
        tables |= 1
        sec = streams_end
    else:  # raw (0) or RLE (1) literals
        if lhl == 1:
            lh, lit = 2, read_le(src, p, 2) >> 4
        elif lhl == 3:
            lh, lit = 3, read_le(src, p, 3) >> 4 if n >= 3 else 0
        else:
            lh, lit = 1, np.int64(src[p]) >> 3
        if lit > block_max:
            return BLOCK_LITERALS, tables
        stored = lit if kind == 0 else 1
        if lh + stored > n:
            return BLOCK_LITERALS, tables
        sec = p + lh + stored
    # The sequences section: its count, then (with sequences) the modes and tables, then the bitstream.
    if sec >= end:
        return BLOCK_SEQUENCES, tables
    count = np.int64(src[sec])
    q = sec + 1
    if count > 0x7F:
        if count == 0xFF:
            if q + 2 > end:
                return BLOCK_SEQUENCES, tables
            count = read_le(src, q, 2) + 0x7F00
            q += 2
        else:
            if q >= end:
                return BLOCK_SEQUENCES, tables
            count = ((count - 0x80) << 8) + np.int64(src[q])
            q += 1
    if count == 0:
        return (BLOCK_OK if q == end else BLOCK_SEQUENCES), tables
    if q >= end:
        return BLOCK_SEQUENCES, tables
    modes = np.int64(src[q])
    q += 1
    if modes & 3:
        return BLOCK_SEQUENCES, tables
    for shift in (6, 4, 2):
        if (modes >> shift) & 3 == 3 and not tables & 2:
            return BLOCK_SEQUENCES, tables
    known = True  # the table descriptions' sizes are known so far (FSE-compressed ones are not)
    for shift, largest in ((6, _MAX_LL), (4, _MAX_OF), (2, _MAX_ML)):
        mode = (modes >> shift) & 3
        if not known:
            break
        if mode == 1:  # RLE: one symbol
            if q >= end or np.int64(src[q]) > largest:
                return BLOCK_SEQUENCES, tables
            q += 1
        elif mode == 2:
            known = False
    if (known and q >= end) or src[end - 1] == 0:
        return BLOCK_SEQUENCES, tables
    return BLOCK_OK, tables | 2
