"""A timeline of where a process's time goes, for profiling; off unless asked for.

With ``HWDECOMP_TIMELINE=<directory>`` set in a process's environment, the
spans recorded here (:func:`span`, :func:`record`) are written as JSON lines
to ``<directory>/timeline-<pid>.jsonl``: one object per span, ``{"k": kind,
"t0": start, "t1": end, "th": thread name, ...fields}``; a :func:`span` also
has ``cpu_s``, the CPU seconds its thread spent inside it (wall time past
that was spent waiting: for the GIL, a lock, the GPU or the network). Times are
``time.perf_counter()``, which on Linux is the system's monotonic clock, so
spans of several processes of one machine (the GPU service and its
readers) share one time axis.

Readers start the GPU service with their environment, so setting the
variable where a cluster's workers start profiles the service too
(``benchmarks/profile_timeline.py`` reads the files back).

A span measured by its caller gets ``cpu_s`` too when the caller read
:func:`thread_cpu` at its start and passes it to :func:`record`.

Unset, :func:`span` returns a shared no-op context manager, :func:`record`
returns at once and :func:`thread_cpu` reads no clock: the instrumentation
costs a dictionary lookup.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["ENV", "enabled", "span", "record", "thread_cpu", "flush"]

ENV = "HWDECOMP_TIMELINE"

# Spans held before a write between the writer's once-a-second flushes.
_FLUSH_EVERY = 4096


class _Writer:
    """Buffered JSON-lines output of one process (thread-safe)."""

    def __init__(self, directory: str):
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.path = os.path.join(directory, f"timeline-{os.getpid()}.jsonl")
        self._lock = threading.Lock()
        self._file_lock = threading.Lock()  # whole rows, in order, from any flushing thread
        self._rows: list[dict] = []
        # Written at least every second, so a profiler reads a live service's spans.
        threading.Thread(target=self._flush_often, name="hwdecomp-timeline", daemon=True).start()

    def _flush_often(self) -> None:
        while True:
            time.sleep(1.0)
            self.flush()
            if _writer is not self:  # the process records elsewhere now
                return

    def add(self, row: dict) -> None:
        with self._lock:
            self._rows.append(row)
            full = len(self._rows) >= _FLUSH_EVERY
        if full:
            self.flush()

    def flush(self) -> None:
        with self._file_lock:
            with self._lock:
                rows, self._rows = self._rows, []
            if not rows:
                return
            with open(self.path, "a") as f:
                f.write("".join(json.dumps(row, default=str) + "\n" for row in rows))


_writer: _Writer | None = None
_writer_pid = -1
_lock = threading.Lock()


def _current() -> _Writer | None:
    global _writer, _writer_pid
    directory = os.environ.get(ENV)
    if not directory:
        return None
    writer = _writer
    # first use, a forked child (a file of its own), or the variable set to another directory
    if _writer_pid != os.getpid() or writer is None or writer.directory != directory:
        with _lock:
            if _writer_pid != os.getpid() or _writer is None or _writer.directory != directory:
                if _writer is not None and _writer_pid == os.getpid():
                    _writer.flush()  # the spans so far go to the directory they were recorded for
                _writer, _writer_pid = _Writer(directory), os.getpid()
            writer = _writer
    return writer


def enabled() -> bool:
    """Whether this process records a timeline."""
    return bool(os.environ.get(ENV))


def thread_cpu() -> float | None:
    """This thread's CPU seconds so far (``time.thread_time()``) while a timeline is recorded, else None.

    Unset, no clock is read. Pass it to :func:`record` on the same thread.
    """
    return time.thread_time() if os.environ.get(ENV) else None


def record(kind: str, t0: float, t1: float, cpu_since: float | None = None, **fields: Any) -> None:
    """Add one span measured by the caller (``time.perf_counter()`` values).

    ``cpu_since``: what :func:`thread_cpu` gave at the span's start, on
    this thread; the span then has ``cpu_s``, the thread's CPU seconds
    since.
    """
    writer = _current()
    if writer is not None:
        if cpu_since is not None:
            fields["cpu_s"] = time.thread_time() - cpu_since
        writer.add({"k": kind, "t0": t0, "t1": t1, "th": threading.current_thread().name, **fields})


@contextlib.contextmanager
def _span(writer: _Writer, kind: str, fields: dict) -> Iterator[dict]:
    t0, c0 = time.perf_counter(), time.thread_time()
    try:
        yield fields
    finally:
        writer.add({"k": kind, "t0": t0, "t1": time.perf_counter(), "th": threading.current_thread().name,
                    "cpu_s": time.thread_time() - c0, **fields})


# Unset: one shared no-op; what a caller writes into its dictionary is dropped.
_NOTHING: contextlib.nullcontext[dict] = contextlib.nullcontext({})


def span(kind: str, **fields: Any):
    """A context manager recording the time spent inside it as one span of ``kind``.

    It yields the span's field dictionary, so a caller can add what it
    learns inside (``with span("run") as s: ...; s["pages"] = n``).
    """
    writer = _current()
    if writer is None:
        return _NOTHING
    return _span(writer, kind, fields)


def flush() -> None:
    """Write the spans held so far (also done at exit)."""
    writer = _writer if _writer_pid == os.getpid() else None
    if writer is not None:
        writer.flush()


atexit.register(flush)
