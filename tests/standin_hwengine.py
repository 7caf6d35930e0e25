"""A stand-in of the CUDA hardware decompression engine, on host memory.

Nobody here has a GPU with the engine (Blackwell), so CI checks the
``hardware`` backend against this stand-in of ``cuMemBatchDecompressAsync``
as its documentation states it and as NVIDIA's own callers use it. Each rule
names its source:

[doc]  The call's reference (CUDA driver API, "Memory Decompression"; the same
       text is the docstring of ``cuda.bindings.driver.cuMemBatchDecompressAsync``
       and ``CUmemDecompressParams`` in cuda-bindings 13.5.0).
[nvcomp] nvCOMP's engine path: ``HWDecompress.hpp`` (``do_hw_decomp``,
       ``FillCuDEParamsOnHost``) and ``SnappyBatchKernels.cu``
       (``fill_cudecomp_params``) of recent nvCOMP releases.
[xgb]  XGBoost, ``src/common/device_compression.cu`` (``FillDecompParams``,
       ``DecompressSnappy``), dmlc/xgboost.

The rules:

* Operations and their memory. ``src``, ``dst`` and ``dstActBytes`` must be
  HW-decompress capable: allocated by ``cuMemAlloc``, ``cuMemCreate`` with the
  HW_DECOMPRESS usage or a pool created with it [doc]; here that is memory
  from :meth:`StandinHwEngine.alloc_device` only (pinned host memory is not).
  A pointer outside it, an algorithm outside the mask, or a size over the
  maximum length fails the call with ``CUDA_ERROR_INVALID_VALUE`` (a code
  the documentation lists for this call) and the error index of the
  operation [doc: "errorIndex ... the decompression operation for which the
  error returned by this function pertains to"]; nothing is queued then.
* The params are read when the call is made (they are copied then); the
  work runs in stream order, here when the stream is synchronised [doc:
  "Once the batch has been submitted, the function will return, and
  decompression will happen asynchronously"]. Copies and memsets queue on
  the stream too.
* The operations of a batch have no order [doc: "independent decompression
  operations"]: they run last to first here, so the stray writes of one land
  on the finished outputs of others.
* Bitstreams: raw deflate, LZ4 block, and raw Snappy *without* its length
  preamble: nvCOMP and XGBoost submit ``src + header_bytes`` and
  ``srcNumBytes - header_bytes`` [nvcomp: "do_parse_header: Snappy frame has
  variable size header to skip"; xgb].
* ``dstNumBytes`` is only a hint [doc: "This value is optional; if present,
  it may be used by the CUDA driver as a heuristic for scheduling"]; nvCOMP
  passes 0 [nvcomp]. The stand-in decodes into a scratch of the maximum
  length, writes every byte it decoded at ``dst`` (past ``dstNumBytes`` when
  the stream is longer) and records that count [doc: "the actual number of
  bytes written to dst will be recorded as a 32-bit unsigned integer"].
  Writing past the end of ``dst``'s allocation faults (an illegal address).
* A failed operation (corrupt input; undefined behaviour on the engine)
  leaves its ``dstActBytes`` slot untouched: callers zero the slots first
  [nvcomp, xgb: "WAR for HW only setting 32 lsb for this value"].

The batch's CRC-32s (gzip trailers, Parquet page CRCs) run through the ops
object's ``checksummer``: on a real GPU nvCOMP's ``nvcompBatchedCRC32Async``,
here :class:`StandinCrc`, the same contract on host memory (zlib's CRC-32 of
each chunk named by the device arrays of pointers and sizes). It records
every chunk it hashed, so tests can check which bytes the backend checks.

Corrupt input is undefined behaviour on the engine. ``fault`` makes a failed
operation do what nvCOMP 6.0 was seen to do on the H200 instead, to test the
GPU sidecar: ``"die"`` (the process is gone), ``"hang"`` (synchronising never
returns), ``"illegal_address"`` (synchronising raises
``CUDA_ERROR_ILLEGAL_ADDRESS``). ``fault_on="every call"`` models a broken
device: it faults on valid pages too. ``on_fault(params)`` is called with
the faulting call's params first (tests record which pages the call held).
``fail_if(record)`` makes chosen
operations fail though their input is valid (the engine's behaviour on any
given stream is not documented; the CPU decodes such pages).
``busy_bytes_per_s`` makes every call take its bytes (in and out) at that
rate, as on a GPU busy with other work, for tests of the service's
deadlines. ``misbehave``
breaks the contract on purpose, for tests of ``hwdecomp selfcheck``:
``"write_past"`` writes bytes past every output without counting them,
``"no_slot"`` never records the actual size, ``"claim_hint"`` records
``dstNumBytes`` for an operation that failed, ``"lenient_lz4"`` decodes an
LZ4 block whose match reaches before the block's start (zeros for the bytes
before it) with success, as nvCOMP 6.0 does (mutation runs on an H100,
docs/gpu.md), where LZ4's reference decoder refuses it.
"""

from __future__ import annotations

import bisect
import ctypes
import os
import signal
import threading
import time
import zlib

import cramjam
import numpy as np

from dask_hwdecomp.gpu.errors import CudaError
from dask_hwdecomp.gpu.hwengine import PARAMS_DTYPE, EngineCallError
from dask_hwdecomp.gpu.ops import DeviceAllocation, HostAllocation

from corruption import varint

CUDA_ERROR_INVALID_VALUE = 1
WRITE_PAST = 64  # bytes ``misbehave="write_past"`` writes after each output


def _snappy_elements_length(data: bytes) -> int:
    """Output length of a raw Snappy element stream (no preamble); ValueError if malformed."""
    pos = out = 0
    n = len(data)
    while pos < n:
        tag = data[pos]
        kind = tag & 3
        if kind == 0:  # literal; lengths over 60 follow in 1-4 bytes
            length = tag >> 2
            if length < 60:
                pos += 1
            else:
                extra = length - 59
                length = int.from_bytes(data[pos + 1 : pos + 1 + extra], "little")
                pos += 1 + extra
            pos += length + 1
            out += length + 1
        elif kind == 1:
            out += ((tag >> 2) & 7) + 4
            pos += 2
        else:
            out += (tag >> 2) + 1
            pos += 3 if kind == 2 else 5
    if pos != n:
        raise ValueError("snappy element runs past the input")
    return out


def _unsnappy(data: bytes, out: np.ndarray) -> int:
    # The engine gets no preamble [nvcomp, xgb]; cramjam's raw decoder wants one.
    n = _snappy_elements_length(data)
    if n > len(out):
        raise ValueError("output larger than the maximum length")
    return cramjam.snappy.decompress_raw_into(varint(n) + data, out)


def _lz4_length(src: np.ndarray, ip: int, n: int) -> tuple[int, int]:
    """An LZ4 token's length ``n`` with the bytes that extend it from ``src[ip]``, and where they end."""
    if n == 15:
        while True:
            b = int(src[ip])
            ip += 1
            n += b
            if b != 255:
                break
    return n, ip


def _lenient_lz4(data: bytes, out: np.ndarray) -> int:
    """An LZ4 block decoded as nvCOMP was seen to: a match before the block's start reads zeros, no error."""
    src = np.frombuffer(data, np.uint8)
    ip = op = 0
    while ip < len(src):
        token = int(src[ip])
        ip += 1
        n, ip = _lz4_length(src, ip, token >> 4)
        out[op : op + n] = src[ip : ip + n]
        ip += n
        op += n
        if ip >= len(src):
            return op
        offset = int(src[ip]) | int(src[ip + 1]) << 8
        ip += 2
        n, ip = _lz4_length(src, ip, token & 15)
        for _ in range(n + 4):
            out[op] = out[op - offset] if offset <= op else 0
            op += 1
    return op


_DECODERS = {
    1: cramjam.deflate.decompress_into,
    2: _unsnappy,
    4: cramjam.lz4.decompress_block_into,
}


class _Stream:
    """Work queued in order; run by :meth:`StandinHwEngine.synchronize`."""

    handle = 0

    def __init__(self):
        self.queue: list = []

    def synchronize(self):
        work, self.queue = self.queue, []
        for fn in work:
            fn()

    def close(self):
        self.queue = []


def _invalid(what: str, index: int) -> EngineCallError:
    return EngineCallError(f"CUDA_ERROR_INVALID_VALUE: {what}", code=CUDA_ERROR_INVALID_VALUE,
                           name="CUDA_ERROR_INVALID_VALUE", index=index)


class StandinCrc:
    """``nvcompBatchedCRC32Async``'s contract (CRC-32/PKZIP, one segment) on host memory.

    ``chunks`` lists every ``(address, bytes)`` hashed, in call order.
    """

    def __init__(self):
        self.chunks: list[tuple[int, bytes]] = []
        self.calls = 0

    def crc32_batch(self, ptrs: int, sizes: int, count: int, out: int, max_bytes: int, stream) -> None:
        self.calls += 1
        # Stream-ordered like every other piece of work: it reads the
        # pointers and the data when the stream reaches it.
        stream.queue.append(lambda: self._run(ptrs, sizes, count, out, max_bytes))

    def _run(self, ptrs: int, sizes: int, count: int, out: int, max_bytes: int) -> None:
        addrs = np.ctypeslib.as_array((ctypes.c_uint64 * count).from_address(ptrs))
        lens = np.ctypeslib.as_array((ctypes.c_uint64 * count).from_address(sizes))
        results = np.ctypeslib.as_array((ctypes.c_uint32 * count).from_address(out))
        for k in range(count):
            assert lens[k] <= max_bytes, "max_bytes must bound every chunk"
            data = ctypes.string_at(int(addrs[k]), int(lens[k]))
            self.chunks.append((int(addrs[k]), data))
            results[k] = zlib.crc32(data)


class StandinHwEngine:
    """The engine contract on host memory (see the module docstring).

    Parameters
    ----------
    mask : int
        ``MEM_DECOMPRESS_ALGORITHM_MASK`` to report (DEFLATE=1, SNAPPY=2, LZ4=4).
    max_length : int
        ``MEM_DECOMPRESS_MAXIMUM_LENGTH`` to report and enforce.
    fault, fault_on, on_fault, fail_if, busy_bytes_per_s, misbehave
        See the module docstring.
    """

    params_dtype = PARAMS_DTYPE
    entry_point = "stand-in"

    def __init__(self, mask: int = 7, max_length: int = 4 << 20, fault: str | None = None,
                 fault_on: str = "corrupt", fail_if=None, misbehave: str | None = None, on_fault=None,
                 busy_bytes_per_s: float | None = None):
        if fault not in (None, "die", "hang", "illegal_address") or fault_on not in ("corrupt", "every call"):
            raise ValueError(f"unknown fault {fault!r} on {fault_on!r}")
        if misbehave not in (None, "write_past", "no_slot", "claim_hint", "lenient_lz4"):
            raise ValueError(f"unknown misbehaviour {misbehave!r}")
        self.mask = mask
        self.max_length = max_length
        self.fault = fault
        self.fault_on = fault_on
        self.fail_if = fail_if
        self.misbehave = misbehave
        self.on_fault = on_fault
        self.busy_bytes_per_s = busy_bytes_per_s
        self.registered: dict[int, int] = {}
        self._live: dict[int, tuple[np.ndarray, bool]] = {}
        self._starts: list[int] = []
        self._lock = threading.Lock()
        self.calls: list[np.ndarray] = []  # copies of every params array submitted
        self.device_allocations = 0
        self.failed_operations = 0
        self.checksummer = StandinCrc()

    def describe(self) -> str:
        return "stand-in engine"

    def activate(self) -> None:
        pass

    def new_stream(self):
        return _Stream()

    # -- memory ---------------------------------------------------------------

    def _alloc(self, nbytes: int, cls, capable: bool):
        arr = np.zeros(nbytes, dtype=np.uint8)
        ptr = int(arr.ctypes.data)
        with self._lock:
            self._live[ptr] = (arr, capable)
            bisect.insort(self._starts, ptr)

        def free(p):
            with self._lock:
                self._live.pop(p)
                self._starts.remove(p)

        return cls(ptr, nbytes, free)

    def alloc_device(self, nbytes: int, stream) -> DeviceAllocation:
        self.device_allocations += 1
        return self._alloc(nbytes, DeviceAllocation, capable=True)

    def alloc_host(self, nbytes: int) -> HostAllocation:
        return self._alloc(nbytes, HostAllocation, capable=False)

    def register_host(self, ptr: int, nbytes: int) -> HostAllocation:
        """Record a registration (host memory is already "device" memory here)."""
        self.registered[ptr] = nbytes
        return HostAllocation(ptr, nbytes, lambda p: self.registered.pop(p))

    def _capable_end(self, ptr: int) -> int | None:
        """End of the HW-decompress-capable allocation holding ``ptr`` (None: not capable)."""
        with self._lock:
            i = bisect.bisect_right(self._starts, ptr) - 1
            if i < 0:
                return None
            start = self._starts[i]
            arr, capable = self._live[start]
        end = start + len(arr)
        return end if capable and ptr < end else None

    # -- stream-ordered work -----------------------------------------------

    def _device_range(self, ptr: int, nbytes: int) -> None:
        """Raise unless [ptr, ptr + nbytes) lies in one allocation (never touch memory outside)."""
        with self._lock:
            i = bisect.bisect_right(self._starts, ptr) - 1
            end = self._starts[i] + len(self._live[self._starts[i]][0]) if i >= 0 else 0
        if ptr + nbytes > end:
            raise CudaError(f"CUDA_ERROR_INVALID_VALUE: {nbytes} bytes at {ptr:#x} are outside device memory",
                            code=CUDA_ERROR_INVALID_VALUE, name="CUDA_ERROR_INVALID_VALUE")

    def htod(self, dst: int, src: int, nbytes: int, stream) -> None:
        self._device_range(dst, nbytes)
        stream.queue.append(lambda: ctypes.memmove(dst, src, nbytes))

    def dtoh(self, dst: int, src: int, nbytes: int, stream) -> None:
        self._device_range(src, nbytes)
        stream.queue.append(lambda: ctypes.memmove(dst, src, nbytes))

    def dtod(self, dst: int, src: int, nbytes: int, stream) -> None:
        # The destination is the GPU decoder's memory (numba's simulator: host memory too).
        self._device_range(src, nbytes)
        stream.queue.append(lambda: ctypes.memmove(dst, src, nbytes))

    def memset_d32(self, dst: int, value: int, count: int, stream) -> None:
        self._device_range(dst, 4 * count)
        words = np.full(count, value, dtype=np.uint32)  # held by the closure until it runs
        stream.queue.append(lambda: ctypes.memmove(dst, words.ctypes.data, 4 * count))

    def synchronize(self, stream) -> None:
        stream.synchronize()

    def _undefined(self, ops: np.ndarray) -> None:
        if self.fault is not None and self.on_fault is not None:
            self.on_fault(ops)
        if self.fault == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.fault == "hang":
            threading.Event().wait()
        elif self.fault == "illegal_address":
            raise CudaError("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered "
                            "(while waiting for a stream)", code=700, name="CUDA_ERROR_ILLEGAL_ADDRESS")

    def batch_decompress(self, params: np.ndarray, stream) -> None:
        """Check and queue one engine call (see the module docstring).

        Raises
        ------
        EngineCallError
            ``CUDA_ERROR_INVALID_VALUE`` with ``index``: an operation's
            algorithm is outside the mask, a size over the maximum length,
            or a pointer not HW-decompress capable. Nothing is queued then.
        """
        if params.dtype != PARAMS_DTYPE:
            raise TypeError(f"params dtype {params.dtype} is not CUmemDecompressParams")
        ops = params.copy()  # read when the call is made [doc]
        self.calls.append(ops)
        for k, rec in enumerate(ops):
            algo = int(rec["algo"])
            if algo not in _DECODERS or not algo & self.mask:  # INVALID_VALUE and errorIndex [doc]
                raise _invalid(f"algorithm {algo} is not in the mask {self.mask}", k)
            if rec["src_num_bytes"] > self.max_length or rec["dst_num_bytes"] > self.max_length:
                raise _invalid(f"sizes {rec['src_num_bytes']}, {rec['dst_num_bytes']} exceed {self.max_length}", k)
            src, slot = int(rec["src"]), int(rec["dst_act_bytes"])
            src_end, slot_end = self._capable_end(src), self._capable_end(slot)
            if src_end is None or src + int(rec["src_num_bytes"]) > src_end:  # HW-decompress capable [doc]
                raise _invalid("src is not HW-decompress capable memory", k)
            if self._capable_end(int(rec["dst"])) is None:
                raise _invalid("dst is not HW-decompress capable memory", k)
            if slot_end is None or slot + 4 > slot_end:
                raise _invalid("dstActBytes is not HW-decompress capable memory", k)
        stream.queue.append(lambda: self._run(ops))  # asynchronous, in stream order [doc]

    def _run(self, ops: np.ndarray) -> None:
        if self.busy_bytes_per_s:
            time.sleep(int(ops["src_num_bytes"].sum() + ops["dst_num_bytes"].sum()) / self.busy_bytes_per_s)
        if self.fault_on == "every call":
            self._undefined(ops)
        for rec in ops[::-1]:  # independent operations: no order [doc]
            src = ctypes.string_at(int(rec["src"]), int(rec["src_num_bytes"]))
            scratch = np.zeros(self.max_length, dtype=np.uint8)  # dstNumBytes is only a hint [doc, nvcomp]
            try:
                if self.fail_if is not None and self.fail_if(rec):
                    raise ValueError("fail_if")
                decode = _DECODERS[int(rec["algo"])]
                if self.misbehave == "lenient_lz4" and int(rec["algo"]) == 4:
                    decode = _lenient_lz4
                written = decode(src, scratch)
            except Exception:  # undefined on the engine; the slot is left alone [nvcomp, xgb zero it first]
                self.failed_operations += 1
                self._undefined(ops)
                if self.misbehave == "claim_hint":
                    ctypes.c_uint32.from_address(int(rec["dst_act_bytes"])).value = int(rec["dst_num_bytes"])
                continue
            dst = int(rec["dst"])
            extra = WRITE_PAST if self.misbehave == "write_past" else 0
            if dst + written + extra > self._capable_end(dst):
                raise CudaError("CUDA_ERROR_ILLEGAL_ADDRESS: the engine wrote past the end of dst's allocation "
                                "(while waiting for a stream)", code=700, name="CUDA_ERROR_ILLEGAL_ADDRESS")
            ctypes.memmove(dst, scratch.ctypes.data, written)
            if extra:
                ctypes.memset(dst + written, 0x5A, extra)
            if self.misbehave != "no_slot":
                ctypes.c_uint32.from_address(int(rec["dst_act_bytes"])).value = written


def hold_first_call(engine: StandinHwEngine, backend, callers: int, pages_per_caller: int,
                    timeout_s: float = 60.0) -> None:
    """Hold ``engine``'s first call until every caller's part is in it or queued behind it.

    ``backend`` is the ``GpuBackend`` over ``engine``; each of ``callers``
    submits one part of ``pages_per_caller`` pages (one engine operation
    each). With the first call held, how the batcher merges the queued parts
    no longer depends on thread timing: merged, they take one more call;
    not merged, one call each. Past ``timeout_s`` the call goes on (the
    test's count then fails rather than hangs).
    """
    call = engine.batch_decompress
    held: list[bool] = []

    def batch_decompress(params, stream):
        if not held:
            held.append(True)
            deadline = time.monotonic() + timeout_s
            while (len(params) // pages_per_caller + len(backend._batcher._queue) < callers
                   and time.monotonic() < deadline):
                time.sleep(0.001)
        return call(params, stream)

    engine.batch_decompress = batch_decompress


def hold_until_queued(backend, parts: int, on_hold=None, timeout_s: float = 60.0) -> None:
    """Make ``backend``'s batcher take its first call only once ``parts`` parts wait: that call merges them all.

    ``backend`` is the ``GpuBackend`` over the engine. The batcher's private
    ``_ready`` and ``_queue`` are wrapped (a rewrite of the batcher fails
    here, loudly); once the first call is taken it decides as before.
    ``on_hold()`` is called when the first part starts to wait. Past
    ``timeout_s`` the call goes with what waits (the test's counts then
    fail rather than hang).
    """
    batcher = backend._batcher
    ready = batcher._ready
    state: dict = {"since": None, "done": False}

    def held() -> bool:
        if not state["done"]:
            if state["since"] is None:
                state["since"] = time.monotonic()
                if on_hold is not None:
                    on_hold()
            if len(batcher._queue) < parts and time.monotonic() < state["since"] + timeout_s:
                return False
            state["done"] = True
        return ready()

    batcher._ready = held
