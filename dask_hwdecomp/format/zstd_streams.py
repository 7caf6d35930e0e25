"""The Huffman literal streams of Zstandard pages, found on the host and walked to their ends.

A compressed block's literals section (RFC 8878, 3.1.1.3.1) coded with
Huffman holds one stream or four, each a backward bitstream that must be
consumed exactly (4.2.2). A stream whose literals need more bits than it
holds is faulty, yet both decoders accept it: libzstd's fast four-stream
path reads the missing bits from the bytes below the stream (the previous
stream's last bytes, pyarrow's rows) and nvCOMP reads zeros (other rows).
Such a page is decoded again by libzstd, so it must be found.

:func:`pages_streams` only finds the streams: it walks a part's frames and
blocks, reads each Huffman tree description (:func:`~.zstd_huffman.huffman_tree`)
and lists every stream with its literal count and a table of code lengths
per tree, touching no literal. A walk reads a stream from its end mark
(:func:`payload_bits_py`) one literal at a time (:func:`step_py`), both
written once in plain Python so that they compile both for the host
(:func:`bits_left`, :func:`walk_streams`) and, in the layers that know
GPUs, as CUDA device functions: there the lanes of a block walk the
pieces of one stream where the bytes already are.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from .codec_kernels import read_le
from .zstd_huffman import HUF_TABLELOG_MAX, huffman_tree

__all__ = ["ZstdStreams", "NO_END_MARK", "pages_streams", "payload_bits_py", "step_py", "bits_left",
           "walk_streams"]

# What bits_left says of a stream whose last byte is 0: it has no end mark, and libzstd refuses it.
NO_END_MARK = -(1 << 40)

_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE = 0x184D2A50
_FIRST_STREAMS = 64  # rows of the stream table made first; it doubles when full


class ZstdStreams(NamedTuple):
    """The Huffman literal streams of a part's Zstd pages (:func:`pages_streams`).

    Attributes
    ----------
    page, start, end, literals, tree : numpy.ndarray of int64
        One row per stream: its page's index, its bytes ``src[start:end]``,
        the literals it must decode, and its tree's index.
    lengths : numpy.ndarray of uint8
        Every tree's table of code lengths, one after the other: for each
        of the ``2**table_log`` values of a stream's next ``table_log``
        bits, the length of the code they begin with.
    lengths_at, table_log : numpy.ndarray of int64
        Per tree: where its table starts in ``lengths``, and its longest
        code in bits.
    bad : numpy.ndarray of bool
        Per page: a Huffman tree libzstd refuses (or a literals section it
        cannot hold); its streams after that point are not listed.
    """

    page: np.ndarray
    start: np.ndarray
    end: np.ndarray
    literals: np.ndarray
    tree: np.ndarray
    lengths: np.ndarray
    lengths_at: np.ndarray
    table_log: np.ndarray
    bad: np.ndarray


def payload_bits_py(src, start, end):  # pragma: no cover - compiled
    """The bits of the stream ``src[start:end]`` below its end mark (the highest set bit of its last byte); -1: none."""
    last = np.int64(src[end - 1])
    if last == 0:
        return np.int64(-1)
    mark = 0
    while (last >> (mark + 1)) != 0:
        mark += 1
    return (end - start - 1) * 8 + mark


def step_py(src, start, end, pos, table_log, lengths, lengths_at):  # pragma: no cover - compiled
    """Where the stream ``src[start:end]`` stands after one more literal read at bit ``pos``.

    The literal consumes the code length ``lengths[lengths_at + v]`` of the
    next ``table_log`` bits ``v`` below ``pos``, zeros where they reach below
    ``start``, as libzstd reads them.
    """
    mask = (np.int64(1) << table_log) - 1
    lo = pos - table_log
    if lo >= 0:
        b = start + (lo >> 3)
        v = np.int64(src[b])
        if b + 1 < end:
            v |= np.int64(src[b + 1]) << 8
        if b + 2 < end:
            v |= np.int64(src[b + 2]) << 16
        v = (v >> (lo & 7)) & mask
    elif pos > 0:  # the stream's first bits, zeros below them
        v = np.int64(src[start])
        if start + 1 < end:
            v |= np.int64(src[start + 1]) << 8
        v = ((v & ((np.int64(1) << pos) - 1)) << (-lo)) & mask
    else:
        v = np.int64(0)
    return pos - np.int64(lengths[lengths_at + v])


_payload_bits = njit(nogil=True, cache=True, inline="always")(payload_bits_py)
_step = njit(nogil=True, cache=True, inline="always")(step_py)


@njit(nogil=True, cache=True)
def bits_left(src, start, end, count, lengths, lengths_at, table_log):  # pragma: no cover - compiled
    """Walk the ``count`` literals of the Huffman stream ``src[start:end]``; the bits left after them.

    Read as libzstd reads it, from its end mark (:func:`payload_bits_py`),
    a literal at a time (:func:`step_py`).

    Returns
    -------
    int
        0 when the stream is consumed exactly, < 0 when it is over-read,
        > 0 when bits are left over; :data:`NO_END_MARK` when its last byte
        is 0.
    """
    pos = _payload_bits(src, start, end)
    if pos < 0:
        return NO_END_MARK
    for _ in range(count):
        pos = _step(src, start, end, pos, table_log, lengths, lengths_at)
    return pos


@njit(nogil=True, cache=True)
def walk_streams(src, start, end, count, tree, lengths, lengths_at, table_log):  # pragma: no cover - compiled
    """:func:`bits_left` of every stream of a :class:`ZstdStreams` table over ``src`` (int64 per stream)."""
    out = np.zeros(len(start), np.int64)
    for k in range(len(start)):
        t = tree[k]
        out[k] = bits_left(src, start[k], end[k], count[k], lengths, lengths_at[t], table_log[t])
    return out


@njit(nogil=True, cache=True)
def _grown(rows, used):  # pragma: no cover - compiled
    if used < rows.shape[0]:
        return rows
    more = np.empty((2 * rows.shape[0], rows.shape[1]), rows.dtype)
    more[:used] = rows[:used]
    return more


@njit(nogil=True, cache=True)
def _grown_flat(flat, need):  # pragma: no cover - compiled
    if need <= flat.shape[0]:
        return flat
    more = np.empty(max(need, 2 * flat.shape[0]), flat.dtype)
    more[: flat.shape[0]] = flat
    return more


@njit(nogil=True, cache=True)
def _frame_blocks(src, pos, end):  # pragma: no cover - compiled
    """The first block header of the frame at ``src[pos]`` and whether a checksum follows its blocks (-1: none)."""
    if pos + 5 > end or read_le(src, pos, 4) != _ZSTD_MAGIC:
        return -1, False
    fhd = np.int64(src[pos + 4])
    single = (fhd >> 5) & 1
    did = fhd & 3
    code = fhd >> 6
    fcs_len = (1 if single else 0) if code == 0 else (2 if code == 1 else (4 if code == 2 else 8))
    first = pos + 5 + (0 if single else 1) + (4 if did == 3 else did) + fcs_len
    return (first if first <= end else -1), ((fhd >> 2) & 1) == 1


@njit(nogil=True, cache=True)
def pages_streams(src, offsets, sizes):  # pragma: no cover - compiled
    """The Huffman literal streams of the Zstd pages ``src[offsets[i]:offsets[i]+sizes[i]]``.

    Walks each page's frames and blocks and, in every compressed block
    whose literals are Huffman-coded (with a tree, or treeless: the
    frame's last tree), lists each stream: four streams decode
    ``(literals + 3) // 4`` literals each but the last, which decodes the
    rest; one stream decodes them all. No literal is read. The pages
    passed the host checks already, but nothing is read outside them.

    Parameters
    ----------
    src : numpy.ndarray of uint8
        Writable or read-only.
    offsets, sizes : numpy.ndarray of int64

    Returns
    -------
    ZstdStreams
    """
    rows = np.empty((_FIRST_STREAMS, 5), np.int64)  # page, start, end, count, tree
    trees = np.empty((8, 2), np.int64)  # lengths_at, table_log
    lengths = np.empty(8192, np.uint8)
    weights = np.zeros(256, np.uint8)
    by_weight = np.zeros(16, np.int64)
    bad = np.zeros(len(offsets), np.bool_)
    n = 0
    n_trees = 0
    used = 0  # bytes of lengths
    for page in range(len(offsets)):
        pos = offsets[page]
        end = pos + sizes[page]
        while pos + 4 <= end and not bad[page]:
            magic = read_le(src, pos, 4)
            if magic & 0xFFFFFFF0 == _SKIPPABLE:
                if pos + 8 > end:
                    break
                pos += 8 + read_le(src, pos + 4, 4)
                continue
            first, summed = _frame_blocks(src, pos, end)
            if first < 0:
                break
            pos = first
            tree = -1  # the frame's last tree (a new frame starts with none)
            while True:
                if pos + 3 > end:
                    pos = end
                    break
                bh = read_le(src, pos, 3)
                btype = (bh >> 1) & 3
                bsize = bh >> 3
                stored = 1 if btype == 1 else bsize
                if btype == 3 or pos + 3 + stored > end:
                    pos = end
                    break
                p = pos + 3
                kind = np.int64(src[p]) & 3 if bsize > 0 else 0
                if btype == 2 and kind >= 2 and bsize >= 5:
                    lhl = (np.int64(src[p]) >> 2) & 3
                    lhc = read_le(src, p, 4)
                    if lhl <= 1:
                        lh, lit, litc = 3, (lhc >> 4) & 0x3FF, (lhc >> 14) & 0x3FF
                    elif lhl == 2:
                        lh, lit, litc = 4, (lhc >> 4) & 0x3FFF, lhc >> 18
                    else:
                        lh, lit, litc = 5, (lhc >> 4) & 0x3FFFF, (lhc >> 22) + (np.int64(src[p + 4]) << 10)
                    q = p + lh
                    streams_end = q + litc
                    if streams_end > p + bsize:
                        bad[page] = True
                        break
                    if kind == 2:
                        size, symbols, table_log = huffman_tree(src, q, streams_end, weights)
                        if size <= 0 or table_log < 1 or table_log > HUF_TABLELOG_MAX:
                            bad[page] = True
                            break
                        by_weight[:] = 0
                        for s in range(symbols):
                            by_weight[weights[s]] += 1
                        width = np.int64(1) << table_log
                        trees = _grown(trees, n_trees)
                        lengths = _grown_flat(lengths, used + width)
                        at = used
                        for w in range(1, table_log + 1):  # codes of one weight are adjacent in the table
                            span = by_weight[w] << (w - 1)
                            if at + span > used + width:
                                break
                            lengths[at : at + span] = table_log + 1 - w
                            at += span
                        if at != used + width:  # not a complete code
                            bad[page] = True
                            break
                        trees[n_trees, 0] = used
                        trees[n_trees, 1] = table_log
                        tree = n_trees
                        n_trees += 1
                        used += width
                        q += size
                    elif tree < 0:
                        bad[page] = True
                        break
                    if lhl == 0:  # one stream
                        if q >= streams_end:
                            bad[page] = True
                            break
                        rows = _grown(rows, n)
                        rows[n, 0], rows[n, 1], rows[n, 2], rows[n, 3], rows[n, 4] = page, q, streams_end, lit, tree
                        n += 1
                    else:
                        if q + 6 > streams_end:
                            bad[page] = True
                            break
                        at = q + 6
                        each = (lit + 3) // 4
                        for k in range(4):
                            stop = at + read_le(src, q + 2 * k, 2) if k < 3 else streams_end
                            if stop <= at or stop > streams_end:
                                bad[page] = True
                                break
                            rows = _grown(rows, n)
                            rows[n, 0], rows[n, 1], rows[n, 2] = page, at, stop
                            rows[n, 3] = each if k < 3 else lit - 3 * each
                            rows[n, 4] = tree
                            n += 1
                            at = stop
                        if bad[page]:
                            break
                pos += 3 + stored
                if bh & 1:
                    break
            if summed:
                pos += 4
    return ZstdStreams(rows[:n, 0].copy(), rows[:n, 1].copy(), rows[:n, 2].copy(), rows[:n, 3].copy(),
                       rows[:n, 4].copy(), lengths[:used].copy(), trees[:n_trees, 0].copy(),
                       trees[:n_trees, 1].copy(), bad)
