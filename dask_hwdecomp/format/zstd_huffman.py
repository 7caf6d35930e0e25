"""A Zstandard Huffman tree description (RFC 8878, 4.2.1), read as libzstd reads it.

A compressed literals section starts with the description of its Huffman
tree: a header byte, then the weights of the symbols but the last, either
4-bit each (header >= 128) or FSE-coded (header < 128: that many bytes,
an FSE table description then a backward bitstream decoded by two
interleaved states). The last symbol's weight is implied: the weights'
total ``sum(2 ** (w - 1))`` must be completed to a power of two by one
more power of two.

:func:`huffman_tree` follows libzstd 1.5's ``HUF_readStats`` to the byte,
including what the format leaves open and libzstd decides: how
``FSE_readNCount`` reads past the end of a short description (it clamps
its reads to the last four bytes), the weights decoder's workspace, which
limits an accuracy log of 6 to 12 symbols and one of 5 to 92, and where its
two-state loop stops (a bitstream that ends early still yields the
weights decoded up to its overflow). It refuses exactly what libzstd
refuses, so a page the check passes is one libzstd would start to decode,
and a tree it refuses is one libzstd calls corrupt.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .codec_kernels import u32le

__all__ = ["HUF_TABLELOG_MAX", "huffman_tree"]

HUF_TABLELOG_MAX = 12  # the longest Huffman code, in bits
_WEIGHTS_LOG_MAX = 6  # the FSE accuracy log of the weights' table
_FSE_MIN_TABLELOG = 5
_FSE_TABLELOG_ABSOLUTE_MAX = 15
_NCOUNT_SYMBOLS = 256  # FSE_readNCount's alphabet (FSE_MAX_SYMBOL_VALUE + 1)
# HUF_READ_STATS_WORKSPACE_SIZE_U32 = FSE_DECOMPRESS_WKSP_SIZE_U32(6, HUF_TABLELOG_MAX - 1)
_WKSP_U32 = (1 + (1 << 6)) + 1 + (2 * 12 + (1 << 6) + 8 + 3) // 4 + _NCOUNT_SYMBOLS // 2 + 1

# BIT_reloadDStream's statuses.
_UNFINISHED, _END_OF_BUFFER, _COMPLETED, _OVERFLOW = 0, 1, 2, 3

_U1 = np.uint64(1)
_U63 = np.uint64(63)


@njit(nogil=True, cache=True)
def _highbit(v):  # pragma: no cover - compiled
    """ZSTD_highbit32: the index of the highest set bit of ``v`` > 0."""
    b = 0
    while v >> (b + 1):
        b += 1
    return b


@njit(nogil=True, cache=True)
def _le64(src, at):  # pragma: no cover - compiled
    v = np.uint64(0)
    for i in range(8):
        v |= np.uint64(src[at + i]) << np.uint64(8 * i)
    return v


@njit(nogil=True, cache=True)
def _read_ncount(src, start, size, ncount):  # pragma: no cover - compiled
    """FSE_readNCount over ``src[start:start+size]`` (at least 8 bytes, zero-padded by the caller when shorter).

    Fills ``ncount`` (256 entries); returns ``(bytes read, max symbol,
    table log)``, bytes read -1 on an error.
    """
    iend = start + size
    ip = start
    for s in range(_NCOUNT_SYMBOLS):
        ncount[s] = 0
    bit_stream = u32le(src, ip)
    nb_bits = (bit_stream & 0xF) + _FSE_MIN_TABLELOG
    if nb_bits > _FSE_TABLELOG_ABSOLUTE_MAX:
        return -1, 0, 0
    bit_stream >>= 4
    bit_count = 4
    table_log = nb_bits
    remaining = (1 << nb_bits) + 1
    threshold = 1 << nb_bits
    nb_bits += 1
    charnum = 0
    previous0 = False
    while True:
        if previous0:
            repeats = _ctz32((~bit_stream & 0xFFFFFFFF) | 0x80000000) >> 1
            while repeats >= 12:
                charnum += 3 * 12
                if ip <= iend - 7:
                    ip += 3
                else:
                    bit_count -= 8 * (iend - 7 - ip)
                    bit_count &= 31
                    ip = iend - 4
                bit_stream = u32le(src, ip) >> bit_count
                repeats = _ctz32((~bit_stream & 0xFFFFFFFF) | 0x80000000) >> 1
            charnum += 3 * repeats
            bit_stream >>= 2 * repeats
            bit_count += 2 * repeats
            charnum += bit_stream & 3
            bit_count += 2
            if charnum >= _NCOUNT_SYMBOLS:
                break
            if ip <= iend - 7 or ip + (bit_count >> 3) <= iend - 4:
                ip += bit_count >> 3
                bit_count &= 7
            else:
                bit_count -= 8 * (iend - 4 - ip)
                bit_count &= 31
                ip = iend - 4
            bit_stream = u32le(src, ip) >> bit_count
        mx = (2 * threshold - 1) - remaining
        if (bit_stream & (threshold - 1)) < mx:
            count = bit_stream & (threshold - 1)
            bit_count += nb_bits - 1
        else:
            count = bit_stream & (2 * threshold - 1)
            if count >= threshold:
                count -= mx
            bit_count += nb_bits
        count -= 1  # extra accuracy
        if count >= 0:
            remaining -= count
        else:
            remaining += count
        ncount[charnum] = count
        charnum += 1
        previous0 = count == 0
        if remaining < threshold:
            if remaining <= 1:
                break
            nb_bits = _highbit(remaining) + 1
            threshold = 1 << (nb_bits - 1)
        if charnum >= _NCOUNT_SYMBOLS:
            break
        if ip <= iend - 7 or ip + (bit_count >> 3) <= iend - 4:
            ip += bit_count >> 3
            bit_count &= 7
        else:
            bit_count -= 8 * (iend - 4 - ip)
            bit_count &= 31
            ip = iend - 4
        bit_stream = u32le(src, ip) >> bit_count
    if remaining != 1 or charnum > _NCOUNT_SYMBOLS or bit_count > 32:
        return -1, 0, 0
    ip += (bit_count + 7) >> 3
    return ip - start, charnum - 1, table_log


@njit(nogil=True, cache=True)
def _ctz32(v):  # pragma: no cover - compiled
    """ZSTD_countTrailingZeros32 of ``v`` != 0."""
    n = 0
    while not (v >> n) & 1:
        n += 1
    return n


@njit(nogil=True, cache=True)
def _build_dtable(ncount, max_symbol, table_log, symbol, nb_bits, new_state):  # pragma: no cover - compiled
    """FSE_buildDTable: fill the decoding table's three columns; returns (ok, fast mode)."""
    table_size = 1 << table_log
    high = table_size - 1
    symbol_next = np.empty(max_symbol + 1, np.int64)
    fast = True
    large = 1 << (table_log - 1)
    for s in range(max_symbol + 1):
        if ncount[s] == -1:
            symbol[high] = s
            high -= 1
            symbol_next[s] = 1
        else:
            if ncount[s] >= large:
                fast = False
            symbol_next[s] = ncount[s]
    mask = table_size - 1
    step = (table_size >> 1) + (table_size >> 3) + 3
    position = 0
    for s in range(max_symbol + 1):
        for _ in range(ncount[s]):
            symbol[position] = s
            position = (position + step) & mask
            while position > high:
                position = (position + step) & mask
    if position != 0:
        return False, fast
    for u in range(table_size):
        nxt = symbol_next[symbol[u]]
        symbol_next[symbol[u]] = nxt + 1
        nb = table_log - _highbit(nxt)
        nb_bits[u] = nb
        new_state[u] = (nxt << nb) - table_size
    return True, fast


@njit(nogil=True, cache=True)
def _fse_weights(src, start, size, out, capacity):  # pragma: no cover - compiled
    """FSE_decompress_wksp with HUF_readStats' workspace and accuracy log 6; returns the weights decoded, -1 on an error."""
    ncount = np.empty(_NCOUNT_SYMBOLS, np.int64)
    if size < 8:  # FSE_readNCount reads a zero-padded copy of a short description
        pad = np.zeros(8, np.uint8)
        for i in range(size):
            pad[i] = src[start + i]
        head, max_symbol, table_log = _read_ncount(pad, 0, 8, ncount)
        if head > size:
            return -1
    else:
        head, max_symbol, table_log = _read_ncount(src, start, size, ncount)
    if head < 0 or table_log > _WEIGHTS_LOG_MAX:
        return -1
    # FSE_DECOMPRESS_WKSP_SIZE_U32(tableLog, maxSymbolValue) must fit HUF_readStats' workspace, and
    # FSE_BUILD_DTABLE_WKSP_SIZE what is left of it.
    need = (1 + (1 << table_log)) + 1 + (2 * (max_symbol + 1) + (1 << table_log) + 8 + 3) // 4 \
        + _NCOUNT_SYMBOLS // 2 + 1
    if need > _WKSP_U32:
        return -1
    left = 4 * _WKSP_U32 - 2 * _NCOUNT_SYMBOLS - 4 * (1 + (1 << table_log))
    if 2 * (max_symbol + 1) + (1 << table_log) + 8 > left:
        return -1
    symbol = np.empty(1 << table_log, np.int64)
    nb_bits = np.empty(1 << table_log, np.int64)
    new_state = np.empty(1 << table_log, np.int64)
    ok, fast = _build_dtable(ncount, max_symbol, table_log, symbol, nb_bits, new_state)
    if not ok:
        return -1
    return _fse_decode(src, start + head, size - head, symbol, nb_bits, new_state, table_log, fast, out, capacity)


@njit(nogil=True, cache=True)
def _fse_decode(src, bs, size, symbol, nb_bits, new_state, table_log, fast, out, capacity):  # pragma: no cover
    """FSE_decompress_usingDTable_generic on a 64-bit machine: two states over BIT_DStream ``src[bs:bs+size]``."""
    # BIT_initDStream
    if size < 1:
        return -1
    last = np.int64(src[bs + size - 1])
    if last == 0:
        return -1
    if size >= 8:
        ptr = size - 8
        c = _le64(src, bs + ptr)
        bc = 8 - _highbit(last)
    else:
        ptr = 0
        c = np.uint64(0)
        for i in range(size):
            c |= np.uint64(src[bs + i]) << np.uint64(8 * i)
        bc = 8 - _highbit(last) + (8 - size) * 8
    # FSE_initDState twice (BIT_readBits: the normal look-up), each followed by a reload
    state1 = _bits(c, bc, table_log)
    bc += table_log
    ptr, bc, c, status = _reload(src, bs, ptr, bc, c)
    state2 = _bits(c, bc, table_log)
    bc += table_log
    ptr, bc, c, status = _reload(src, bs, ptr, bc, c)
    ptr, bc, c, status = _reload(src, bs, ptr, bc, c)
    if status == _OVERFLOW:
        return -1
    op = 0
    omax = capacity
    olimit = omax - 3
    while True:  # 4 symbols per loop; the reload runs even when the output is full
        ptr, bc, c, status = _reload(src, bs, ptr, bc, c)
        if not (status == _UNFINISHED and op < olimit):
            break
        for k in range(4):
            u = state1 if k % 2 == 0 else state2
            out[op + k] = symbol[u]
            nb = nb_bits[u]
            low = _bits_fast(c, bc, nb) if fast else _bits(c, bc, nb)
            bc += nb
            if k % 2 == 0:
                state1 = new_state[u] + low
            else:
                state2 = new_state[u] + low
        op += 4
    # the tail: one symbol and one reload at a time, up to the overflow
    while True:
        for k in range(2):
            if op > omax - 2:
                return -1
            u = state1 if k == 0 else state2
            out[op] = symbol[u]
            op += 1
            nb = nb_bits[u]
            low = _bits_fast(c, bc, nb) if fast else _bits(c, bc, nb)
            bc += nb
            if k == 0:
                state1 = new_state[u] + low
            else:
                state2 = new_state[u] + low
            ptr, bc, c, status = _reload(src, bs, ptr, bc, c)
            if status == _OVERFLOW:
                out[op] = symbol[state2 if k == 0 else state1]
                return op + 1


@njit(nogil=True, cache=True)
def _bits(c, bc, nb):  # pragma: no cover - compiled
    """BIT_lookBits (x86-64: the shift is taken modulo 64, as a corrupt stream may ask for bits it lacks)."""
    start = np.uint64((64 - bc - nb) & 63)
    return np.int64((c >> start) & ((_U1 << np.uint64(nb)) - _U1))


@njit(nogil=True, cache=True)
def _bits_fast(c, bc, nb):  # pragma: no cover - compiled
    """BIT_lookBitsFast (``nb`` >= 1)."""
    return np.int64((c << np.uint64(bc & 63)) >> np.uint64((64 - nb) & 63))


@njit(nogil=True, cache=True)
def _reload(src, bs, ptr, bc, c):  # pragma: no cover - compiled
    """BIT_reloadDStream: returns (ptr, bits consumed, container, status); ``ptr`` is relative to ``bs``."""
    if bc > 64:  # overflow: libzstd points at a zero word and stays here
        return ptr, bc, c, _OVERFLOW
    if ptr >= 8:
        ptr -= bc >> 3
        bc &= 7
        return ptr, bc, _le64(src, bs + ptr), _UNFINISHED
    if ptr == 0:
        return ptr, bc, c, (_END_OF_BUFFER if bc < 64 else _COMPLETED)
    nbytes = bc >> 3
    status = _UNFINISHED
    if ptr - nbytes < 0:
        nbytes = ptr
        status = _END_OF_BUFFER
    ptr -= nbytes
    bc -= nbytes * 8
    return ptr, bc, _le64(src, bs + ptr), status


@njit(nogil=True, cache=True)
def huffman_tree(src, pos, end, weights):
    """Read the Huffman tree description at ``src[pos]`` as libzstd's ``HUF_readStats`` does.

    Parameters
    ----------
    src : uint8 array
    pos, end : int
        The description's first byte (its header), and the end of the
        bytes it must lie in (for a literals section: the end of its
        compressed literals).
    weights : uint8 array of 256
        Filled with each symbol's weight (0: no code), the last symbol's
        implied weight included, and zero past the last symbol (its
        contents are undefined where the description is refused).

    Returns
    -------
    size : int
        The description's bytes (> 0), or -1 where libzstd refuses it
        (``HUF_readStats`` returns an error).
    symbols : int
        The number of symbols (the last symbol + 1).
    table_log : int
        The longest code, in bits: a symbol of weight ``w`` > 0 has a
        code of ``table_log + 1 - w`` bits.
    """
    for s in range(256):
        weights[s] = 0
    if pos >= end:
        return -1, 0, 0
    i_size = np.int64(src[pos])
    if i_size >= 128:  # direct 4-bit weights
        o_size = i_size - 127
        i_size = (o_size + 1) // 2
        if i_size + 1 > end - pos:
            return -1, 0, 0
        for n in range(0, o_size, 2):
            b = src[pos + 1 + n // 2]
            weights[n] = b >> 4
            weights[n + 1] = b & 15
    else:  # FSE-coded weights: at most 255, as the last is implied
        if i_size + 1 > end - pos:
            return -1, 0, 0
        o_size = _fse_weights(src, pos + 1, i_size, weights, 255)
        if o_size < 0:
            return -1, 0, 0
    ranks = np.zeros(HUF_TABLELOG_MAX + 1, np.int64)
    total = 0
    for n in range(o_size):
        w = np.int64(weights[n])
        if w > HUF_TABLELOG_MAX:
            return -1, 0, 0
        ranks[w] += 1
        total += (1 << w) >> 1
    if total == 0:
        return -1, 0, 0
    table_log = _highbit(total) + 1
    if table_log > HUF_TABLELOG_MAX:
        return -1, 0, 0
    rest = (1 << table_log) - total
    if rest & (rest - 1):  # the last weight must complete the total to a power of two
        return -1, 0, 0
    last = _highbit(rest) + 1
    weights[o_size] = last
    ranks[last] += 1
    if ranks[1] < 2 or ranks[1] & 1:  # a Huffman tree has an even number, at least 2, of longest codes
        return -1, 0, 0
    for s in range(o_size + 1, 256):
        weights[s] = 0
    return i_size + 1, o_size + 1, table_log
