"""Device helpers for Parquet's RLE / bit-packed hybrid encoding.

A hybrid stream is a sequence of runs, each behind a ULEB128 header: LSB 1
is a bit-packed run of ``(header >> 1) * 8`` values of ``bw`` bits (LSB
first), LSB 0 an RLE run of ``header >> 1`` repeats of one value stored in
``ceil(bw / 8)`` little-endian bytes. Run headers can only be found by
walking the stream, so one thread of a block walks them (:func:`next_run`)
while the whole block expands each run (:func:`run_value`): the serial
part is one step per run, the values are decoded in parallel.

Every read is checked against the stream's end; a header that does not
fit, a run of no values or a run that needs bytes past the end is an
error, so a hostile header (a run of 2^31 values, a bit width of 200)
costs one step and never a read out of bounds.
"""

from __future__ import annotations

import numpy as np

from ..gpu.cuda_jit import cuda

__all__ = ["RUN_OK", "RUN_BAD", "read_u32", "uleb128", "next_run", "run_value", "block_hybrid"]

RUN_OK = 0
RUN_BAD = 1
# ULEB128 headers are 32-bit in the format: at most 5 bytes.
_MAX_HEADER_BYTES = 5


@cuda.jit(device=True, cache=True)
def read_u32(data, pos, end):
    """The 4-byte little-endian value at ``pos``, or -1 when it does not fit before ``end``."""
    if pos < 0 or pos + 4 > end:
        return np.int64(-1)
    return (np.int64(data[pos]) | (np.int64(data[pos + 1]) << 8) | (np.int64(data[pos + 2]) << 16)
            | (np.int64(data[pos + 3]) << 24))


@cuda.jit(device=True, cache=True)
def uleb128(data, pos, end):
    """(value, next position); value -1 when the varint is cut off or longer than 32 bits."""
    value = np.int64(0)
    shift = 0
    for i in range(_MAX_HEADER_BYTES):
        if pos + i >= end:
            return np.int64(-1), pos
        b = np.int64(data[pos + i])
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            if value > 0xFFFFFFFF:
                return np.int64(-1), pos
            return value, pos + i + 1
    return np.int64(-1), pos


@cuda.jit(device=True, cache=True)
def next_run(data, pos, end, bw, remaining, whole):
    """Decode the run header at ``pos``.

    Returns ``(status, packed, count, value, values_pos, next_pos)``:
    ``count`` values (at most ``remaining``); an RLE run's repeated
    ``value``, or a bit-packed run's first byte ``values_pos``. The bytes
    of the values used are checked to lie before ``end`` (a last group
    may be cut short, as writers pad it); with ``whole``, every byte the
    run's header declares must (pyarrow's level decoder refuses a page
    whose bit-packed level run claims more groups than its bytes hold,
    even where the values it needs are there).
    """
    z = np.int64(0)
    header, p = uleb128(data, pos, end)
    if header <= 0:
        return RUN_BAD, 0, z, z, z, pos
    n = header >> 1
    if header & 1:
        count = n * 8
        if count > remaining:
            count = remaining
        need = (count * bw + 7) // 8
        if whole != 0:
            need = n * bw
        if need > end - p:
            return RUN_BAD, 0, z, z, z, pos
        return RUN_OK, 1, count, z, p, p + n * bw
    nbytes = (bw + 7) // 8
    if nbytes > end - p:
        return RUN_BAD, 0, z, z, z, pos
    value = np.int64(0)
    for i in range(nbytes):
        value |= np.int64(data[p + i]) << (8 * i)
    count = n
    if count > remaining:
        count = remaining
    return RUN_OK, 0, count, value, p, p + nbytes


@cuda.jit(device=True, cache=True)
def run_value(data, packed, value, values_pos, end, bw, j):
    """Value ``j`` of the current run (bytes past ``end`` read as 0)."""
    if packed == 0:
        return value
    bit = np.int64(j) * bw
    pos = values_pos + (bit >> 3)
    shift = bit & 7
    acc = np.int64(0)
    nbytes = (shift + bw + 7) // 8
    for i in range(nbytes):
        if pos + i < end:
            acc |= np.int64(data[pos + i]) << (8 * i)
    return (acc >> shift) & ((np.int64(1) << bw) - 1)


@cuda.jit(device=True, cache=True)
def block_hybrid(data, pos, end, bw, n, shared, out, out_base, vrow, mode, limit, whole):
    """Expand ``n`` values of a hybrid stream, the whole block cooperating.

    ``whole``: a bit-packed run's declared bytes must all lie before ``end``
    (:func:`next_run`; definition levels), else only those of the values used.
    Called by every thread of the block with the same arguments; ``shared``
    is a block-shared int64 array of at least 6 entries. Value ``k`` goes to
    ``out[out_base + k]`` (``mode`` 0), or to row ``out_base + vrow[out_base
    + k]`` (``mode`` 1: the page's ``k``-th non-null row). Values are
    checked ``< limit`` (``limit`` <= 0: no check). Returns 0, 1 (a bad run
    or too few values) or 2 (a value ``>= limit``), the same in every thread.
    """
    tid = cuda.threadIdx.x
    nthreads = cuda.blockDim.x
    done = np.int64(0)
    if tid == 0:
        shared[5] = 0
    status = 0
    cursor = pos
    while done < n:
        cuda.syncthreads()
        if tid == 0:
            st, packed, count, value, vpos, nxt = next_run(data, cursor, end, bw, n - done, whole)
            shared[0] = st
            shared[1] = packed
            shared[2] = count
            shared[3] = value
            shared[4] = vpos
            cursor = nxt
        cuda.syncthreads()
        if shared[0] != RUN_OK:
            status = 1
            break
        packed = shared[1]
        count = shared[2]
        value = shared[3]
        vpos = shared[4]
        for j in range(tid, count, nthreads):
            v = run_value(data, packed, value, vpos, end, bw, j)
            if limit > 0 and v >= limit:
                shared[5] = 1
                v = 0
            k = done + j
            if mode == 0:
                out[out_base + k] = v
            else:
                out[out_base + vrow[out_base + k]] = v
        done += count
    cuda.syncthreads()
    if status == 0 and shared[5] != 0:
        status = 2
    cuda.syncthreads()
    return status
