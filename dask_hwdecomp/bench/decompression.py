"""Decompression alone, host to host: per backend, and a batch-size sweep.

A backend gets its own host buffers (pinned for GPU backends), the
compressed pages are copied in once, and what is timed is
``backend.decompress(jobs, src, dst)``: for a GPU backend the copy to the
device, the decompression and the copy back. Figures are GB/s of output.
The CPU pool is measured on one thread and on all cores.
"""

from __future__ import annotations

import time
from typing import Callable

from ..decompress import registry
from ..decompress.cpu import CpuBackend
from ..options import Options
from .pages import PageSet
from .stats import summarize

__all__ = ["GPU_BACKENDS", "open_backends", "time_backend", "measure_backends", "sweep"]

GPU_BACKENDS = ("nvcomp", "hardware")

# One thread is slow: it gets at most this many pages (throughput is per page).
CPU1_MAX_PAGES = 64


def _options(**kw) -> Options:
    # The whole set fits one call unless a sweep splits it.
    return Options(batch_bytes=1 << 40, **kw)


def open_backends(names, cores: int) -> tuple[dict, dict]:
    """``({label: factory}, {label: why unavailable})`` for the backends asked for.

    Labels: ``cpu-1``, ``cpu-<cores>``, and GPU backend names. A factory
    takes ``streams`` and returns an open backend.
    """
    factories: dict[str, Callable] = {}
    missing: dict[str, str] = {}
    if "cpu" in names:
        factories["cpu-1"] = lambda streams=1: CpuBackend(threads=1)
        factories[f"cpu-{cores}"] = lambda streams=1: CpuBackend(threads=cores)
    for name in GPU_BACKENDS:
        if name not in names:
            continue
        why = registry.probe(name)
        if why is not None:
            missing[name] = why
            continue
        factories[name] = lambda streams=2, _n=name: registry.get_backend(_n, _options(backend=_n, streams=streams))
    return factories, missing


def time_backend(backend, pages: PageSet, repeats: int, pages_per_call: int | None = None) -> dict:
    """Decompress ``pages`` ``repeats`` times; GB/s of output.

    Parameters
    ----------
    pages_per_call : int, optional
        Split the jobs into calls of this many pages (default: one call).

    Returns
    -------
    dict
        ``{"gbps": summary, "pages", "pages_per_call", "out_bytes"}``.
    """
    src = backend.host_buffer(max(1, len(pages.src)))
    dst = backend.host_buffer(max(1, pages.out_bytes))
    try:
        src.view[: len(pages.src)] = pages.src
        n = pages_per_call or len(pages.jobs)
        calls = [pages.jobs[i : i + n] for i in range(0, len(pages.jobs), n)]
        backend.decompress(calls[0], src.view, dst.view)  # warm-up: first-call setup
        rates = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for jobs in calls:
                backend.decompress(jobs, src.view, dst.view)
            rates.append(pages.out_bytes / 1e9 / (time.perf_counter() - t0))
    finally:
        src.close()
        dst.close()
    return {"gbps": summarize(rates), "pages": len(pages.jobs), "pages_per_call": n, "out_bytes": pages.out_bytes}


def measure_backends(factories: dict, page_sets: dict, repeats: int, tick=None) -> dict:
    """``{label: {codec: time_backend(...)}}`` with each backend's default streams.

    A failure is recorded as ``{"error": ...}`` for that pair.
    """
    out: dict = {}
    for label, factory in factories.items():
        out[label] = {}
        backend = factory()
        try:
            for codec, pages in page_sets.items():
                if label == "cpu-1":
                    pages = pages.head(min(CPU1_MAX_PAGES, len(pages.jobs)))
                try:
                    out[label][codec] = time_backend(backend, pages, repeats)
                except Exception as exc:  # the report shows it; the run goes on
                    out[label][codec] = {"error": f"{type(exc).__name__}: {exc}"}
                if tick:
                    tick()
        finally:
            if label.startswith("cpu"):
                backend.close()
    return out


def sweep(factories: dict, page_sets: dict, pages_per_call, streams, repeats: int, tick=None) -> dict:
    """GB/s against pages per call (and streams, for GPU backends).

    The CPU pool is swept on all cores, pages per call only.

    Returns
    -------
    dict
        ``{label: {codec: [{"pages_per_call", "streams", "gbps"}...]}}``.
    """
    out: dict = {}
    for label, factory in factories.items():
        if label == "cpu-1":
            continue
        stream_counts = [None] if label.startswith("cpu") else list(streams)
        out[label] = {codec: [] for codec in page_sets}
        for s in stream_counts:
            backend = factory() if s is None else factory(streams=s)
            try:
                for codec, pages in page_sets.items():
                    for n in pages_per_call:
                        if n > len(pages.jobs):
                            continue
                        point = {"pages_per_call": n, "streams": s}
                        try:
                            point["gbps"] = time_backend(backend, pages, repeats, n)["gbps"]
                        except Exception as exc:
                            point["error"] = f"{type(exc).__name__}: {exc}"
                        out[label][codec].append(point)
                        if tick:
                            tick()
            finally:
                if label.startswith("cpu"):
                    backend.close()
    return out
