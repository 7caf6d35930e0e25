"""The block walks on the GPU as the nvCOMP launcher queues them: over device memory they do not own, on its stream.

``tests/test_block_checks.py`` holds the kernel to the host walks and the
host walks to the reference decoders (under the simulator in CI); this
runs :func:`~dask_hwdecomp.gpu.block_checks.queue_block_checks` itself on
the GPU: numba's views over raw device addresses, a ``gpu/`` stream, the
faults and the swapped block pointers read back through the driver.
"""

from __future__ import annotations

import numpy as np
import pytest

from dask_hwdecomp.gpu.block_checks import (
    BLOCK_OK,
    WALK_LZ4,
    WALK_SNAPPY,
    lz4_block_fault,
    queue_block_checks,
    snappy_block_fault,
)
from dask_hwdecomp.gpu.device import Device
from dask_hwdecomp.gpu.ops import CudaOps

from block_cases import FORMATS, compress, datas, mutants

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def ops(cuda_device):
    with Device(0) as device:
        yield CudaOps(device)


_WALKS = {"lz4": (WALK_LZ4, lz4_block_fault), "snappy": (WALK_SNAPPY, snappy_block_fault)}


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_launchers_queue_walks_raw_device_memory_on_its_stream(ops, fmt):
    walk, host_walk = _WALKS[fmt]
    cases = [(compress(fmt, d), len(d)) for d in datas()] + list(mutants(fmt, 400, seed=11))
    arena = np.concatenate([np.frombuffer(b, np.uint8) for b, _ in cases])
    offsets = np.cumsum([0] + [len(b) for b, _ in cases[:-1]]).astype(np.uint64)
    sizes = np.array([len(b) for b, _ in cases], np.uint64)
    caps = np.array([s for _, s in cases], np.uint64)
    n = len(cases)
    back = np.zeros(3 * n, np.uint64)
    fault = np.zeros(n, np.int32)
    with ops.new_stream() as stream, ops.alloc_device(len(arena), stream) as data, \
            ops.alloc_device(24 * n + 4 * (n + 1), stream) as meta:
        ptrs = offsets + np.uint64(data.ptr)
        host = np.concatenate([ptrs, sizes, caps]).astype(np.uint64)
        ops.htod(data.ptr, arena.ctypes.data, len(arena), stream)
        ops.htod(meta.ptr, host.ctypes.data, host.nbytes, stream)
        d_fault = meta.ptr + 24 * n
        ops.memset_d32(d_fault, 0, n + 1, stream)
        queue_block_checks(walk, stream, ptrs, sizes, meta.ptr, meta.ptr + 8 * n, meta.ptr + 16 * n, d_fault,
                           empty=d_fault + 4 * n)
        ops.dtoh(back.ctypes.data, meta.ptr, back.nbytes, stream)
        ops.dtoh(fault.ctypes.data, d_fault, fault.nbytes, stream)
        ops.synchronize(stream)
    want = np.array([host_walk(np.frombuffer(b, np.uint8), 0, len(b), s) for b, s in cases], np.int32)
    assert (fault == want).all()
    bad = fault != BLOCK_OK
    assert bad.sum() > 100 and (~bad).sum() >= 5
    assert (back[:n][bad] == d_fault + 4 * n).all() and (back[n : 2 * n][bad] == 1).all()
    assert (back[:n][~bad] == ptrs[~bad]).all() and (back[n : 2 * n][~bad] == sizes[~bad]).all()
