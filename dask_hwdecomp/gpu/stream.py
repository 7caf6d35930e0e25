"""Explicit CUDA streams: created non-blocking, never the default stream."""

from __future__ import annotations

from .errors import check

__all__ = ["Stream"]


class Stream:
    """A non-blocking CUDA stream owned by this object.

    Created only through :meth:`dask_hwdecomp.gpu.ops.CudaOps.new_stream`,
    with the device's context current.

    Attributes
    ----------
    handle : int
        The ``CUstream`` as an integer (what nvCOMP and the engine take).

    Raises
    ------
    CudaError
    """

    def __init__(self):
        from cuda.bindings import driver

        self._stream = check(
            driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING), "creating a stream"
        )
        self.handle = int(self._stream)

    @property
    def native(self):
        """The ``cuda.bindings`` ``CUstream`` object."""
        return self._stream

    def synchronize(self) -> None:
        """Wait for all work queued on the stream (releases the GIL).

        Raises
        ------
        CudaError
            Including errors of earlier asynchronous work on the stream.
        """
        from cuda.bindings import driver

        check(driver.cuStreamSynchronize(self._stream), "waiting for a stream")

    def close(self) -> None:
        """Destroy the stream (idempotent)."""
        if self._stream is None:
            return
        from cuda.bindings import driver

        stream, self._stream = self._stream, None
        check(driver.cuStreamDestroy(stream), "destroying a stream")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
