"""Numba compiles on the GPU service's serving threads are logged, naming the function."""

from __future__ import annotations

import logging
import threading

from numba import njit

from dask_hwdecomp.service.compile_watch import watch_compiles


def _compile_on(thread_name: str, value: int) -> None:
    @njit
    def fresh(x):  # a new function each call: always compiled, never from a cache
        return x + 1

    t = threading.Thread(target=fresh, args=(value,), name=thread_name)
    t.start()
    t.join()


def test_a_compile_inside_a_request_is_a_warning_naming_the_function(caplog):
    watch_compiles()
    watch_compiles()  # once per process, however often called
    with caplog.at_level(logging.WARNING, logger="dask_hwdecomp.service.compile_watch"):
        _compile_on("hwdecomp-run-4242-7", 1)
        _compile_on("hwdecomp-decoder-0", 2)
        _compile_on("hwdecomp-stream-3", 3)
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 3, warned
    assert "_compile_on.<locals>.fresh(int64,) on hwdecomp-run-4242-7 inside a request" in warned[0]
    assert "on hwdecomp-decoder-0 inside a request" in warned[1] and "on hwdecomp-stream-3" in warned[2]


def test_a_compile_of_a_warm_up_or_outside_the_service_is_not_logged(caplog):
    watch_compiles()
    with caplog.at_level(logging.DEBUG, logger="dask_hwdecomp.service.compile_watch"):
        _compile_on("hwdecomp-decoder-warm-up", 1)
        _compile_on("hwdecomp-run-steps", 2)
        _compile_on("MainThread-like", 3)
    assert caplog.records == []
