"""A stand-in of the CUDA hardware decompression engine, on host memory.

Nobody here has a GPU with the engine (Blackwell), so CI checks the
``hardware`` backend against this stand-in of the documented contract of
``cuMemBatchDecompressAsync`` (gpu-facts.md §1): it reads the 64-byte params
records (``src_num_bytes``, ``dst_num_bytes``, ``dst_act_bytes`` pointer,
``src``, ``dst``, ``algo``), decompresses raw deflate, raw snappy and LZ4
blocks with cramjam, writes ``dst`` and ``*dst_act_bytes`` (a u32), and
raises the documented error (``CUDA_ERROR_NOT_SUPPORTED``, 801) for an
algorithm bit outside the mask or a size over the maximum length. "Device"
memory is host memory (numpy arrays); copies are memmoves; streams are
synchronous. It has the methods of :class:`dask_hwdecomp.gpu.engine.EngineDriver`.

The batch's CRC-32s (gzip trailers, Parquet page CRCs) run through the ops
object's ``checksummer``: on a real GPU nvCOMP's ``nvcompBatchedCRC32Async``,
here :class:`StandinCrc`, the same contract on host memory (zlib's CRC-32 of
each chunk named by the device arrays of pointers and sizes). It records
every chunk it hashed, so tests can check which bytes the backend checks.

Corrupt input is undefined behaviour on the engine. By default the stand-in
reports 0 bytes for such a page; ``fault`` makes it do what nvCOMP 6.0 was
seen to do on the H200 instead (gpu-facts.md §2), to test the GPU sidecar:
``"die"`` (the process is gone, as when a lost context ends the sidecar),
``"hang"`` (the call never returns), ``"illegal_address"`` (the call raises
``CUDA_ERROR_ILLEGAL_ADDRESS``). ``fault_on="every call"`` models a broken
device: it faults on valid pages too.
"""

from __future__ import annotations

import ctypes
import os
import zlib
import signal
import threading

import cramjam
import numpy as np

from dask_hwdecomp.gpu.check import CudaError
from dask_hwdecomp.gpu.engine import PARAMS_DTYPE
from dask_hwdecomp.gpu.ops import DeviceAllocation, HostAllocation

_DECODERS = {
    1: cramjam.deflate.decompress_into,
    2: cramjam.snappy.decompress_raw_into,
    4: cramjam.lz4.decompress_block_into,
}


class _Stream:
    handle = 0

    def synchronize(self):
        pass

    def close(self):
        pass


def _not_supported(what: str) -> CudaError:
    return CudaError(f"CUDA_ERROR_NOT_SUPPORTED: {what}", code=801, name="CUDA_ERROR_NOT_SUPPORTED")


class StandinCrc:
    """``nvcompBatchedCRC32Async``'s contract (CRC-32/PKZIP, one segment) on host memory.

    ``chunks`` lists every ``(address, bytes)`` hashed, in call order.
    """

    def __init__(self):
        self.chunks: list[tuple[int, bytes]] = []
        self.calls = 0

    def crc32_batch(self, ptrs: int, sizes: int, count: int, out: int, max_bytes: int, stream) -> None:
        self.calls += 1
        addrs = np.ctypeslib.as_array((ctypes.c_uint64 * count).from_address(ptrs))
        lens = np.ctypeslib.as_array((ctypes.c_uint64 * count).from_address(sizes))
        results = np.ctypeslib.as_array((ctypes.c_uint32 * count).from_address(out))
        for k in range(count):
            assert lens[k] <= max_bytes, "max_bytes must bound every chunk"
            data = ctypes.string_at(int(addrs[k]), int(lens[k]))
            self.chunks.append((int(addrs[k]), data))
            results[k] = zlib.crc32(data)


class StandinEngine:
    """The engine contract on host memory.

    Parameters
    ----------
    mask : int
        ``MEM_DECOMPRESS_ALGORITHM_MASK`` to report (DEFLATE=1, SNAPPY=2, LZ4=4).
    max_length : int
        ``MEM_DECOMPRESS_MAXIMUM_LENGTH`` to report and enforce.
    """

    params_dtype = PARAMS_DTYPE
    entry_point = "stand-in"

    def __init__(self, mask: int = 7, max_length: int = 4 << 20, fault: str | None = None,
                 fault_on: str = "corrupt"):
        if fault not in (None, "die", "hang", "illegal_address") or fault_on not in ("corrupt", "every call"):
            raise ValueError(f"unknown fault {fault!r} on {fault_on!r}")
        self.mask = mask
        self.max_length = max_length
        self.fault = fault
        self.fault_on = fault_on
        self.registered: dict[int, int] = {}
        self._live: dict[int, np.ndarray] = {}
        self.calls: list[np.ndarray] = []  # copies of every params array submitted
        self.device_allocations = 0
        self.checksummer = StandinCrc()

    def describe(self) -> str:
        return "stand-in engine"

    def activate(self) -> None:
        pass

    def new_stream(self):
        return _Stream()

    def _alloc(self, nbytes: int, cls):
        arr = np.zeros(nbytes, dtype=np.uint8)
        ptr = int(arr.ctypes.data)
        self._live[ptr] = arr
        return cls(ptr, nbytes, lambda p: self._live.pop(p))

    def alloc_device(self, nbytes: int, stream) -> DeviceAllocation:
        self.device_allocations += 1
        return self._alloc(nbytes, DeviceAllocation)

    def alloc_host(self, nbytes: int) -> HostAllocation:
        return self._alloc(nbytes, HostAllocation)

    def register_host(self, ptr: int, nbytes: int) -> HostAllocation:
        """Record a registration (host memory is already "device" memory here)."""
        self.registered[ptr] = nbytes
        return HostAllocation(ptr, nbytes, lambda p: self.registered.pop(p))

    def _undefined(self) -> None:
        if self.fault == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.fault == "hang":
            threading.Event().wait()
        elif self.fault == "illegal_address":
            raise CudaError("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered "
                            "(while waiting for a stream)", code=700, name="CUDA_ERROR_ILLEGAL_ADDRESS")

    def htod(self, dst: int, src: int, nbytes: int, stream) -> None:
        ctypes.memmove(dst, src, nbytes)

    def dtoh(self, dst: int, src: int, nbytes: int, stream) -> None:
        ctypes.memmove(dst, src, nbytes)

    def synchronize(self, stream) -> None:
        pass

    def batch_decompress(self, params: np.ndarray, stream) -> None:
        """The documented contract of one engine call (synchronous here).

        Raises
        ------
        CudaError
            ``CUDA_ERROR_NOT_SUPPORTED`` (801): an algorithm outside the mask
            or a size over the maximum length. Nothing is decompressed then.
        """
        if params.dtype != PARAMS_DTYPE:
            raise TypeError(f"params dtype {params.dtype} is not CUmemDecompressParams")
        self.calls.append(params.copy())
        for rec in params:
            algo = int(rec["algo"])
            if algo not in _DECODERS or not algo & self.mask:
                raise _not_supported(f"algorithm {algo} is not in the mask {self.mask}")
            if rec["src_num_bytes"] > self.max_length or rec["dst_num_bytes"] > self.max_length:
                raise _not_supported(f"sizes {rec['src_num_bytes']}, {rec['dst_num_bytes']} exceed {self.max_length}")
        if self.fault_on == "every call":
            self._undefined()
        for rec in params:
            src = ctypes.string_at(int(rec["src"]), int(rec["src_num_bytes"]))
            out = np.zeros(int(rec["dst_num_bytes"]), dtype=np.uint8)
            try:
                written = _DECODERS[int(rec["algo"])](src, out)
            except Exception:  # corrupt input: undefined on the engine; report 0 bytes
                self._undefined()
                written = 0
            ctypes.memmove(int(rec["dst"]), out.ctypes.data, min(written, len(out)))
            ctypes.c_uint32.from_address(int(rec["dst_act_bytes"])).value = written
