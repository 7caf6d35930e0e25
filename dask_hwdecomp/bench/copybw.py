"""Host-device copy bandwidth, pinned and pageable: the physical limit.

Measured through the project's own GPU layer (cuda-bindings, which the
``gpu`` extra installs): driver copies on a non-default stream, timed on
the host from issuing a copy to its stream's synchronisation. Where there
is no GPU or no cuda-bindings, the result says why and holds no figures.
"""

from __future__ import annotations

import time

__all__ = ["copy_bandwidth"]


def _unavailable() -> str | None:
    """Why copies cannot be measured here, or None."""
    try:
        from ..gpu.device import device_count
    except ImportError as exc:  # pragma: no cover - the gpu package is always there
        return f"the GPU layer does not import ({exc})"
    try:
        n = device_count()
    except ImportError as exc:
        return f'cuda-bindings is not installed (in a checkout: pip install -e ".[gpu]"): {exc}'
    except Exception as exc:  # a broken driver: reported, nothing measured
        return f"CUDA is not usable: {exc}"
    return None if n >= 1 else "no CUDA device"


def copy_bandwidth(nbytes: int = 512 << 20, repeats: int = 5) -> dict:
    """GB/s of host-to-device and device-to-host copies.

    Returns
    -------
    dict
        ``{"pinned": {"h2d": summary, "d2h": summary}, "pageable": {...},
        "bytes": nbytes}``, or ``{"skipped": reason}``.

    Raises
    ------
    CudaError
        A driver call failed after the device was found.
    """
    why = _unavailable()
    if why is not None:
        return {"skipped": why}
    import numpy as np

    from ..gpu.device import Device
    from ..gpu.memory import host_view
    from ..gpu.ops import CudaOps
    from .stats import summarize

    out: dict = {"bytes": nbytes}
    with Device(0) as device:
        ops = CudaOps(device)
        with ops.new_stream() as stream, ops.alloc_device(nbytes, stream) as dev, ops.alloc_host(nbytes) as pinned:
            pageable = np.ones(nbytes, dtype=np.uint8)
            host_view(pinned.ptr, nbytes)[:] = pageable.data
            hosts = {"pinned": pinned.ptr, "pageable": int(pageable.ctypes.data)}
            for kind, host in hosts.items():
                out[kind] = {}
                for direction, copy, dst, src in (
                    ("h2d", ops.htod, dev.ptr, host),
                    ("d2h", ops.dtoh, host, dev.ptr),
                ):
                    rates = []
                    for i in range(repeats + 1):
                        t0 = time.perf_counter()
                        copy(dst, src, nbytes, stream)
                        ops.synchronize(stream)
                        if i:  # the first copy pays for mapping pages
                            rates.append(nbytes / 1e9 / (time.perf_counter() - t0))
                    out[kind][direction] = summarize(rates)
    return out
