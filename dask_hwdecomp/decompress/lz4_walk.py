"""LZ4 blocks checked on the host by the rules of LZ4's reference decoder, before a GPU decompresses them.

nvCOMP decodes an LZ4 block whose match reaches before the block's start
with status 0, to other bytes (it reads whatever memory lies there), where
``LZ4_decompress_safe`` (pyarrow's decoder) refuses the block: a corrupt
page would come back as rows where pyarrow raises. :func:`walk_blocks`
walks every sequence of a batch's LZ4 blocks (tokens, lengths and offsets,
never the literals' bytes) and names the first rule each block breaks, of
those the reference decoder enforces on a whole block:

* a literal run or a match that ends past the block's output, or a literal
  run past its input;
* a match offset of more bytes than the block has produced
  (:data:`BEFORE_START`);
* the end of block: the last sequence is literals only, ending exactly at
  the input's end; a sequence whose literals come within 12 bytes of the
  output's end, or within 8 bytes of the input's end, must be that last
  one, and no match may end within the output's last 5 bytes;
* the input ending inside a sequence, or the block's output not its
  declared size.

It is never stricter than the reference: every block it refuses,
``LZ4_decompress_safe`` refuses (``tests/test_lz4_walk.py`` checks this
against pyarrow's codec on mutated blocks).

:func:`check_lz4_blocks` walks a batch before its GPU call, in parts on
several threads (compiled without the GIL), and the router calls it
before every backend whose LZ4 decoder is not the reference
(``lz4_checked``). Before, not beside: a block that passes keeps every
literal run and match inside its input and output, so a malformed LZ4
page never reaches a merged GPU call where other readers' pages lie next
to its output (nvCOMP is not memory-safe on corrupt input).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np
from numba import njit

from .. import timeline
from ..errors import CorruptPageError
from ..format.pages import check_page_crc
from ..jobs import ALGOS, Algo, JobTable

__all__ = ["walk_blocks", "check_lz4_blocks", "REASONS", "BEFORE_START"]

# Verdicts of one block (REASONS names them).
OK, BAD_END, LITERALS_PAST, BEFORE_START, MATCH_PAST, SIZE, LAST_RULE, MATCH_IN_TAIL, EMPTY = range(9)
REASONS = {
    BAD_END: "the input ends inside a sequence",
    LITERALS_PAST: "a literal run runs past the block's input or output",
    BEFORE_START: "a match reaches before the block's start",
    MATCH_PAST: "a match runs past the block's output",
    SIZE: "the block decodes to another size than the page declares",
    LAST_RULE: "a sequence near the block's end is not its last (LZ4's end-of-block rule)",
    MATCH_IN_TAIL: "a match ends within the block's last 5 bytes (LZ4's end-of-block rule)",
    EMPTY: "an empty block of output 0 is not the single byte 0",
}
_MFLIMIT, _LASTLITERALS = 12, 5
_LZ4 = ALGOS.index(Algo.LZ4)


@njit(nogil=True, cache=True)
def _walk_one(src, start, size, out_size):  # pragma: no cover - compiled
    end = start + size
    if out_size == 0:
        return OK if size == 1 and src[start] == 0 else EMPTY
    if size == 0:
        return BAD_END
    ip = start
    op = np.int64(0)
    while True:
        if ip >= end:
            return BAD_END
        token = np.int64(src[ip])
        ip += 1
        length = token >> 4
        if length == 15:
            while True:
                if ip >= end:
                    return BAD_END
                b = np.int64(src[ip])
                ip += 1
                length += b
                if b != 255:
                    break
        if ip + length > end or op + length > out_size:
            return LITERALS_PAST
        near_end = op + length > out_size - _MFLIMIT or ip + length > end - (2 + 1 + _LASTLITERALS)
        ip += length
        op += length
        if near_end or ip == end:
            # the last sequence: literals only, to the input's exact end
            if ip != end:
                return LAST_RULE
            return OK if op == out_size else SIZE
        offset = np.int64(src[ip]) | (np.int64(src[ip + 1]) << 8)
        ip += 2
        if offset > op:
            return BEFORE_START
        # The match length's extension bytes, written out as the literals' are: a shared
        # helper (even inlined) made the walk 2.4 times as slow (numba 0.68).
        length = token & 15
        if length == 15:
            while True:
                if ip >= end:
                    return BAD_END
                b = np.int64(src[ip])
                ip += 1
                length += b
                if b != 255:
                    break
        length += 4
        if op + length > out_size:
            return MATCH_PAST
        if op + length > out_size - _LASTLITERALS:
            return MATCH_IN_TAIL
        op += length


@njit(nogil=True, cache=True)
def _walk_rows(src, algo, starts, sizes, outs, lz4, verdicts):  # pragma: no cover - compiled
    for i in range(len(starts)):
        if algo[i] == lz4:
            verdicts[i] = _walk_one(src, starts[i], sizes[i], outs[i])


def walk_blocks(table: JobTable, src: np.ndarray, which: np.ndarray | None = None) -> np.ndarray:
    """Each row's verdict (:data:`REASONS`' keys, 0 where sound or not LZ4) over the batch source ``src``.

    Parameters
    ----------
    table : JobTable
        The batch's jobs; rows of other algorithms are left at 0.
    src : numpy.ndarray of uint8
        The batch's source buffer (``src_offset`` indexes it).
    which : numpy.ndarray of int64, optional
        Walk only these rows (the verdicts are theirs, in this order).
    """
    rows = table.rows if which is None else table.rows[which]
    verdicts = np.zeros(len(rows), np.int32)
    starts = rows["src_offset"] + rows["preamble"]
    sizes = rows["src_size"] - rows["preamble"]
    if len(rows) and (starts.min() < 0 or (starts + sizes).max() > len(src) or sizes.min() < 0):
        raise ValueError("a job's input lies outside the batch's source buffer")
    _walk_rows(src, rows["algo"], starts, sizes, rows["dst_size"], _LZ4, verdicts)
    return verdicts


# A batch's walk is cut in up to _PARTS parts of at least _PART_BYTES compressed
# bytes, one on the caller's thread and the rest on the pool's.
_PARTS, _PART_BYTES = 4, 2 << 20
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=_PARTS - 1, thread_name_prefix="hwdecomp-lz4-walk")
        return _pool


def check_lz4_blocks(table: JobTable, src: memoryview, backend) -> None:
    """Before ``backend`` decompresses ``table``: raise for its first LZ4 block LZ4's reference decoder refuses.

    Nothing is walked where ``backend.lz4_checked``. The walk is cut in
    parts run at once (the caller's thread and a small pool's); every part
    is waited for before this returns or raises.

    Parameters
    ----------
    table : JobTable
        The jobs of the call (only its LZ4 rows are walked).
    src : memoryview
        The batch's source buffer.
    backend : Backend
        The backend the call is for.

    Raises
    ------
    ChecksumError
        The refused block's page carries a CRC-32 to verify, and it does
        not match (what pyarrow reports first).
    CorruptPageError
        Naming the page (the first in the table's order) and the rule its block breaks.
    """
    if backend.lz4_checked:
        return
    lz4 = np.flatnonzero(table.algo_codes() == _LZ4)
    if not len(lz4):
        return
    data = np.frombuffer(src, dtype=np.uint8)
    nbytes = table.rows["src_size"][lz4]
    total = int(nbytes.sum())
    parts = max(1, min(_PARTS, total // _PART_BYTES))
    cuts = np.searchsorted(np.cumsum(nbytes), [total * k // parts for k in range(1, parts)], side="right")
    pieces = np.split(lz4, cuts)
    with timeline.span("lz4_walk", nbytes=total, parts=parts):
        futures = [_executor().submit(walk_blocks, table, data, p) for p in pieces[1:]]
        try:
            first = walk_blocks(table, data, pieces[0])
        finally:
            wait(futures)  # every part done: none reads src once this returns
        verdicts = np.concatenate([first] + [f.result() for f in futures])
    bad = np.flatnonzero(verdicts)
    if len(bad):
        k = int(lz4[bad[0]])
        # With verify_checksums a page's CRC-32 is judged before its decoder, as pyarrow does.
        crc = table.job(k).page_crc
        if crc is not None:
            check_page_crc(src[crc.offset : crc.offset + crc.size], crc.value, table.location(k))
        raise CorruptPageError(
            f"lz4 block refused by the reference decoder's rules: {REASONS[int(verdicts[bad[0]])]} "
            f"(rejected before the GPU: {backend.name} decodes such a block without an error)", table.location(k))
