"""The pinned-copy measurement of ``hwdecomp bench``, on a real GPU, with the gpu extra only."""

from __future__ import annotations

import pytest

from dask_hwdecomp.bench.copybw import copy_bandwidth


@pytest.fixture(scope="module")
def cuda_device():
    pytest.importorskip("cuda.bindings", reason="cuda-bindings (the gpu extra) is not installed")
    from dask_hwdecomp.gpu.device import device_count

    if device_count() < 1:
        pytest.skip("no CUDA device")


def test_copy_bandwidth_measures_both_directions(cuda_device):
    out = copy_bandwidth(64 << 20, repeats=2)
    assert "skipped" not in out, out
    for kind in ("pinned", "pageable"):
        for direction in ("h2d", "d2h"):
            s = out[kind][direction]
            assert s["n"] == 2 and 0 < s["min"] <= s["median"] <= s["max"], (kind, direction, out)
