"""Which backends exist here, and one open instance of each per process.

Each backend module exposes ``probe() -> str | None`` (None when it can run
here, else why not) and ``create(options) -> Backend``. The GPU modules are
imported only when probed, so a machine without CUDA never imports it.
Probes never create a CUDA context in this process.

A GPU backend opened here is a
:class:`~dask_hwdecomp.service.client.ServiceClient`: the module's
``create`` runs in the node's GPU service, one process per GPU shared by
every reading process, so a page that kills a CUDA context kills no reader
(see ``docs/gpu.md``). ``module.create`` in process is for the stand-in
tests and the decompression benchmark.
"""

from __future__ import annotations

import atexit
import importlib
import threading
from typing import Any

from ..backend_table import BACKEND_MODULES
from ..decompress.cpu import CpuBackend
from ..errors import BackendUnavailableError
from ..options import GPU_BACKEND_OPTIONS, Options
from ..service.client import ServiceClient

__all__ = ["probe", "get_backend", "close_all", "gpu_module"]


_lock = threading.RLock()
_open: dict[tuple, Any] = {}  # a CpuBackend or a ServiceClient per _key
_probes: dict[str, str | None] = {}


def gpu_module(name: str) -> str:
    """The module of GPU backend ``name``.

    Raises
    ------
    ValueError
        ``name`` is not a GPU backend.
    """
    module = BACKEND_MODULES[name]
    if module is None:
        raise ValueError(f"{name!r} is not a GPU backend")
    return module


def probe(name: str) -> str | None:
    """None if backend ``name`` can run here, else the reason it cannot."""
    if name == "cpu":
        return None
    with _lock:
        if name not in _probes:
            try:
                module = importlib.import_module(gpu_module(name))
                _probes[name] = module.probe()
            except ImportError as exc:
                _probes[name] = f"cannot import {gpu_module(name)}: {exc}"
        return _probes[name]


def _key(name: str, options: Options) -> tuple:
    if name == "cpu":
        return (name, options.cpu_threads)
    # A GPU backend's own options, and the client's: its deadline, where the service listens.
    return (name, *(getattr(options, f) for f in GPU_BACKEND_OPTIONS), options.gpu_timeout_s, options.service_dir)


def get_backend(name: str, options: Options):
    """The process's open backend ``name`` for these options (created once).

    A GPU backend attaches to the node's GPU service here, starting it if
    none runs (once per process and options; a worker's
    ``HwdecompPlugin.setup`` pays it at start).

    Raises
    ------
    BackendUnavailableError
        The backend cannot run here; the message says why
        (:class:`~dask_hwdecomp.service.rundir.ServiceUnreachable` when the
        service cannot be reached or started).
    """
    with _lock:
        key = _key(name, options)
        backend = _open.get(key)
        if backend is None:
            if name == "cpu":
                backend = CpuBackend(options.cpu_threads)
            else:
                reason = probe(name)
                if reason is not None:
                    raise BackendUnavailableError(f"backend {name!r} is not available: {reason}")
                backend = ServiceClient(name, options)
            _open[key] = backend
        return backend


def close_all() -> None:
    """Close every open backend (a worker plugin's teardown, process exit)."""
    with _lock:
        backends = list(_open.values())
        _open.clear()
        _probes.clear()
    for backend in backends:
        backend.close()


atexit.register(close_all)
