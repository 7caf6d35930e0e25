"""Decompression alone, host to host: per backend, and a batch-size sweep.

What is timed is ``backend.decompress(jobs, src, dst)`` over a page set
already in host memory: for a GPU backend the copies to the device, the
decompression and the copies back. Figures are GB/s of output.

- The CPU pool is measured on one thread and on all cores; its sweep splits
  the pages into calls of N pages.
- The cost of the checksums (:func:`checksum_cost`): each GPU backend and
  codec with no checksum, the default ones (a GZIP page's CRC-32) and those
  of ``verify_checksums`` (plus the page CRC-32 of every page's stored
  bytes), interleaved per repeat, in the backend's default configuration.
- Every backend is measured at its default options on the 1 MiB and the
  64 KiB page sets.
- A GPU backend is then swept over
  ``batch_bytes`` (N pages of 1 MiB per batched call) × ``streams``, all
  pages handed over in one ``decompress`` call that the backend cuts into
  parts and spreads over its streams. Its host buffers are pinned, taken
  from one holder backend, so that every configuration copies from the
  same memory.
"""

from __future__ import annotations

import importlib
import time

from ..backend_table import GPU_BACKENDS
from ..decompress.cpu import CpuBackend
from ..options import Options
from ..routing import registry
from .pages import PAGE_BYTES, PageSet
from .stats import summarize

__all__ = ["open_backends", "time_backend", "measure_backends", "sweep", "checksum_cost",
           "CHECKS"]

# One thread is slow: it gets at most this many pages (throughput is per page).
CPU1_MAX_PAGES = 64
_PAGE = PAGE_BYTES  # the sweep's page set


def _gpu_factory(name: str):
    module = importlib.import_module(registry.gpu_module(name))

    def make(**overrides):
        # Not through the registry: each configuration is opened and closed here.
        return module.create(Options(backend=name, **overrides))

    return make


def open_backends(names, cores: int) -> tuple[dict, dict]:
    """``({label: factory}, {label: why unavailable})`` for the backends asked for.

    Labels: ``cpu-1``, ``cpu-<cores>``, and GPU backend names. A factory
    takes :class:`~dask_hwdecomp.options.Options` overrides and returns a new
    open backend, which the caller closes.
    """
    factories: dict = {}
    missing: dict = {}
    if "cpu" in names:
        factories["cpu-1"] = lambda **_: CpuBackend(threads=1)
        factories[f"cpu-{cores}"] = lambda **_: CpuBackend(threads=cores)
    for name in GPU_BACKENDS:
        if name not in names:
            continue
        why = registry.probe(name)
        if why is not None:
            missing[name] = why
            continue
        factories[name] = _gpu_factory(name)
    return factories, missing


class _Buffers:
    """Source and destination host buffers of one page set, filled once."""

    def __init__(self, holder, pages: PageSet):
        self.src = holder.host_buffer(max(1, len(pages.src)))
        self.dst = holder.host_buffer(max(1, pages.out_bytes))
        self.src.view[: len(pages.src)] = pages.src

    def close(self):
        self.src.close()
        self.dst.close()


def time_backend(backend, pages: PageSet, repeats: int, pages_per_call: int | None = None, buffers=None) -> dict:
    """Decompress ``pages`` ``repeats`` times (after one warm-up); GB/s of output.

    Parameters
    ----------
    pages_per_call : int, optional
        Split the jobs into ``decompress`` calls of this many pages
        (default: one call).
    buffers : optional
        Host buffers holding ``pages`` (default: the backend's own).

    Returns
    -------
    dict
        ``{"gbps": summary, "pages", "pages_per_call", "out_bytes"}``.
    """
    own = buffers is None
    buffers = buffers or _Buffers(backend, pages)
    try:
        n = pages_per_call or len(pages.jobs)
        calls = [pages.jobs[i : i + n] for i in range(0, len(pages.jobs), n)]
        src, dst = buffers.src.view, buffers.dst.view
        for jobs in calls:  # warm-up: first-call setup, pinned staging
            backend.decompress(jobs, src, dst)
        rates = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for jobs in calls:
                backend.decompress(jobs, src, dst)
            rates.append(pages.out_bytes / 1e9 / (time.perf_counter() - t0))
    finally:
        if own:
            buffers.close()
    return {"gbps": summarize(rates), "pages": len(pages.jobs), "pages_per_call": n, "out_bytes": pages.out_bytes}


def _holder(factory, page_sets: dict):
    biggest = max(len(p.src) + p.out_bytes for p in page_sets.values())
    # batch_bytes sizes the holder's pinned cap (4 batches): room for one set.
    return factory(batch_bytes=biggest, streams=1)


def measure_backends(factories: dict, page_sets: dict, repeats: int, tick=None) -> dict:
    """``{label: {codec: time_backend(...)}}``, GPU backends with default options.

    A failure is recorded as ``{"error": ...}`` for that pair.
    """
    out: dict = {}
    for label, factory in factories.items():
        out[label] = {}
        gpu = not label.startswith("cpu")
        holder = _holder(factory, page_sets) if gpu else None
        backend = factory()
        try:
            for codec, pages in page_sets.items():
                if label == "cpu-1":
                    pages = pages.head(min(CPU1_MAX_PAGES, len(pages.jobs)))
                bufs = _Buffers(holder, pages) if gpu else None
                try:
                    out[label][codec] = time_backend(backend, pages, repeats, buffers=bufs)
                except Exception as exc:  # the report shows it; the run goes on
                    out[label][codec] = {"error": f"{type(exc).__name__}: {exc}"}
                finally:
                    if bufs:
                        bufs.close()
                if tick:
                    tick()
        finally:
            backend.close()
            if holder is not None:
                holder.close()
    return out


def _point(backend, pages, repeats, n, bufs, stream_count) -> dict:
    point = {"pages_per_call": n, "streams": stream_count}
    try:
        per_call = None if bufs is not None else n
        point["gbps"] = time_backend(backend, pages, repeats, per_call, bufs)["gbps"]
    except Exception as exc:  # recorded per point
        point["error"] = f"{type(exc).__name__}: {exc}"
    return point


def sweep(factories: dict, page_sets: dict, pages_per_call, streams, repeats: int, tick=None) -> dict:
    """GB/s against pages per batched call (and streams, for GPU backends).

    Returns
    -------
    dict
        ``{label: {codec: [{"pages_per_call", "streams", "gbps"}...]}}``.
    """
    out: dict = {}
    for label, factory in factories.items():
        if label == "cpu-1":
            continue
        out[label] = {codec: [] for codec in page_sets}
        if label.startswith("cpu"):
            backend = factory()
            try:
                for codec, pages in page_sets.items():
                    for n in pages_per_call:
                        if n <= len(pages.jobs):
                            out[label][codec].append(_point(backend, pages, repeats, n, None, None))
                        if tick:
                            tick()
            finally:
                backend.close()
            continue
        holder = _holder(factory, page_sets)
        try:
            for codec, pages in page_sets.items():
                bufs = _Buffers(holder, pages)
                try:
                    for s in streams:
                        for n in pages_per_call:
                            if n <= len(pages.jobs):
                                backend = None
                                try:
                                    backend = factory(batch_bytes=n * _PAGE, streams=s)
                                    out[label][codec].append(_point(backend, pages, repeats, n, bufs, s))
                                except Exception as exc:
                                    out[label][codec].append({"pages_per_call": n, "streams": s, "error": f"{type(exc).__name__}: {exc}"})
                                finally:
                                    if backend is not None:
                                        backend.close()
                            if tick:
                                tick()
                finally:
                    bufs.close()
        finally:
            holder.close()
    return out


CHECKS = ("none", "default", "verify")


def checksum_cost(factories: dict, page_sets: dict, repeats: int, tick=None) -> dict:
    """GB/s of each GPU backend per codec with the checksums of :data:`CHECKS`.

    The variants alternate within each repeat so that drift hits them alike.

    Returns
    -------
    dict
        ``{label: {codec: {check: {"gbps": summary}}}}``; a failure is
        ``{"error": ...}`` for that pair.
    """
    out: dict = {}
    for label, factory in factories.items():
        if label.startswith("cpu"):
            continue
        out[label] = {}
        holder = _holder(factory, page_sets)
        backend = factory()
        try:
            for codec, pages in page_sets.items():
                variants = {check: pages.with_checks(check) for check in CHECKS}
                bufs = _Buffers(holder, pages)
                try:
                    rates: dict = {check: [] for check in CHECKS}
                    for _ in range(repeats):
                        for check, ps in variants.items():
                            rates[check].append(time_backend(backend, ps, 1, buffers=bufs)["gbps"]["median"])
                    out[label][codec] = {check: {"gbps": summarize(r)} for check, r in rates.items()}
                except Exception as exc:  # the report shows it; the run goes on
                    out[label][codec] = {"error": f"{type(exc).__name__}: {exc}"}
                finally:
                    bufs.close()
                if tick:
                    tick()
        finally:
            backend.close()
            holder.close()
    return out
