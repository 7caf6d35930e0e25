"""Driver calls saved by holding the context (the GPU service's threads hold it a call or a run at a time)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


class _Counting:
    """Wraps one driver function, counting the calls made on this thread.

    ``owner``: where callers look it up (``cuda.bindings.driver``, or
    numba-cuda's driver object, which keeps its own wrapper of each
    function once used).
    """

    def __init__(self, monkeypatch, name: str, owner=None):
        if owner is None:
            from cuda.bindings import driver as owner

        self.calls = 0
        self._thread = threading.get_ident()
        real = getattr(owner, name)

        def counted(*args):
            if threading.get_ident() == self._thread:
                self.calls += 1
            return real(*args)

        monkeypatch.setattr(owner, name, counted)


def test_numba_looks_the_context_up_once_inside_held_context(cuda_device, monkeypatch):
    from numba.cuda.cudadrv.driver import driver as numba_driver

    from dask_hwdecomp.gpu.cuda_jit import cuda, held_context

    block = cuda.device_array(4096, np.uint8)  # numba's context and its wrapper of the lookup exist
    lookups = _Counting(monkeypatch, "cuCtxGetCurrent", numba_driver)

    def views(n):
        return [block[i * 16 : (i + 1) * 16].view(np.uint32) for i in range(n)]

    outside = len(views(20))
    assert outside == 20 and lookups.calls >= 20  # a lookup per numba call
    lookups.calls = 0
    inside = held_context(views, 20)
    assert len(inside) == 20 and lookups.calls <= 1
    inside[3].copy_to_device(np.arange(4, dtype=np.uint32))
    assert block[48:64].view(np.uint32).copy_to_host().tolist() == [0, 1, 2, 3]


def test_device_held_makes_its_context_current_once(cuda_device, monkeypatch):
    from dask_hwdecomp.gpu.device import Device

    device = Device(0)
    try:
        device.activate()
        sets = _Counting(monkeypatch, "cuCtxSetCurrent")
        with device.held():
            for _ in range(10):
                device.activate()
            from cuda.bindings import driver

            err, current = driver.cuCtxGetCurrent()
            assert int(err) == 0 and int(current) == int(device.context)
        assert sets.calls == 1
        device.activate()  # outside the block it is made current again
        assert sets.calls == 2
    finally:
        device.close()


def test_ops_held_runs_the_function_with_the_context_current(cuda_device):
    from dask_hwdecomp.gpu.device import Device
    from dask_hwdecomp.gpu.ops import CudaOps

    device = Device(0)
    ops = CudaOps(device)
    stream = ops.new_stream()
    src = np.arange(256, dtype=np.uint8)
    out = np.zeros(256, np.uint8)

    def round_trip():
        block = ops.alloc_device(256, stream)
        try:
            ops.htod(block.ptr, src.ctypes.data, 256, stream)
            ops.dtoh(out.ctypes.data, block.ptr, 256, stream)
            ops.synchronize(stream)
        finally:
            block.close()
        return int(out.sum())

    try:
        assert ops.held(round_trip) == int(src.sum())
        assert (out == src).all()
    finally:
        stream.close()
        device.close()
