"""The decoder's GPU resources come from ``gpu/``: its streams owned there, numba's memory from the pool.

A stream of :class:`~dask_hwdecomp.gpu.numba_streams.NumbaStreams` is a
non-default driver stream that numba launches and copies on, until the
owner closes it; numba's context, whichever kernel created it, allocates
from :class:`~dask_hwdecomp.gpu.device_pool.PooledDeviceMemory`.
"""

from __future__ import annotations

import numpy as np
import pytest

from dask_hwdecomp.gpu.cuda_jit import cuda
from dask_hwdecomp.gpu.numba_streams import NumbaStreams

pytestmark = pytest.mark.gpu


@cuda.jit
def _add_one(values):  # pragma: no cover - device
    i = cuda.grid(1)
    if i < values.shape[0]:
        values[i] += 1


def test_numba_runs_on_streams_the_package_owns_and_allocates_from_its_pool(cuda_device):
    from dask_hwdecomp.gpu.device_pool import PooledDeviceMemory  # numba's driver: not under the simulator

    owner = NumbaStreams()
    try:
        stream = owner.new()
        assert int(stream.handle.value if hasattr(stream.handle, "value") else stream.handle) != 0  # never the default
        assert isinstance(cuda.current_context().memory_manager, PooledDeviceMemory)
        values = cuda.to_device(np.arange(1000, dtype=np.int64), stream=stream)
        _add_one[4, 256, stream](values)
        assert (values.copy_to_host(stream=stream) == np.arange(1, 1001)).all()
        stream.synchronize()
    finally:
        owner.close()
    with pytest.raises(RuntimeError, match="closed"):
        owner.new()
    owner.close()  # idempotent
