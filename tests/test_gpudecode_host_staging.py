"""The decoder runner's page-locked staging: views lent until reset, and decodes through it equal to those without.

The decodes run the real kernels (numba's CUDA simulator without a GPU).
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dask_hwdecomp.gpudecode.assemble import assemble
from dask_hwdecomp.gpudecode.cuda_jit import cuda
from dask_hwdecomp.gpudecode.host_staging import ALIGN, HostStaging
from dask_hwdecomp.gpudecode.plan import plan_file
from dask_hwdecomp.gpudecode.runner import measure, write
from dask_hwdecomp.gpudecode.tables import CHUNK, PAGE, place_outputs


class _Allocations:
    """numba's ``cuda`` with ``pinned_array`` counted (the real simulator's allocation underneath)."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def pinned_array(self, n, dtype):
        self.sizes.append(int(n))
        return cuda.pinned_array(n, dtype=dtype)


def _overlaps(a: np.ndarray, b: np.ndarray) -> bool:
    lo_a, lo_b = a.ctypes.data, b.ctypes.data
    return lo_a < lo_b + b.nbytes and lo_b < lo_a + a.nbytes


def test_views_lent_before_a_reset_never_overlap_and_start_aligned():
    staging = HostStaging(cuda, nbytes=4096)
    views = [staging.take(n) for n in (1, 300, 17, 1024, 0, 513)]
    views.append(staging.take(5 * CHUNK.itemsize, CHUNK))
    for i, a in enumerate(views):
        assert a.ctypes.data % ALIGN == 0
        for b in views[i + 1 :]:
            assert not _overlaps(a, b)
    assert views[-1].dtype == CHUNK and len(views[-1]) == 5


def test_a_reset_lends_the_same_memory_again_and_allocates_nothing():
    counted = _Allocations()
    staging = HostStaging(counted, nbytes=4096)
    first = staging.take(1000)
    staging.reset()
    again = staging.take(1000)
    assert again.ctypes.data == first.ctypes.data
    assert counted.sizes == [4096 + ALIGN]


def test_a_take_past_the_buffer_grows_it_and_earlier_views_keep_their_bytes():
    counted = _Allocations()
    staging = HostStaging(counted, nbytes=1024)
    early = staging.take(1000)
    early[:] = 7
    big = staging.take(5000)
    big[:] = 9
    # The earlier view's buffer is retired, not reused: queued copies may still read it.
    assert (early == 7).all() and not _overlaps(early, big)
    assert counted.sizes == [1024 + ALIGN, 5120 + ALIGN] and staging.nbytes == 5120
    staging.reset()
    assert staging.take(5000).ctypes.data == big.ctypes.data
    assert len(counted.sizes) == 2


def test_put_copies_the_array_and_a_size_of_no_whole_items_is_refused():
    staging = HostStaging(cuda)
    src = np.arange(12, dtype=np.int64).reshape(3, 4)[:, ::2]  # not contiguous
    got = staging.put(src)
    assert got.shape == src.shape and (got == src).all()
    src[0, 0] = 99
    assert got[0, 0] == 0
    with pytest.raises(ValueError, match="whole number"):
        staging.take(7, np.int64)


def _file() -> bytes:
    rng = np.random.default_rng(3)
    n = 600
    table = pa.table({
        "i": pa.array(rng.integers(0, 1 << 40, n), mask=rng.random(n) < 0.2),
        "s": pa.array([f"v{x}" * int(x % 4) for x in rng.integers(0, 50, n)]),
        "d": pa.array(rng.integers(0, 9, n).astype(np.int32)),
    })
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="none", data_page_size=1024, use_dictionary=["d"])
    return sink.getvalue()


def _decode(buf: bytes, staging: HostStaging | None):
    plan = plan_file(buf)
    data = cuda.to_device(plan.gather(buf))
    stream = cuda.stream()
    m = measure(data, plan.chunks, plan.pages, stream=stream, staging=staging)
    with m.state as state:
        placed = m.chunks.copy()
        out = cuda.device_array(max(1, place_outputs(placed)), np.uint8)
        errors = write(state, placed, out, stream=stream, staging=staging)
        stream.synchronize()
        host = out.copy_to_host()
    if staging is not None:
        staging.reset()
    return plan, m, placed, errors, host


def test_a_decode_through_the_staging_equals_one_through_pageable_memory_and_pyarrow():
    buf = _file()
    staging = HostStaging(cuda, nbytes=ALIGN)  # grows within the decode
    plan, m0, placed0, errors0, host0 = _decode(buf, None)
    _, m1, placed1, errors1, host1 = _decode(buf, staging)
    assert staging.allocations > 1
    assert m1.chunks.dtype == CHUNK and m1.pages.dtype == PAGE
    assert m1.chunks.tobytes() == m0.chunks.tobytes() and m1.pages.tobytes() == m0.pages.tobytes()
    assert placed1.tobytes() == placed0.tobytes()
    assert errors1.tolist() == errors0.tolist() == [0] * len(plan.pages)
    expected = pq.read_table(pa.BufferReader(buf))
    for host in (host0, host1):
        got = pa.table(assemble(host, host, placed1, plan)[0])
        for name in expected.column_names:
            assert got.column(name).equals(expected.column(name)), name
