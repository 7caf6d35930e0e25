"""CUDA events: a pair that times the work queued on a stream between them, and a fork of a stream.

:class:`EventPair` gives the GPU's own time of a call (profiling).
:class:`StreamFork` runs work on a side stream beside a main stream's: the
side starts after what the main stream had queued at the fork, and the
main stream's work queued after the join waits for the side's.
"""

from __future__ import annotations

from .errors import check
from .stream import Stream

__all__ = ["EventPair", "StreamFork"]


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


class StreamFork:
    """A side stream that forks from a main stream and joins it again, by two events (no timing).

    Owns ``side`` (its stream) and the events; created with the device's
    context current. Used by one thread: :meth:`begin` and :meth:`end`
    alternate on the same main stream.

    Parameters
    ----------
    side : Stream
        Owned: closed by :meth:`close`.

    Raises
    ------
    CudaError
        An event cannot be created.
    """

    def __init__(self, side: Stream) -> None:
        from cuda.bindings import driver

        flags = driver.CUevent_flags.CU_EVENT_DISABLE_TIMING
        self.side = side
        self._forked = check(driver.cuEventCreate(flags), "creating an event")
        try:
            self._joined = check(driver.cuEventCreate(flags), "creating an event")
        except BaseException:
            check(driver.cuEventDestroy(self._forked), "destroying an event")
            raise

    def begin(self, main: Stream) -> None:
        """The side stream's next work waits for everything queued on ``main`` so far."""
        from cuda.bindings import driver

        check(driver.cuEventRecord(self._forked, main.native), "recording an event")
        check(driver.cuStreamWaitEvent(self.side.native, self._forked, 0), "waiting for an event")

    def end(self, main: Stream) -> None:
        """``main``'s next work waits for everything queued on the side stream so far."""
        from cuda.bindings import driver

        check(driver.cuEventRecord(self._joined, self.side.native), "recording an event")
        check(driver.cuStreamWaitEvent(main.native, self._joined, 0), "waiting for an event")

    def close(self) -> None:
        """Destroy the events and the side stream (its work done; idempotent)."""
        from cuda.bindings import driver

        events, self._forked, self._joined = (self._forked, self._joined), None, None
        try:
            for event in events:
                if event is not None:
                    check(driver.cuEventDestroy(event), "destroying an event")
        finally:
            self.side.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
