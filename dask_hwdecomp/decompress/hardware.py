"""The ``hardware`` backend: the CUDA decompression engine of Blackwell GPUs.

This module says whether the engine can run here (:func:`probe`,
:func:`describe`) and opens the backend (:func:`create`, or
:func:`create_with` over a given driver); the engine call itself, with its
params records and device pointers, is
:class:`~dask_hwdecomp.gpu.hwengine_launcher.HardwareLauncher`.

The engine has no per-page status, so inputs are checked on the host first
(corrupt input is undefined behaviour on the engine) and failed operations
are redone on the CPU (``cpu.decompress_one``), the rest of the call stands;
a page the CPU rejects too is a ``CorruptPageError``.

Routing (see :mod:`dask_hwdecomp.routing.router`): the algorithms come
from the device's mask (SNAPPY, DEFLATE, LZ4), ``max_job_bytes`` from its
maximum length (less the worst-case expansion of an input, so that inputs
fit too); everything else falls through to nvCOMP. Where the mask is 0 (no
engine, e.g. the H200) :func:`probe` says so, ``backend="auto"`` uses nvCOMP
and ``backend="hardware"`` raises
:class:`~dask_hwdecomp.errors.BackendUnavailableError`.

The driver object (:class:`dask_hwdecomp.gpu.hwengine.EngineDriver`) is
injectable, so CI runs this backend against a stand-in of the documented
contract on host memory (``tests/standin_hwengine.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..gpu.hwengine import ALGO_BIT
from ..options import Options

__all__ = ["probe", "create", "create_with", "describe"]


def probe() -> str | None:
    """None when the engine can run here, else why not (never raises)."""
    from ..gpu.device import bindings_installed

    if not bindings_installed():
        return 'cuda-bindings is not installed (in a checkout: pip install -e ".[gpu]")'
    try:
        from ..gpu.device import device_count
        from ..gpu.hwengine import engine_properties

        if device_count() < 1:
            return "no CUDA device"
        # Attributes only: no context in this process.
        name, mask, length = engine_properties(0)
    except Exception as exc:  # the probe reports, it never raises
        return f"no CUDA device (the CUDA driver is unusable: {exc})"
    if not mask & sum(ALGO_BIT.values()):
        return f"engine algorithm mask is {mask} on device 0 ({name}): no hardware decompression engine"
    if length <= 0:
        return f"engine maximum length is {length} on device 0 ({name})"
    return None


def create_with(driver, options: Options, owned: Sequence = ()):
    """A hardware backend over ``driver`` (the real one or a stand-in).

    Raises
    ------
    CudaError
    """
    from ..gpu.hwengine_launcher import HardwareLauncher
    from .gpu_backend import GpuBackend

    return GpuBackend("hardware", driver, HardwareLauncher(driver), options, owned=owned, redo_on_cpu=True)


def create(options: Options):
    """An open hardware backend on device 0 of this process.

    Raises
    ------
    CudaError
        Setup failed; everything created so far is freed.
    """
    from ..gpu.device import Device
    from ..gpu.hwengine import EngineDriver
    from .gpu_backend import pinned_cap

    device = Device(0)
    driver = None
    try:
        device.activate()
        driver = EngineDriver(device, pool_bytes=2 * pinned_cap(options))
        return create_with(driver, options, owned=[device, driver])
    except BaseException:
        if driver is not None:
            driver.close()
        device.close()
        raise


def describe() -> list[dict] | str:
    """Each device's engine: name, algorithm mask (and what it decodes), maximum length.

    Reads device attributes only (no context is created). Returns why not
    when the driver or a device is missing; never raises.
    """
    try:
        from ..gpu.device import device_count
        from ..gpu.hwengine import engine_properties

        out = []
        for ordinal in range(device_count()):
            name, mask, length = engine_properties(ordinal)
            decodes = sorted(a.value for a, bit in ALGO_BIT.items() if mask & bit)
            out.append({"device": ordinal, "name": name, "algorithm_mask": mask,
                        "decodes": decodes, "maximum_length": length})
        return out or "no CUDA device"
    except Exception as exc:  # informative only
        return f"not readable: {exc}"
