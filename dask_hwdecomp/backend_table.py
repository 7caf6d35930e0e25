"""The decompression backends: one entry each, the one list every other is made from.

An entry names the backend (the ``backend`` option's value, what reports
show) and the module with its ``probe() -> str | None`` and
``create(options) -> Backend`` (None for the CPU pool, made in process).
The entries stand in the order ``backend="auto"`` tries them: the options'
choices, the registry's modules, the factories the GPU service may load
and the routing table are all drawn from it, so adding a backend is one
entry here and its module.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BackendEntry", "BACKEND_TABLE", "BACKEND_MODULES", "GPU_BACKENDS"]


@dataclass(frozen=True)
class BackendEntry:
    """One backend: its name and the module that probes and creates it (None: the CPU pool)."""

    name: str
    module: str | None


BACKEND_TABLE: tuple[BackendEntry, ...] = (
    BackendEntry(name="hardware", module="dask_hwdecomp.decompress.hardware"),
    BackendEntry(name="nvcomp", module="dask_hwdecomp.decompress.nvcomp"),
    BackendEntry(name="cpu", module=None),
)

# backend name -> the module with its probe() and create() (None: in process)
BACKEND_MODULES: dict[str, str | None] = {e.name: e.module for e in BACKEND_TABLE}

# The GPU backends, in the order backend="auto" tries them.
GPU_BACKENDS: tuple[str, ...] = tuple(e.name for e in BACKEND_TABLE if e.module is not None)
