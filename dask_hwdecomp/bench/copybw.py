"""Host-device copy bandwidth, pinned and pageable: the physical limit.

Measured with CuPy on a non-default stream, timed with CUDA events. Where
there is no GPU or no CuPy, the result says why and holds no figures.
"""

from __future__ import annotations

__all__ = ["copy_bandwidth"]


def copy_bandwidth(nbytes: int = 512 << 20, repeats: int = 5) -> dict:
    """GB/s of host-to-device and device-to-host copies.

    Returns
    -------
    dict
        ``{"pinned": {"h2d": summary, "d2h": summary}, "pageable": {...},
        "bytes": nbytes}``, or ``{"skipped": reason}``.
    """
    try:
        import cupy as cp
        import numpy as np
    except ImportError as exc:
        return {"skipped": f"CuPy is not installed ({exc})"}
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            return {"skipped": "no CUDA device"}
    except Exception as exc:  # CUDA driver missing or broken
        return {"skipped": f"CUDA is not usable: {exc}"}
    from .stats import summarize

    rt = cp.cuda.runtime
    stream = cp.cuda.Stream(non_blocking=True)
    device = cp.empty(nbytes, dtype=np.uint8)
    pinned_mem = cp.cuda.alloc_pinned_memory(nbytes)
    hosts = {
        "pinned": np.frombuffer(pinned_mem, dtype=np.uint8, count=nbytes),
        "pageable": np.ones(nbytes, dtype=np.uint8),
    }
    out: dict = {"bytes": nbytes}
    try:
        for kind, host in hosts.items():
            host[:] = 1
            out[kind] = {}
            for direction, (dst, src, how) in {
                "h2d": (device.data.ptr, host.ctypes.data, rt.memcpyHostToDevice),
                "d2h": (host.ctypes.data, device.data.ptr, rt.memcpyDeviceToHost),
            }.items():
                rates = []
                for i in range(repeats + 1):
                    start, end = cp.cuda.Event(), cp.cuda.Event()
                    start.record(stream)
                    rt.memcpyAsync(dst, src, nbytes, how, stream.ptr)
                    end.record(stream)
                    end.synchronize()
                    if i:  # the first copy pays for mapping pages
                        rates.append(nbytes / 1e9 / (cp.cuda.get_elapsed_time(start, end) / 1e3))
                out[kind][direction] = summarize(rates)
    finally:
        stream.synchronize()
        del device, hosts
        pinned_mem = None
        cp.get_default_memory_pool().free_all_blocks()
        cp.get_default_pinned_memory_pool().free_all_blocks()
    return out
