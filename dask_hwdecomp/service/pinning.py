"""When the GPU service page-locks its clients' shared segments: only while it is idle.

Registering host memory with the GPU (``cuMemHostRegister``) pins and maps
every page of the range, about 2.4 GB/s on the H200, and while it runs the
driver serves nothing else: measured at scale (``benchmarks/profile_timeline.py``),
a read whose new segments were registered while it ran took 2.0 to 2.7 s
where the same read over registered segments took 0.55 s, its decode
copies and kernels stalled behind the registrations. A segment not yet
registered still works: copies to and from it run at pageable speed.

So the service registers segments on one thread of its own (a
:class:`Pinner`), one segment at a time, and only once no run, measure or
write has been in flight for :data:`QUIET_S` (:class:`Activity`). A read
that arrives during a registration waits for that one segment at most.
Unregistering and unmapping are not held back: they run as soon as the
registration before them, if any, is done.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterator

__all__ = ["Activity", "Pinner", "QUIET_S"]

# How long the service must have been idle before a registration starts.
QUIET_S = 0.05


class Activity:
    """Work in flight in the service: how much, and since when there is none."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy = 0
        self._idle_since = time.monotonic()

    @contextlib.contextmanager
    def working(self) -> Iterator[None]:
        """Count the block as work in flight."""
        with self._lock:
            self._busy += 1
        try:
            yield
        finally:
            with self._lock:
                self._busy -= 1
                if not self._busy:
                    self._idle_since = time.monotonic()

    def quiet_for(self) -> float:
        """Seconds since the last work ended; 0 while some is in flight."""
        with self._lock:
            return 0.0 if self._busy else time.monotonic() - self._idle_since


class Pinner:
    """One thread that registers segments while the service is quiet and closes them in order.

    Parameters
    ----------
    activity : Activity, optional
        Registrations wait until it has been quiet for ``quiet_s``; None:
        they run at once (a service without other work, the tests).
    quiet_s : float
    """

    def __init__(self, activity: Activity | None = None, quiet_s: float = QUIET_S):
        self._activity = activity
        self._quiet_s = quiet_s
        self._cond = threading.Condition()
        self._pins: collections.deque = collections.deque()
        self._urgent: collections.deque = collections.deque()  # closes and markers, never held back
        self._thread: threading.Thread | None = None
        self._stopped = False

    def pin(self, work: Callable[[], None]) -> None:
        """Run ``work`` (a registration) once the service is quiet."""
        self._put(self._pins, work)

    def soon(self, work: Callable[[], None]) -> None:
        """Run ``work`` (an unregistration, an unmapping) as soon as what runs now is done."""
        self._put(self._urgent, work)

    def _put(self, where: collections.deque, work: Callable[[], None]) -> None:
        with self._cond:
            if self._stopped:
                raise RuntimeError("the pinner is stopped")
            where.append(work)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="hwdecomp-pinner", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _quiet(self) -> bool:
        return self._activity is None or self._activity.quiet_for() >= self._quiet_s

    def _next(self) -> Callable[[], None] | None:
        with self._cond:
            while True:
                if self._urgent:
                    return self._urgent.popleft()
                if self._pins and self._quiet():
                    return self._pins.popleft()
                if self._stopped:
                    return None
                # Poll while registrations wait for quiet; sleep while nothing is queued.
                self._cond.wait(timeout=self._quiet_s / 2 if self._pins else None)

    def _serve(self) -> None:
        while True:
            work = self._next()
            if work is None:
                return
            try:
                work()
            except Exception:  # one segment's trouble must not stop the others'
                pass

    def flush(self, pins: bool = True) -> None:
        """Wait until what is queued now has run (``pins``: the registrations too, quiet or not)."""
        done = threading.Event()
        with self._cond:
            if self._thread is None:
                return
            if pins:
                queued, self._pins = list(self._pins), collections.deque()
                self._urgent.extend(queued)
            self._urgent.append(done.set)
            self._cond.notify_all()
        done.wait()

    def stop(self) -> None:
        """Run what is urgent, drop waiting registrations, end the thread."""
        with self._cond:
            self._stopped = True
            self._pins.clear()
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
