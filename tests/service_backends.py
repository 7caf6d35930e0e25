"""Backends a GPU service hosts in the CI tests of the isolation (no GPU).

Each is a ``function(options)`` the service process imports by name
(``service_backends:standin``): the real CPU backend, or the real GPU
backend code over the engine stand-in (``standin_hwengine.StandinHwEngine``),
with the faults nvCOMP was seen to have on corrupt pages.
:func:`open_backend` attaches to a service hosting one of them.
"""

from __future__ import annotations

import tempfile

from dask_hwdecomp.decompress.cpu import CpuBackend
from dask_hwdecomp.decompress.hardware import create_with
from dask_hwdecomp.gpu.errors import CudaError

from standin_hwengine import StandinHwEngine, hold_first_call


def open_backend(factory: str, options, service_dir: str | None = None, **kw):
    """A ServiceBackend of a service hosting ``factory`` (a function here), in its own directory.

    A directory per call (short: socket paths are limited to 107 bytes) keeps
    tests from sharing a service unless they pass the same ``service_dir``.
    """
    from dask_hwdecomp.service.client import ServiceBackend

    directory = service_dir or tempfile.mkdtemp(prefix="hwd-")
    return ServiceBackend("test", options.replace(service_dir=directory),
                          factories={"test": f"service_backends:{factory}"}, gpu="none",
                          **{"cap_bytes": 64 << 20, **kw})


def cpu(options):
    return CpuBackend(options.cpu_threads)


def standin(options):
    return create_with(StandinHwEngine(), options)


def standin_merging_8x30(options):
    # The first engine call waits until 8 callers' parts of 30 pages are in it
    # or queued behind it (standin_hwengine.hold_first_call).
    engine = StandinHwEngine()
    backend = create_with(engine, options)
    hold_first_call(engine, backend, callers=8, pages_per_caller=30)
    return backend


def standin_dies(options):
    return create_with(StandinHwEngine(fault="die"), options)


def standin_hangs(options):
    return create_with(StandinHwEngine(fault="hang"), options)


def standin_illegal_address(options):
    return create_with(StandinHwEngine(fault="illegal_address"), options)


def standin_broken_device(options):
    return create_with(StandinHwEngine(fault="die", fault_on="every call"), options)


def no_device(options):
    raise CudaError("CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected (while initialising the CUDA driver)",
                    code=100, name="CUDA_ERROR_NO_DEVICE")


def standin_illegal_address_every_call(options):
    return create_with(StandinHwEngine(fault="illegal_address", fault_on="every call"), options)


def standin_fails_7777(options):
    # The engine fails every operation of 7777 output bytes (the CPU decodes them).
    return create_with(StandinHwEngine(fail_if=lambda rec: rec["dst_num_bytes"] == 7777), options)
