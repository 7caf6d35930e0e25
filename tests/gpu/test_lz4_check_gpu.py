"""The LZ4 walk on the GPU as the nvCOMP launcher queues it: over device memory it does not own, on its stream.

``tests/test_lz4_check.py`` holds the kernel to the host walk and the host
walk to the LZ4 library (under the simulator in CI, on the GPU here); this
runs :func:`~dask_hwdecomp.gpu.lz4_check.queue_lz4_checks` itself: numba's
views over raw device addresses, a ``gpu/`` stream, the faults and the
swapped block pointers read back through the driver.
"""

from __future__ import annotations

import numpy as np
import pytest
from lz4_cases import compress, datas, mutants

from dask_hwdecomp.gpu.device import Device
from dask_hwdecomp.gpu.lz4_check import LZ4_OK, lz4_block_fault, queue_lz4_checks
from dask_hwdecomp.gpu.ops import CudaOps

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def ops(nvcomp_available):
    with Device(0) as device:
        yield CudaOps(device)


def test_the_launchers_queue_walks_raw_device_memory_on_its_stream(ops):
    cases = [(compress(d), len(d)) for d in datas()] + list(mutants(400, seed=11))
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
        queue_lz4_checks(stream, ptrs, sizes, meta.ptr, meta.ptr + 8 * n, meta.ptr + 16 * n, d_fault,
                         empty=d_fault + 4 * n)
        ops.dtoh(back.ctypes.data, meta.ptr, back.nbytes, stream)
        ops.dtoh(fault.ctypes.data, d_fault, fault.nbytes, stream)
        ops.synchronize(stream)
    want = np.array([lz4_block_fault(np.frombuffer(b, np.uint8), 0, len(b), s) for b, s in cases], np.int32)
    assert (fault == want).all()
    bad = fault != LZ4_OK
    assert bad.sum() > 100 and (~bad).sum() >= 5
    assert (back[:n][bad] == d_fault + 4 * n).all() and (back[n : 2 * n][bad] == 1).all()
    assert (back[:n][~bad] == ptrs[~bad]).all() and (back[n : 2 * n][~bad] == sizes[~bad]).all()
