"""A Zstd launcher as lenient as nvCOMP 6.0, on the engine stand-in's host memory.

nvCOMP decodes a Huffman literal stream that needs more bits than it holds
with status 0, reading zeros below the stream's start (H100: it equals
such a zero-fill model on 55 of 55 crafted frames, and libzstd on under-read
frames and controls). :class:`LenientZstdLauncher` does the same with the
pure-Python decoder ``zstd_trace`` in its zero-fill mode, in stream order on
:class:`~standin_hwengine.StandinHwEngine`'s queued streams, so a
:class:`~dask_hwdecomp.decompress.gpu_backend.GpuBackend` named ``nvcomp``
runs in CI with the stream walk it needs. A frame the decoder cannot
decode fails with a status, as nvCOMP reports one.
"""

from __future__ import annotations

import ctypes

import numpy as np
from zstd_trace import Decoder

from dask_hwdecomp.gpu.stream_runner import Prepared
from dask_hwdecomp.jobs import Algo

from standin_hwengine import StandinHwEngine


class KernelStandin(StandinHwEngine):
    """:class:`StandinHwEngine`'s memory and streams, with ``launch_kernel`` and ``device_array``."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.launches = 0

    def device_array(self, address: int, count: int, dtype):
        nbytes = count * np.dtype(dtype).itemsize
        self._device_range(address, nbytes)
        return np.frombuffer((ctypes.c_uint8 * nbytes).from_address(address), np.uint8).view(dtype)

    def launch_kernel(self, kernel, blocks: int, threads: int, stream, *args) -> None:
        def run() -> None:
            self.launches += 1
            kernel[blocks, threads](*args)

        stream.queue.append(run)


class _Fork:
    """A stand-in's stream fork: the side stream's work runs where the join puts it in the main stream.

    That is later than a GPU would run it (it may start at the fork), never
    earlier: what depends on the join sees the side's work done.
    """

    def __init__(self, side):
        self.side = side
        self.begun = self.ended = 0

    def begin(self, main) -> None:
        self.begun += 1

    def end(self, main) -> None:
        self.ended += 1
        main.queue.append(self.side.synchronize)

    def close(self) -> None:
        self.side.close()


class ForkingKernelStandin(KernelStandin):
    """:class:`KernelStandin` that also forks streams (``stream_fork``), recording each launch's stream."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.forks: list[_Fork] = []
        self.launch_streams: list = []

    def stream_fork(self) -> _Fork:
        fork = _Fork(self.new_stream())
        self.forks.append(fork)
        return fork

    def launch_kernel(self, kernel, blocks: int, threads: int, stream, *args) -> None:
        self.launch_streams.append(stream)
        super().launch_kernel(kernel, blocks, threads, stream, *args)


class LenientZstdLauncher:
    """nvCOMP's Zstd launch as seen on the H100: over-read Huffman streams read zeros.

    Parameters
    ----------
    walks : bool
        ``walks_huffman_streams``, as nvCOMP's launcher says (False: a
        backend without the walk, to show what it misses).
    """

    algorithms = frozenset({Algo.ZSTD})
    max_job_bytes = None
    max_input_bytes = (1 << 31) - 1
    contains_failures = True
    guard_bytes = 0
    verifies_zstd_checksum = False

    def __init__(self, walks: bool = True):
        self.walks_huffman_streams = walks
        self.decoded = 0

    def input_align(self, algo) -> int:
        return 1

    def order(self, algo) -> int:
        return 0

    @staticmethod
    def status_text(status: int) -> str:
        return f"zstd stand-in status {status}"

    def prepare(self, rows: np.ndarray, stream) -> Prepared:
        return Prepared(0, 0, rows)

    def launch(self, rows, stream, src_ptrs, dst_ptrs, scratch: int, host):
        actual = np.zeros(len(rows), np.uint64)
        status = np.zeros(len(rows), np.int32)

        def run() -> None:
            for k in range(len(rows)):
                frame = ctypes.string_at(int(src_ptrs[k]), int(rows["src_size"][k]))
                try:
                    out = Decoder(frame, verbose=False, overread="zeros").decode()
                except Exception:  # corrupt for the decoder: a status, as nvCOMP gives one
                    status[k] = 1
                    continue
                self.decoded += 1
                ctypes.memmove(int(dst_ptrs[k]), out, min(len(out), int(rows["dst_size"][k])))
                actual[k] = len(out)

        stream.queue.append(run)
        return lambda: (actual, status)
