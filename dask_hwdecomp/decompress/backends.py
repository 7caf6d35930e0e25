"""The table of backends: which module makes each.

A module with ``probe() -> str | None`` and ``create(options) -> Backend``,
or None for the CPU pool, which is made in process. The registry probes and
opens them; the GPU service client names the GPU ones to the service it
starts (by module path: the service imports them, the reader never does).
"""

from __future__ import annotations

__all__ = ["BACKEND_MODULES"]

# backend name -> the module with its probe() and create() (None: in process)
BACKEND_MODULES: dict[str, str | None] = {
    "cpu": None,
    "nvcomp": "dask_hwdecomp.decompress.nvcomp",
    "hardware": "dask_hwdecomp.decompress.hardware",
}
