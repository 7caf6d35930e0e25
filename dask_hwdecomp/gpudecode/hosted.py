"""The GPU decoder as the GPU service hosts it: one per service process.

A decode is two requests of one client (see
:mod:`dask_hwdecomp.gpudecode.tables`): *measure* uploads the chunks'
bytes from the client's shared memory into one device buffer and runs the
measuring kernels; *write*, once the client has placed the outputs, runs
the writing kernels into one device output buffer and copies it into the
client's shared memory, where the Arrow buffers will live. Between the
two, a :class:`PendingDecode` holds the device buffers; it is closed after
the write, or when the client discards it or leaves.

Each decode runs on a stream of its own taken from a small set, so that
the uploads, kernels and copies of concurrent clients overlap.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["HostedDecoder", "PendingDecode"]


@dataclass
class PendingDecode:
    """A measured decode waiting for its write: device buffers and stream."""

    measured: Any  # runner.Measured
    data: Any  # device array of the uploaded bytes
    stream: Any
    decoder: HostedDecoder
    held: list = field(default_factory=list)  # device memory of the decode: freed after its stream syncs
    pooled: bool = True  # the stream is the decoder's, given back on close
    closed: bool = field(default=False)

    @property
    def chunks(self) -> np.ndarray:
        """The measured chunk records."""
        return self.measured.chunks

    @property
    def pages(self) -> np.ndarray:
        """The measured page records (``error`` set where a page failed)."""
        return self.measured.pages

    def close(self) -> None:
        """Free the device buffers and give the stream back (idempotent)."""
        if self.closed:
            return
        self.closed = True
        self.stream.synchronize()
        self.measured.state.close()
        self.data = None
        self.held.clear()
        if self.pooled:
            self.decoder._give_back(self.stream)


def _simulated() -> bool:
    from numba import config

    return bool(config.ENABLE_CUDASIM)  # type: ignore[attr-defined]


def _use_pooled_memory(cuda) -> None:
    """Make numba allocate device memory from :class:`~.device_pool.PooledDeviceMemory` (not in the simulator)."""
    if _simulated():
        return
    from .device_pool import PooledDeviceMemory

    cuda.set_memory_manager(PooledDeviceMemory)


class HostedDecoder:
    """Runs decode plans on this process's GPU (numba-cuda kernels).

    Parameters
    ----------
    streams : int
        Streams decodes run on; a decode waits for a free one.

    Raises
    ------
    ImportError
        numba-cuda is not installed.
    """

    def __init__(self, streams: int = 4):
        from . import runner
        from .cuda_jit import cuda

        _use_pooled_memory(cuda)
        self._cuda = cuda
        self._runner = runner
        self._free: queue.Queue = queue.Queue()
        for _ in range(max(1, streams)):
            self._free.put(cuda.stream())
        self._lock = threading.Lock()
        # numba loads a kernel into the context on its first launch, and two
        # threads loading the same kernel at once break its bookkeeping
        # ("key already in dictionary: <CUlibrary>", seen on the H200): decodes
        # run one at a time until warm_up has launched every kernel.
        self._first_launches = threading.RLock()
        self._warm = False
        self.decodes = 0
        self.bytes_in = 0
        self.bytes_out = 0

    def _give_back(self, stream) -> None:
        self._free.put(stream)

    def measure(self, src: memoryview, ranges: np.ndarray, chunks: np.ndarray, pages: np.ndarray,
                data_bytes: int, stream=None) -> PendingDecode:
        """Upload ``ranges`` of ``src`` and measure; the caller closes the result.

        Parameters
        ----------
        src : memoryview
            The client's host buffer (shared memory, pinned by the service).
        ranges : ndarray of int64, shape (n, 3)
            Checked upload ranges (source offset, bytes, offset in the device copy).
        chunks, pages : ndarray
            Checked CHUNK and PAGE records.
        data_bytes : int
            Size of the device copy.
        stream : numba stream, optional
            A stream of the caller's (the warm-up's), instead of one of the
            decoder's (which it waits for).
        """
        from .device_hold import holding

        cuda = self._cuda
        own = stream is None
        if own:
            stream = self._free.get()
        held: list = []
        try:
            with holding(held), self._one_at_a_time_until_warm():
                data = cuda.device_array(max(1, data_bytes), dtype=np.uint8, stream=stream)
                host = np.frombuffer(src, dtype=np.uint8)
                for so, n, do in ranges.tolist():
                    if n:
                        data[do : do + n].copy_to_device(host[so : so + n], stream=stream)
                measured = self._runner.measure(data, chunks, pages, stream=stream)
        except BaseException:
            stream.synchronize()
            held.clear()
            if own:
                self._give_back(stream)
            raise
        with self._lock:
            self.decodes += 1
            self.bytes_in += int(data_bytes)
        return PendingDecode(measured, data, stream, self, held, pooled=own)

    def write(self, pending: PendingDecode, chunks: np.ndarray, dst: memoryview) -> np.ndarray:
        """Write the Arrow buffers of ``pending`` into ``dst``; returns the page records' errors.

        ``chunks`` are the measured records with the checked placement.
        """
        from .device_hold import holding

        cuda = self._cuda
        stream = pending.stream
        n = len(dst)
        with holding(pending.held), self._one_at_a_time_until_warm():
            out = cuda.device_array(max(1, n), dtype=np.uint8, stream=stream)
            errors = self._runner.write(pending.measured.state, chunks, out, stream=stream)
            if n and not np.any(errors):
                out[:n].copy_to_host(np.frombuffer(dst, dtype=np.uint8), stream=stream)
        stream.synchronize()
        with self._lock:
            self.bytes_out += n
        return errors

    def _one_at_a_time_until_warm(self):
        return contextlib.nullcontext() if self._warm else self._first_launches

    def warm_up(self) -> None:
        """Decode a small table of every output kind and encoding once.

        numba compiles a kernel on its first launch (or loads it from its
        disk cache); doing that here, when the service starts, keeps it out
        of the first read.
        """
        from .plan import plan_file
        from .tables import place_outputs
        from .warmup import warmup_files

        # A stream of its own: decodes waiting for the warm-up may hold every
        # stream of the decoder's.
        stream = self._cuda.stream()
        with self._first_launches:
            for data in warmup_files():
                plan = plan_file(data)
                pending = self.measure(memoryview(data), plan.ranges, plan.chunks, plan.pages, plan.data_bytes,
                                       stream=stream)
                try:
                    chunks = pending.chunks.copy()
                    out = np.empty(max(place_outputs(chunks), 1), np.uint8)
                    self.write(pending, chunks, out.data)
                finally:
                    pending.close()
            # numba's simulator swaps one process-wide module per launch:
            # there, decodes stay one at a time.
            self._warm = not _simulated()
        with self._lock:
            self.decodes = self.bytes_in = self.bytes_out = 0

    def stats(self) -> dict:
        """Counters: decodes, bytes uploaded, bytes of Arrow output written."""
        with self._lock:
            return {"decodes": self.decodes, "decode_bytes_in": self.bytes_in, "decode_bytes_out": self.bytes_out}
