"""Streams of this package for numba's launches: created and closed here, lent to numba.

The GPU decoder's kernels, copies and events take numba stream objects.
Made by ``numba.cuda.stream()`` their lifetime would be numba's objects'
(freed when collected); here each is a :class:`~.stream.Stream`
(non-blocking, never the default stream) owned by a :class:`NumbaStreams`,
handed to numba with ``numba.cuda.external_stream``, and closed with its
owner. Under numba's CUDA simulator (no driver) the streams are the
simulator's.
"""

from __future__ import annotations

import threading
from typing import Any

from .cuda_jit import cuda
from .simulator import simulated

__all__ = ["NumbaStreams"]


class NumbaStreams:
    """Streams on device 0 (its primary context retained until :meth:`close`), for numba.

    Raises
    ------
    CudaError
        The device cannot be opened.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owned: list = []
        self._closed = False
        self._device = None
        if not simulated():
            from .device import Device

            self._device = Device(0)

    def new(self) -> Any:
        """A new stream as numba takes it; it lives until :meth:`close`.

        Raises
        ------
        RuntimeError
            Closed already.
        CudaError
        """
        if self._device is None:
            return cuda.stream()
        from .stream import Stream

        with self._lock:
            if self._closed:
                raise RuntimeError("the streams are closed")
            self._device.activate()  # the thread's current context: the stream's, and numba's
            stream = Stream()
            self._owned.append(stream)
        return cuda.external_stream(stream.handle)

    def close(self) -> None:
        """Wait for every stream's work, close them, release the device (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            owned, self._owned = self._owned, []
        try:
            for stream in owned:
                stream.synchronize()
                stream.close()
        finally:
            if self._device is not None:
                self._device.close()
