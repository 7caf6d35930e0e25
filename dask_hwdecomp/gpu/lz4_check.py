"""LZ4 blocks checked on the device before nvCOMP decodes them.

nvCOMP 6.0 decodes some corrupt LZ4 blocks with status 0 to other bytes
(a match reaching before the block's start, a literal run past the
input), and some make it read outside its buffers, which poisons the
GPU context for every call in flight. The reference decoder
(``LZ4_decompress_safe``, what pyarrow calls) refuses such blocks, so
every LZ4 block of a call is walked first, one thread a block, by the
rules of the LZ4 block format:

* a literal length's extension bytes stay within the reference's read
  limit (15 bytes before the input's end), a match length's too (4);
* a sequence whose literals end within 8 bytes of the input's end, or
  whose match would start within 12 bytes of the output's end, is the
  last: its literals end exactly at the input's end, within the output;
* a match's offset is not 0 (the format calls it invalid; the reference
  copies zeros) and reaches no further back than the block's start;
* a match ends at least 5 bytes before the output's end;
* the block decodes to exactly the size the page declares.

A block at fault is given to nvCOMP as an empty block instead (one zero
token: no bytes read or written past it), and its fault code comes back
with the call's statuses as ``LZ4_STATUS - code``, which
:func:`lz4_status_text` names. Checked, the walk costs no copy: it reads
the block where staging put it in the call's arena.

:func:`lz4_block_fault` is the same walk compiled for the host, the
reference the tests hold the device kernel to (and hold to the LZ4
library's verdicts).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .cuda_jit import cuda

__all__ = ["LZ4_OK", "LZ4_STATUS", "LZ4_FAULTS", "lz4_block_fault", "lz4_status_text", "check_blocks",
           "queue_lz4_checks", "warm_lz4_check"]

LZ4_OK = 0
_EMPTY_INPUT = 1
_LITERAL_LENGTH_PAST = 2
_LAST_SEQUENCE = 3
_MATCH_LENGTH_PAST = 4
_OFFSET_ZERO = 5
_OFFSET_BEFORE_START = 6
_MATCH_PAST_END = 7
_WRONG_SIZE = 8

LZ4_FAULTS = {
    _EMPTY_INPUT: "the block is empty",
    _LITERAL_LENGTH_PAST: "a literal length runs past the input",
    _LAST_SEQUENCE: "the last sequence's literals do not end the block within its output",
    _MATCH_LENGTH_PAST: "a match length runs past the input",
    _OFFSET_ZERO: "a match has offset 0",
    _OFFSET_BEFORE_START: "a match reaches back before the block's start",
    _MATCH_PAST_END: "a match runs into the block's last 5 bytes",
    _WRONG_SIZE: "the block does not decode to the page's size",
}

# Statuses of the call at or below this are the check's: LZ4_STATUS - code.
# nvCOMP's own statuses are non-negative.
LZ4_STATUS = -100

_THREADS = 64


def _walk(src, start, size, expected):  # pragma: no cover - compiled (host and device)
    """The fault code of the LZ4 block ``src[start:start + size]`` decoding to ``expected`` bytes."""
    if size <= 0:
        return _EMPTY_INPUT
    ip = start
    iend = start + size
    if expected == 0:
        return LZ4_OK if size == 1 and src[ip] == 0 else _WRONG_SIZE
    op = 0
    while True:
        token = np.int64(src[ip])
        ip += 1
        lit = token >> 4
        if lit == 15:
            limit = iend - 15
            if ip >= limit:
                return _LITERAL_LENGTH_PAST
            while True:
                s = np.int64(src[ip])
                ip += 1
                lit += s
                if ip > limit:
                    return _LITERAL_LENGTH_PAST
                if s != 255:
                    break
        if op + lit > expected - 12 or ip + lit > iend - 8:
            if ip + lit != iend or op + lit > expected:
                return _LAST_SEQUENCE
            op += lit
            break
        ip += lit
        op += lit
        offset = np.int64(src[ip]) | (np.int64(src[ip + 1]) << 8)
        ip += 2
        match = (token & 15) + 4
        if match == 19:
            limit = iend - 4
            while True:
                s = np.int64(src[ip])
                ip += 1
                match += s
                if ip > limit:
                    return _MATCH_LENGTH_PAST
                if s != 255:
                    break
        if offset == 0:
            return _OFFSET_ZERO
        if offset > op:
            return _OFFSET_BEFORE_START
        if op + match > expected - 5:
            return _MATCH_PAST_END
        op += match
    return LZ4_OK if op == expected else _WRONG_SIZE


lz4_block_fault = njit(nogil=True, cache=True)(_walk)
_walk_device = cuda.jit(device=True)(_walk)  # compiled into the kernel (and cached with it)


@cuda.jit(cache=True)
def _check_blocks(arena, base, src_ptrs, src_sizes, caps, fault, empty):  # pragma: no cover - device
    """Walk block ``i`` (at ``src_ptrs[i]``, inside ``arena`` at ``base``); a faulty one is swapped for ``empty``."""
    i = cuda.grid(1)
    if i >= fault.shape[0]:
        return
    code = _walk_device(arena, np.int64(src_ptrs[i] - base), np.int64(src_sizes[i]), np.int64(caps[i]))
    fault[i] = code
    if code != LZ4_OK:
        src_ptrs[i] = empty
        src_sizes[i] = np.uint64(1)


def lz4_status_text(status: int) -> str:
    """The text of a status the check set (``LZ4_STATUS - code``)."""
    what = LZ4_FAULTS.get(LZ4_STATUS - int(status), "unknown fault")
    return f"invalid LZ4 block: {what} (checked on the GPU before nvCOMP)"


def check_blocks(arena, base: int, src_ptrs, src_sizes, caps, fault, empty: int, stream=0) -> None:
    """Queue the walk of every block (numba device arrays, or host arrays under the simulator).

    Parameters
    ----------
    arena : device array of uint8
        The bytes every block lies in, starting at address ``base``.
    src_ptrs, src_sizes, caps : device arrays of uint64
        Each block's address, stored size and declared output size; a
        faulty block's address and size are set to ``empty`` and 1.
    fault : device array of int32
        Each block's fault code (``LZ4_OK``: none).
    empty : int
        Address of a zero byte: an LZ4 block decoding to nothing.
    stream : numba stream
    """
    n = fault.shape[0]
    if n:
        blocks = (n + _THREADS - 1) // _THREADS
        _check_blocks[blocks, _THREADS, stream](arena, np.uint64(base), src_ptrs, src_sizes, caps, fault,
                                                np.uint64(empty))


def warm_lz4_check() -> None:
    """Compile the kernel (or load it from numba's disk cache) with one block, before a call needs it."""
    block = np.zeros(1, np.uint8)
    ptrs = cuda.to_device(np.zeros(1, np.uint64))
    fault = cuda.to_device(np.zeros(1, np.int32))
    check_blocks(cuda.to_device(block), 0, ptrs, cuda.to_device(np.ones(1, np.uint64)),
                 cuda.to_device(np.zeros(1, np.uint64)), fault, 0)
    if int(fault.copy_to_host()[0]) != LZ4_OK:
        raise RuntimeError("the LZ4 check refused the empty block")


def _device_view(address: int, count: int, dtype):
    """A numba device array over ``count`` items at a device address owned elsewhere (no copy, no sync)."""
    dt = np.dtype(dtype)
    desc = {"shape": (count,), "typestr": dt.str, "data": (int(address), False), "version": 3, "strides": None}
    return cuda.from_cuda_array_interface(desc, owner=None, sync=False)


def queue_lz4_checks(stream, src_ptrs: np.ndarray, src_sizes: np.ndarray, d_src: int, d_sizes: int, d_caps: int,
                     d_fault: int, *, empty: int) -> None:
    """Queue the walk of ``len(src_ptrs)`` blocks on ``stream`` (a :class:`~dask_hwdecomp.gpu.stream.Stream`).

    Their device metadata (uint64 each) starts at ``d_src`` (addresses),
    ``d_sizes`` (stored sizes) and ``d_caps`` (declared output sizes);
    their fault codes go to the int32 slots at ``d_fault``; ``empty`` is
    the address of a zeroed word. ``src_ptrs`` and ``src_sizes`` are the
    host's copies of the first two: they bound the bytes the walk reads.
    """
    n = len(src_ptrs)
    if not n:
        return
    base = int(src_ptrs.min())
    end = int((src_ptrs + src_sizes.astype(np.uint64)).max())
    check_blocks(_device_view(base, max(end - base, 1), np.uint8), base,
                 _device_view(d_src, n, np.uint64), _device_view(d_sizes, n, np.uint64),
                 _device_view(d_caps, n, np.uint64), _device_view(d_fault, n, np.int32), empty,
                 cuda.external_stream(stream.handle))
