"""Numba compiling inside the GPU service, logged with the function and the seconds.

Every compiled step the service runs is compiled (or loaded from numba's
cache) before a request needs it: the run's host steps by
:func:`~dask_hwdecomp.service.server.load_run_steps`, a backend's own steps
when it is created, the decoder's kernels by its warm-up. A step that none
of them compiles is compiled by the first request that runs it, inside that
request's deadline: seconds on a cold cache, so the reader kills the
service as hung before numba writes its cache, and every fresh service
again (a Zstd stream search once did that on a bare GPU machine). So the
service logs each compile of host code (numba's ``njit``) that happens on a
thread serving requests as a warning naming the function, its argument
types and its seconds: the service's log then says which warm-up misses
it. A load from numba's cache is not a compile and is not logged.
"""

from __future__ import annotations

import logging
import re
import threading
import time

from numba.core import event

__all__ = ["watch_compiles", "SERVING_THREADS"]

logger = logging.getLogger(__name__)

# The service's threads that serve requests (their deadlines run meanwhile):
# a decompression run, a decode request, a batcher's stream, a decoder runner.
SERVING_THREADS = re.compile(r"hwdecomp-(run-\d+-\d+|decode-\d+-\d+|stream-\d+|decoder-\d+)$")


class _Watch(event.Listener):
    """Logs each compile of a serving thread when it ends (compiles nest: a callee inside its caller)."""

    def __init__(self) -> None:
        self._began = threading.local()

    def on_start(self, ev: event.Event) -> None:
        stack = getattr(self._began, "stack", None)
        if stack is None:
            stack = self._began.stack = []
        stack.append(time.perf_counter())

    def on_end(self, ev: event.Event) -> None:
        stack = getattr(self._began, "stack", None)
        began = stack.pop() if stack else time.perf_counter()
        name = threading.current_thread().name
        if not SERVING_THREADS.match(name):
            return
        data = ev.data if isinstance(ev.data, dict) else {}
        func = getattr(data.get("dispatcher"), "py_func", None)
        what = f"{func.__module__}.{func.__qualname__}" if func is not None else "a function"
        logger.warning("numba compiled %s%s on %s inside a request (%.2f s): no warm-up compiles it, and on a "
                       "cold cache its request can pass its deadline", what, tuple(data.get("args", ())), name,
                       time.perf_counter() - began)


_installed = False
_lock = threading.Lock()


def watch_compiles() -> None:
    """Log, from now on in this process, every numba compile of host code on a serving thread (once per process).

    Host code only: numba-cuda's kernels are compiled by the warm-ups named
    above, and numba-cuda keeps events of its own that take no listener
    of numba's kind.
    """
    global _installed
    with _lock:
        if not _installed:
            event.register("numba:compile", _Watch())
            _installed = True
