"""The ordinary memory copied outputs land in: reused once its arrays are gone, never while they live, bounded."""

from __future__ import annotations

import gc

import numpy as np
import pyarrow as pa
import pytest

from dask_hwdecomp.gpu.pool import size_class
from dask_hwdecomp.service.spares import SMALLEST, Spares


def _address(view: memoryview) -> int:
    return np.frombuffer(view, dtype=np.uint8).ctypes.data


@pytest.mark.parametrize("n", [1, 1000, 1 << 12, (1 << 12) + 1, 70_000, 95_000_000, 100 << 20])
def test_a_size_class_holds_the_size_and_wastes_at_most_an_eighth(n):
    c = size_class(n, minimum=SMALLEST)
    assert c >= n and (c <= n * 9 // 8 or c == SMALLEST)


def test_a_buffer_is_reused_once_its_arrays_are_gone_and_never_before():
    s = Spares(max_bytes=64 << 20)
    view, owner = s.take(3_000_000)
    arr = pa.Array.from_buffers(pa.uint8(), 3_000_000, [None, pa.foreign_buffer(_address(view), 3_000_000, owner)])
    first = _address(view)
    del view, owner
    gc.collect()
    other, other_owner = s.take(3_000_000)  # the array still holds the first buffer
    assert _address(other) != first
    del arr
    gc.collect()
    again, again_owner = s.take(2_900_000)  # same size class
    assert _address(again) == first
    assert s.stats()["spare_reused"] == 1 and s.stats()["spare_fresh"] == 2


def test_buffers_past_the_bound_are_freed_not_kept():
    s = Spares(max_bytes=5 << 20)
    taken = [s.take(2 << 20) for _ in range(4)]  # four of 2 MiB: only two fit the bound
    del taken
    gc.collect()
    assert s.stats()["spare_kept_bytes"] == 4 << 20
    assert s.stats()["spare_kept_bytes"] <= s.max_bytes


def test_another_size_class_gets_fresh_memory():
    s = Spares(max_bytes=64 << 20)
    view, owner = s.take(1 << 20)
    first = _address(view)
    del view, owner
    gc.collect()
    big, big_owner = s.take(8 << 20)
    assert _address(big) != first and s.stats()["spare_fresh"] == 2
