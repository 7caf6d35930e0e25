"""Launches packed here and queued with the GIL kept give what numba's own launches give (gpu/launch.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def _kernels():
    from dask_hwdecomp.gpu.cuda_jit import cuda

    @cuda.jit
    def mixed(out, x, y, scale, shift, flag):
        i = cuda.grid(1)
        if i < out.shape[0]:
            v = x[i] * scale + y[i % y.shape[0]]
            out[i] = v + shift if flag else v - shift

    @cuda.jit
    def grid2(out):
        i, j = cuda.grid(2)
        if i < out.shape[0] and j < out.shape[1]:
            out[i, j] = i * 100 + j

    return cuda, mixed, grid2


class _CountingHeld:
    def __init__(self, monkeypatch):
        from dask_hwdecomp.gpu import driver_held

        self.calls = 0
        real = driver_held.launch

        def counted(*args):
            self.calls += 1
            return real(*args)

        monkeypatch.setattr(driver_held, "launch", counted)


def test_held_launches_match_numbas_and_are_taken(cuda_device, monkeypatch):
    from dask_hwdecomp.gpu import launch as launching
    from dask_hwdecomp.gpu.cuda_jit import held_context

    cuda, mixed, grid2 = _kernels()
    assert launching.held_launches()
    held = _CountingHeld(monkeypatch)
    stream = cuda.stream()
    x = cuda.to_device(np.arange(1000, dtype=np.int64) - 500, stream=stream)
    y = cuda.to_device(np.arange(7, dtype=np.int32), stream=stream)
    mine = cuda.device_array(1000, np.int64, stream=stream)
    theirs = cuda.device_array(1000, np.int64, stream=stream)
    for scale, shift, flag in ((3, np.int64(-5), True), (-2, np.int64(9), False), (1, np.int64(0), True)):
        held_context(launching.launch, mixed, 8, 128, stream, mine, x, y, scale, shift, flag)
        mixed[8, 128, stream](theirs, x, y, scale, shift, flag)
        stream.synchronize()
        assert (mine.copy_to_host() == theirs.copy_to_host()).all()
    assert held.calls >= 2  # the first launch of those types was numba's (it compiles); the others held
    out = cuda.device_array((13, 17), np.int32)
    launching.launch(grid2, (2, 3), (8, 8), 0, out)  # numba's the first time
    launching.launch(grid2, (2, 3), (8, 8), 0, out)
    cuda.synchronize()
    expected = np.add.outer(np.arange(13) * 100, np.arange(17))
    assert (out.copy_to_host() == expected).all()


def test_a_thread_with_no_context_current_gets_numbas_launch(cuda_device):
    from dask_hwdecomp.gpu import launch as launching

    cuda, mixed, _ = _kernels()
    x = cuda.to_device(np.arange(10, dtype=np.int64))
    y = cuda.to_device(np.ones(10, np.int32))
    out = cuda.device_array(10, np.int64)
    launching.launch(mixed, 1, 32, 0, out, x, y, 2, np.int64(1), True)  # compiled here, on this thread
    cuda.synchronize()
    box: dict = {}

    def other():
        try:
            launching.launch(mixed, 1, 32, 0, out, x, y, 3, np.int64(0), True)
            cuda.synchronize()
        except BaseException as exc:  # reported to the test's thread
            box["error"] = exc

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert "error" not in box, box.get("error")
    assert out.copy_to_host().tolist() == [3 * i + 1 for i in range(10)]
