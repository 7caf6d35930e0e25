"""LZ4 and Snappy blocks checked on the device before nvCOMP decodes them.

nvCOMP 6.0 decodes some corrupt blocks with status 0 to other bytes (an
LZ4 match reaching before the block's start) and reads outside its
buffers on others (Snappy and LZ4 noise behind valid framing: an illegal
address that poisons the GPU context for every call in flight). The
reference decoders pyarrow calls (``LZ4_decompress_safe``,
``snappy::RawUncompress``) refuse such blocks, so every LZ4 and Snappy
block of a call is walked first, one thread a block, by its format's
rules as the reference applies them:

LZ4 (a block, as LZ4_RAW pages and Hadoop framing's inner blocks hold it)
    a literal length's extension bytes stay within the reference's read
    limit (15 bytes before the input's end), a match length's too (4); a
    sequence whose literals end within 8 bytes of the input's end, or
    whose match would start within 12 bytes of the output's end, is the
    last: its literals end exactly at the input's end, within the output;
    a match's offset is not 0 (the format calls it invalid; the reference
    copies zeros) and reaches no further back than the block's start; a
    match ends at least 5 bytes before the output's end.
Snappy (a raw block: its length varint, then tags)
    every tag's extra bytes and every literal lie within the input and the
    output; a copy's offset is not 0 and reaches no further back than the
    block's start; the tags end exactly at the input's end.

Both: the block decodes to exactly the size the page declares.

A block at fault is given to nvCOMP as an empty block instead (one zero
byte: an LZ4 token of no literals, a Snappy length of 0), and its fault
comes back with the call's statuses as ``BLOCK_STATUS - code``, which
:func:`block_status_text` names. The walk reads each block where staging
put it in the call's arena: no copy.

:func:`lz4_block_fault` and :func:`snappy_block_fault` are the same walks
compiled for the host: the reference the tests hold the kernel to (and
hold to the libraries' verdicts).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .cuda_jit import cuda

__all__ = ["BLOCK_OK", "BLOCK_STATUS", "BLOCK_FAULTS", "WALK_LZ4", "WALK_SNAPPY", "lz4_block_fault",
           "snappy_block_fault", "block_status_text", "check_blocks", "queue_block_checks", "warm_block_checks"]

BLOCK_OK = 0
_EMPTY_INPUT = 1
_WRONG_SIZE = 2
_LZ4_LITERAL_LENGTH_PAST = 10
_LZ4_LAST_SEQUENCE = 11
_LZ4_MATCH_LENGTH_PAST = 12
_LZ4_OFFSET_ZERO = 13
_LZ4_OFFSET_BEFORE_START = 14
_LZ4_MATCH_PAST_END = 15
_SNAPPY_LENGTH = 20
_SNAPPY_TAG_PAST = 21
_SNAPPY_LITERAL_PAST_INPUT = 22
_SNAPPY_PAST_OUTPUT = 23
_SNAPPY_OFFSET_ZERO = 24
_SNAPPY_OFFSET_BEFORE_START = 25

BLOCK_FAULTS = {
    _EMPTY_INPUT: "the block is empty",
    _WRONG_SIZE: "the block does not decode to the page's size",
    _LZ4_LITERAL_LENGTH_PAST: "a literal length runs past the input",
    _LZ4_LAST_SEQUENCE: "the last sequence's literals do not end the block within its output",
    _LZ4_MATCH_LENGTH_PAST: "a match length runs past the input",
    _LZ4_OFFSET_ZERO: "a match has offset 0",
    _LZ4_OFFSET_BEFORE_START: "a match reaches back before the block's start",
    _LZ4_MATCH_PAST_END: "a match runs into the block's last 5 bytes",
    _SNAPPY_LENGTH: "its length varint is invalid",
    _SNAPPY_TAG_PAST: "a tag runs past the input",
    _SNAPPY_LITERAL_PAST_INPUT: "a literal runs past the input",
    _SNAPPY_PAST_OUTPUT: "a literal or copy runs past the output",
    _SNAPPY_OFFSET_ZERO: "a copy has offset 0",
    _SNAPPY_OFFSET_BEFORE_START: "a copy reaches back before the block's start",
}

# Statuses of the call at or below this are the check's: BLOCK_STATUS - code.
# nvCOMP's own statuses are non-negative.
BLOCK_STATUS = -100

# Which walk a kernel launch runs.
WALK_LZ4 = 0
WALK_SNAPPY = 1

# One warp a block, its first lane walking: the walks of one warp's 32
# blocks would diverge at every sequence and scatter every load (on an H100,
# one thread a block walked 1 MiB Snappy pages of small integers at 1.5 GB/s
# of output for 256 blocks). A lone lane runs its chain of loads through
# its SM's L1 undisturbed.
_WARP = 32
_WARPS = 4  # blocks (warps) a thread block


def _extension(src, ip, limit):  # pragma: no cover - compiled (host and device)
    """An LZ4 length's extension bytes from ``ip`` (each 255 continues): ``(their sum, ip past them)``.

    The sum is -1 where a byte is read past ``limit``, the reference's read limit.
    """
    total = np.int64(0)
    while True:
        s = np.int64(src[ip])
        ip += 1
        total += s
        if ip > limit:
            return np.int64(-1), ip
        if s != 255:
            return total, ip


def _lz4_walk(extension):
    """The LZ4 walk, calling ``extension`` (:func:`_extension` compiled for the same target)."""

    def walk(src, start, size, expected):  # pragma: no cover - compiled (host and device)
        """The fault code of the LZ4 block ``src[start:start + size]`` decoding to ``expected`` bytes."""
        if size <= 0:
            return _EMPTY_INPUT
        ip = start
        iend = start + size
        if expected == 0:
            return BLOCK_OK if size == 1 and src[ip] == 0 else _WRONG_SIZE
        op = 0
        while True:
            token = np.int64(src[ip])
            ip += 1
            lit = token >> 4
            if lit == 15:
                if ip >= iend - 15:
                    return _LZ4_LITERAL_LENGTH_PAST
                more, ip = extension(src, ip, iend - 15)
                if more < 0:
                    return _LZ4_LITERAL_LENGTH_PAST
                lit += more
            if op + lit > expected - 12 or ip + lit > iend - 8:
                if ip + lit != iend or op + lit > expected:
                    return _LZ4_LAST_SEQUENCE
                op += lit
                break
            ip += lit
            op += lit
            offset = np.int64(src[ip]) | (np.int64(src[ip + 1]) << 8)
            ip += 2
            match = (token & 15) + 4
            if match == 19:
                more, ip = extension(src, ip, iend - 4)
                if more < 0:
                    return _LZ4_MATCH_LENGTH_PAST
                match += more
            if offset == 0:
                return _LZ4_OFFSET_ZERO
            if offset > op:
                return _LZ4_OFFSET_BEFORE_START
            if op + match > expected - 5:
                return _LZ4_MATCH_PAST_END
            op += match
        return BLOCK_OK if op == expected else _WRONG_SIZE

    return walk


def _snappy(src, start, size, expected):  # pragma: no cover - compiled (host and device)
    """The fault code of the raw Snappy block ``src[start:start + size]`` decoding to ``expected`` bytes."""
    if size <= 0:
        return _EMPTY_INPUT
    ip = start
    iend = start + size
    declared = np.int64(0)
    shift = 0
    while True:
        if ip >= iend or shift > 28:
            return _SNAPPY_LENGTH
        b = np.int64(src[ip])
        ip += 1
        declared |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            break
    if declared != expected:
        return _WRONG_SIZE
    op = 0
    while ip < iend:
        tag = np.int64(src[ip])
        ip += 1
        kind = tag & 3
        if kind == 0:
            n = (tag >> 2) + 1
            if n > 60:
                extra = n - 60
                if ip + extra > iend:
                    return _SNAPPY_TAG_PAST
                n = np.int64(0)
                for k in range(extra):
                    n |= np.int64(src[ip + k]) << (8 * k)
                n += 1
                ip += extra
            if n > iend - ip:
                return _SNAPPY_LITERAL_PAST_INPUT
            if n > expected - op:
                return _SNAPPY_PAST_OUTPUT
            ip += n
            op += n
            continue
        if kind == 1:
            if ip + 1 > iend:
                return _SNAPPY_TAG_PAST
            n = ((tag >> 2) & 7) + 4
            offset = ((tag >> 5) << 8) | np.int64(src[ip])
            ip += 1
        elif kind == 2:
            if ip + 2 > iend:
                return _SNAPPY_TAG_PAST
            n = (tag >> 2) + 1
            offset = np.int64(src[ip]) | (np.int64(src[ip + 1]) << 8)
            ip += 2
        else:
            if ip + 4 > iend:
                return _SNAPPY_TAG_PAST
            n = (tag >> 2) + 1
            offset = (np.int64(src[ip]) | (np.int64(src[ip + 1]) << 8) | (np.int64(src[ip + 2]) << 16)
                      | (np.int64(src[ip + 3]) << 24))
            ip += 4
        if offset > op:
            return _SNAPPY_OFFSET_BEFORE_START
        if offset == 0:
            return _SNAPPY_OFFSET_ZERO
        if n > expected - op:
            return _SNAPPY_PAST_OUTPUT
        op += n
    return BLOCK_OK if op == expected else _WRONG_SIZE


# The host walks are the tests' references (not on the read path): compiled uncached, as closures.
lz4_block_fault = njit(nogil=True)(_lz4_walk(njit(nogil=True)(_extension)))
snappy_block_fault = njit(nogil=True)(_snappy)
# Compiled into the kernel (and cached with it).
_lz4_device = cuda.jit(device=True)(_lz4_walk(cuda.jit(device=True)(_extension)))
_snappy_device = cuda.jit(device=True)(_snappy)


@cuda.jit(cache=True)
def _check_blocks(walk, arena, base, src_ptrs, src_sizes, caps, fault, empty):  # pragma: no cover - device
    """Walk block ``i`` (at ``src_ptrs[i]``, inside ``arena`` at ``base``); a faulty one is swapped for ``empty``.

    Block ``i`` is warp ``i``'s: its first lane walks, the others return.
    """
    t = cuda.grid(1)
    i = t // _WARP
    if t % _WARP != 0 or i >= fault.shape[0]:
        return
    start = np.int64(src_ptrs[i] - base)
    size = np.int64(src_sizes[i])
    expected = np.int64(caps[i])
    if walk == WALK_LZ4:
        code = _lz4_device(arena, start, size, expected)
    else:
        code = _snappy_device(arena, start, size, expected)
    fault[i] = code
    if code != BLOCK_OK:
        src_ptrs[i] = empty
        src_sizes[i] = np.uint64(1)


def block_status_text(status: int) -> str:
    """The text of a status the check set (``BLOCK_STATUS - code``)."""
    what = BLOCK_FAULTS.get(BLOCK_STATUS - int(status), "unknown fault")
    return f"invalid block: {what} (checked on the GPU before nvCOMP)"


def check_blocks(walk: int, arena, base: int, src_ptrs, src_sizes, caps, fault, empty: int, stream=0) -> None:
    """Queue the walk ``walk`` of every block (numba device arrays, or host arrays under the simulator).

    Parameters
    ----------
    walk : int
        ``WALK_LZ4`` or ``WALK_SNAPPY``.
    arena : device array of uint8
        The bytes every block lies in, starting at address ``base``.
    src_ptrs, src_sizes, caps : device arrays of uint64
        Each block's address, stored size and declared output size; a
        faulty block's address and size are set to ``empty`` and 1.
    fault : device array of int32
        Each block's fault code (``BLOCK_OK``: none).
    empty : int
        Address of a zero byte: a block of either format decoding to nothing.
    stream : numba stream
    """
    n = fault.shape[0]
    if n:
        blocks = (n + _WARPS - 1) // _WARPS
        _check_blocks[blocks, _WARPS * _WARP, stream](np.int64(walk), arena, np.uint64(base), src_ptrs, src_sizes, caps,
                                                fault, np.uint64(empty))


def queue_block_checks(walk: int, stream, src_ptrs: np.ndarray, src_sizes: np.ndarray, d_src: int, d_sizes: int,
                       d_caps: int, d_fault: int, *, empty: int) -> None:
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
    check_blocks(walk, _device_view(base, max(end - base, 1), np.uint8), base,
                 _device_view(d_src, n, np.uint64), _device_view(d_sizes, n, np.uint64),
                 _device_view(d_caps, n, np.uint64), _device_view(d_fault, n, np.int32), empty,
                 cuda.external_stream(stream.handle))


def warm_block_checks() -> None:
    """Compile the kernel (or load it from numba's disk cache) with an empty block of each format."""
    for walk in (WALK_LZ4, WALK_SNAPPY):
        ptrs = cuda.to_device(np.zeros(1, np.uint64))
        fault = cuda.to_device(np.full(1, -1, np.int32))
        check_blocks(walk, cuda.to_device(np.zeros(1, np.uint8)), 0, ptrs, cuda.to_device(np.ones(1, np.uint64)),
                     cuda.to_device(np.zeros(1, np.uint64)), fault, 0)
        if int(fault.copy_to_host()[0]) != BLOCK_OK:
            raise RuntimeError(f"the block check (walk {walk}) refused the empty block")


def _device_view(address: int, count: int, dtype):
    """A numba device array over ``count`` items at a device address owned elsewhere (no copy, no sync)."""
    dt = np.dtype(dtype)
    desc = {"shape": (count,), "typestr": dt.str, "data": (int(address), False), "version": 3, "strides": None}
    return cuda.from_cuda_array_interface(desc, owner=None, sync=False)
