"""GPU test fixtures: skip only when a capability is really missing.

The probe of each backend (:func:`dask_hwdecomp.routing.registry.probe`)
says why it cannot run here ("no CUDA device", "nvCOMP not installed ...");
a test that needs the backend is skipped with that reason, nothing broader.
"""

from __future__ import annotations

import pytest

from dask_hwdecomp.options import Options
from dask_hwdecomp.routing import registry

# A short deadline: a Zstd page that hangs nvCOMP costs the suite this long.
GPU_OPTIONS = Options(backend="nvcomp", streams=2, batch_latency_ms=2.0, gpu_timeout_s=10.0)


def pytest_collection_modifyitems(items):
    for item in items:
        if "/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(scope="session")
def cuda_device():
    """A CUDA device is here (the tests of numba's kernels and streams need no nvCOMP)."""
    from dask_hwdecomp.gpu.device import bindings_installed, device_count

    if not bindings_installed():
        pytest.skip('cuda-bindings is not installed (in a checkout: pip install -e ".[gpu]")')
    if device_count() < 1:  # 0 where the driver cannot be initialised
        pytest.skip("no CUDA device")
    return True


@pytest.fixture(scope="session")
def nvcomp_available():
    reason = registry.probe("nvcomp")
    if reason is not None:
        pytest.skip(f"nvcomp backend unavailable: {reason}")
    return True


@pytest.fixture(scope="session")
def nvcomp_backend(nvcomp_available):
    """The process's nvCOMP backend: attached to the node's GPU service once."""
    return registry.get_backend("nvcomp", GPU_OPTIONS)
