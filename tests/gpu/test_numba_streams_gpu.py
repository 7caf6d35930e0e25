"""The decoder's GPU resources come from ``gpu/``: its streams owned there, numba's memory from the pool.

A stream of :class:`~dask_hwdecomp.gpu.numba_streams.NumbaStreams` is a
non-default driver stream that numba launches and copies on, until the
owner closes it; numba's context, whichever kernel created it, allocates
from :class:`~dask_hwdecomp.gpu.device_pool.PooledDeviceMemory`.
"""

from __future__ import annotations

import numpy as np
import pytest

from dask_hwdecomp.gpu.block_checks import BLOCK_OK, WALK_SNAPPY, check_blocks
from dask_hwdecomp.gpu.cuda_jit import cuda
from dask_hwdecomp.gpu.numba_streams import NumbaStreams

from block_cases import compress

pytestmark = pytest.mark.gpu


def test_numba_runs_on_streams_the_package_owns_and_allocates_from_its_pool(cuda_device):
    from dask_hwdecomp.gpu.device_pool import PooledDeviceMemory  # numba's driver: not under the simulator

    owner = NumbaStreams()
    try:
        stream = owner.new()
        assert int(stream.handle.value if hasattr(stream.handle, "value") else stream.handle) != 0  # never the default
        assert isinstance(cuda.current_context().memory_manager, PooledDeviceMemory)
        data = b"numba on a gpu/ stream " * 200
        block = np.frombuffer(compress("snappy", data), np.uint8)
        fault = cuda.to_device(np.full(1, -1, np.int32), stream=stream)
        check_blocks(WALK_SNAPPY, cuda.to_device(block, stream=stream), 0,
                     cuda.to_device(np.zeros(1, np.uint64), stream=stream),
                     cuda.to_device(np.array([len(block)], np.uint64), stream=stream),
                     cuda.to_device(np.array([len(data)], np.uint64), stream=stream), fault, 0, stream)
        assert fault.copy_to_host(stream=stream)[0] == BLOCK_OK
        stream.synchronize()
    finally:
        owner.close()
    with pytest.raises(RuntimeError, match="closed"):
        owner.new()
    owner.close()  # idempotent
