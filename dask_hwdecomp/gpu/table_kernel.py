"""A numba-cuda kernel over a GPU call's inputs and a table the host made for the call, in its stream.

Work that rides along a call (a :class:`~.stream_runner.Beside`) may need
a kernel that reads the call's inputs where the runner placed them: a
:class:`TableKernel` uploads the host's table (int64 columns, one row per
thread, and a block of bytes), launches the kernel in the call's stream
over a window of the call's inputs, and copies its int64 result per row
back with the call's copies; the result is read after the call's one
synchronisation. Device and pinned scratch grow with the largest table and
are kept between calls.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .memory import DeviceArena, HostScratch

__all__ = ["TableKernel"]


class TableKernel:
    """Runs ``kernel[blocks, threads](window, *columns, data, out)`` in a call's stream.

    Parameters
    ----------
    ops : CudaOps or a stand-in
        With ``launch_kernel`` and ``device_array``.
    """

    def __init__(self, ops) -> None:
        self.ops = ops
        self._arena: DeviceArena | None = None
        self._scratch: HostScratch | None = None

    def queue(self, kernel, threads: int, window: int, window_bytes: int, columns: np.ndarray, data: np.ndarray,
              stream, block_per_row: bool = False) -> Callable[[], np.ndarray]:
        """Queue the upload, the launch (a thread per row, or a block) and the result's copy back.

        Parameters
        ----------
        kernel : numba-cuda kernel
        threads : int
            Threads per block.
        window, window_bytes : int
            The device bytes the kernel reads (the call's inputs), as a uint8 array.
        columns : numpy.ndarray of int64, shape (columns, rows)
        data : numpy.ndarray of uint8
            Bytes the rows share (non-empty).
        stream
            The call's stream.
        block_per_row : bool
            Launch a block of ``threads`` per row rather than a thread.

        Returns
        -------
        callable
            ``collect()``, after the stream's synchronisation: the int64 result per row.

        Raises
        ------
        CudaError
        """
        ops = self.ops
        c, m = columns.shape
        words = 8 * m * c
        nbytes = words + 8 * m + len(data)
        if self._arena is None or self._scratch is None:
            self._arena = DeviceArena(ops.alloc_device, stream)
            self._scratch = HostScratch(ops.alloc_host)
        dev = self._arena.ensure(nbytes)
        host_ptr, host_view = self._scratch.ensure(nbytes)
        host = np.frombuffer(host_view, np.uint8, count=nbytes)
        host[:words] = np.ascontiguousarray(columns, np.int64).reshape(-1).view(np.uint8)
        host[words + 8 * m :] = data
        ops.htod(dev, host_ptr, words, stream)
        ops.htod(dev + words + 8 * m, host_ptr + words + 8 * m, len(data), stream)
        cols = [ops.device_array(dev + 8 * m * k, m, np.int64) for k in range(c)]
        out = ops.device_array(dev + words, m, np.int64)
        args = (ops.device_array(window, window_bytes, np.uint8), *cols,
                ops.device_array(dev + words + 8 * m, len(data), np.uint8), out)
        ops.launch_kernel(kernel, m if block_per_row else -(-m // threads), threads, stream, *args)
        ops.dtoh(host_ptr + words, dev + words, 8 * m, stream)
        return lambda: host[words : words + 8 * m].view(np.int64).copy()

    def close(self) -> None:
        """Free the device and pinned scratch (the stream's work is done)."""
        arena, self._arena = self._arena, None
        scratch, self._scratch = self._scratch, None
        try:
            if arena is not None:
                arena.close()
        finally:
            if scratch is not None:
                scratch.close()
