"""The ``nvcomp`` backend: nvCOMP's batched C API behind a :class:`GpuBackend`.

This module says whether nvCOMP can run here (:func:`probe`) and opens the
backend (:func:`create`); the batched call itself, with its device pointers
and metadata, is :class:`~dask_hwdecomp.gpu.nvcomp_launcher.NvcompLauncher`.
Multi-member GZIP and BROTLI stay on the CPU (see
:mod:`dask_hwdecomp.routing.router`).
"""

from __future__ import annotations

from ..options import Options

__all__ = ["probe", "create"]


def probe() -> str | None:
    """None when nvCOMP can run here, else why not (never raises)."""
    from ..gpu.device import bindings_installed

    if not bindings_installed():
        return 'cuda-bindings is not installed (in a checkout: pip install -e ".[gpu]")'
    from ..gpu.nvcomp_lib import find_library

    if find_library() is None:
        return 'nvCOMP not installed (in a checkout: pip install -e ".[gpu]")'
    try:
        from ..gpu.device import device_count

        if device_count() < 1:
            return "no CUDA device"
    except Exception as exc:  # the probe reports, it never raises
        return f"no CUDA device (the CUDA driver is unusable: {exc})"
    return None


def create(options: Options):
    """An open nvCOMP backend on device 0 of this process.

    Raises
    ------
    CudaError, NvcompError, OSError
        Setup failed; everything created so far is freed.
    """
    from ..gpu.device import Device
    from ..gpu.nvcomp_launcher import NvcompLauncher
    from ..gpu.nvcomp_lib import NvcompLib, find_library
    from ..gpu.ops import CudaOps
    from .gpu_backend import GpuBackend

    device = Device(0)
    try:
        device.activate()
        path = find_library()
        if path is None:
            raise OSError("libnvcomp.so.6 not found (install the gpu extra, or set HWDECOMP_NVCOMP_LIB)")
        lib = NvcompLib(path)
        ops = CudaOps(device, checksummer=lib)
        launcher = NvcompLauncher(lib, ops)
        return GpuBackend("nvcomp", ops, launcher, options, owned=[device])
    except BaseException:
        device.close()
        raise
