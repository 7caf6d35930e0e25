"""A pair of CUDA events: the GPU's own time for the work queued on a stream between them."""

from __future__ import annotations

from .errors import check
from .stream import Stream

__all__ = ["EventPair"]


class EventPair:
    """Two timing events, reused call after call by one thread (profiling).

    :meth:`start` before a call's first operation on its stream,
    :meth:`stop` after its last; once the stream is synchronised,
    :meth:`seconds` is the GPU's time from one to the other: its copies
    and kernels, and any time the stream sat idle waiting for the host to
    queue them. Created with the device's context current.

    Raises
    ------
    CudaError
        An event cannot be created.
    """

    def __init__(self) -> None:
        from cuda.bindings import driver

        self._start = check(driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DEFAULT), "creating an event")
        try:
            self._stop = check(driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DEFAULT), "creating an event")
        except BaseException:
            check(driver.cuEventDestroy(self._start), "destroying an event")
            raise

    def start(self, stream: Stream) -> None:
        """Record the first event on ``stream`` (after what is queued there so far)."""
        from cuda.bindings import driver

        check(driver.cuEventRecord(self._start, stream.native), "recording an event")

    def stop(self, stream: Stream) -> None:
        """Record the second event on ``stream``."""
        from cuda.bindings import driver

        check(driver.cuEventRecord(self._stop, stream.native), "recording an event")

    def seconds(self) -> float:
        """The GPU's seconds from :meth:`start` to :meth:`stop` (their stream synchronised).

        Raises
        ------
        CudaError
            An event was not recorded or has not completed.
        """
        from cuda.bindings import driver

        return float(check(driver.cuEventElapsedTime(self._start, self._stop), "timing a call")) / 1e3

    def close(self) -> None:
        """Destroy both events (idempotent)."""
        from cuda.bindings import driver

        events, self._start, self._stop = (self._start, self._stop), None, None
        for event in events:
            if event is not None:
                check(driver.cuEventDestroy(event), "destroying an event")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
