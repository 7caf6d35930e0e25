"""``dd.read_parquet`` end to end: GB/s, worker CPU seconds, stage times.

Two schedulers: a distributed ``LocalCluster`` of ``workers`` processes ×
``threads`` per shape (:mod:`.shapes`; the result persisted in the
workers, then released), and the threaded scheduler with ``workers ×
threads`` threads in this process. Throughput counts the whole call, graph
construction included. CPU seconds are the user+system time of the worker
processes (of this process, threaded) over the read. Stage times come from
the hwdecomp engine's :class:`~dask_hwdecomp.ReadReport`, gathered in this
process, so only under the threaded scheduler.
"""

from __future__ import annotations

import contextlib
import gc
import time
from typing import Any

import dask.dataframe as dd
import psutil

from ..report import ReadReport, collect_reports
from .data import Dataset
from .shapes import ClusterShape
from .stats import summarize
from .variants import Variant

__all__ = ["ClusterShape", "Scheduler", "local_cluster", "threaded", "measure_read", "measure_dataset", "decode_summary"]


def _process_cpu_seconds() -> float:
    """CPU seconds of this process and its live children.

    The GPU backends run in the node's GPU service, a child of the worker
    that started it (in a session of its own): what it spends is part of
    what a read costs the machine, counted once, under that worker.
    """
    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.NoSuchProcess:  # a child that just ended
            continue
        total += t.user + t.system
    return total


class Scheduler:
    """Where reads run; subclasses say how to persist and count CPU time."""

    name = "?"

    def persist_and_release(self, df) -> None:
        raise NotImplementedError

    def cpu_seconds(self) -> float:
        raise NotImplementedError

    def in_process(self) -> bool:
        return False

    def close(self) -> None:
        pass


class _Distributed(Scheduler):
    name = "distributed"

    def __init__(self, shape: ClusterShape):
        from distributed import Client, LocalCluster

        self.cluster = LocalCluster(
            n_workers=shape.workers,
            threads_per_worker=shape.threads,
            processes=True,
            memory_limit=0,  # no spilling: it would time the disk, not the read
            dashboard_address=None,
        )
        # The default client: dask-expr's persist looks it up.
        self.client = Client(self.cluster)

    def persist_and_release(self, df) -> None:
        from distributed import wait

        persisted = self.client.persist(df)
        wait(persisted)
        del persisted
        self.client.run(gc.collect)

    def cpu_seconds(self) -> float:
        return sum(self.client.run(_process_cpu_seconds).values())

    def close(self) -> None:
        self.client.close()
        self.cluster.close()


class _Threaded(Scheduler):
    name = "threads"

    def __init__(self, shape: ClusterShape):
        self.threads = shape.workers * shape.threads

    def persist_and_release(self, df) -> None:
        persisted = df.persist(scheduler="threads", num_workers=self.threads)
        del persisted
        gc.collect()

    def cpu_seconds(self) -> float:
        return _process_cpu_seconds()

    def in_process(self) -> bool:
        return True


@contextlib.contextmanager
def local_cluster(shape: ClusterShape):
    """A :class:`Scheduler` on a distributed LocalCluster of ``shape``."""
    s = _Distributed(shape)
    try:
        yield s
    finally:
        s.close()


@contextlib.contextmanager
def threaded(shape: ClusterShape):
    """A :class:`Scheduler` on the threaded scheduler, ``workers × threads`` threads."""
    yield _Threaded(shape)


def measure_read(scheduler: Scheduler, variant: Variant, path) -> dict:
    """Read ``path`` once with ``variant``; seconds, CPU seconds, report.

    Returns
    -------
    dict
        ``{"seconds", "cpu_seconds", "report"}`` (report: a ReadReport
        dict, or None when not gathered).
    """
    collect = collect_reports() if (scheduler.in_process() and variant.is_hwdecomp) else contextlib.nullcontext()
    before = _service_counters() if variant.is_hwdecomp else None
    cpu0 = scheduler.cpu_seconds()
    with collect as report:
        t0 = time.perf_counter()
        if variant.reader is not None:
            df = variant.reader(path)
        else:
            df = dd.read_parquet(str(path), engine=variant.engine, **variant.kwargs)
        scheduler.persist_and_release(df)
        seconds = time.perf_counter() - t0
    cpu = scheduler.cpu_seconds() - cpu0
    gpu = None
    if before is not None:
        after = _service_counters()
        calls = after["gpu_calls"] - before["gpu_calls"]
        pages = after["gpu_pages"] - before["gpu_pages"]
        gpu = {"services": after["services"], "gpu_processes": _gpu_processes(), "calls": calls,
               "pages": pages, "pages_per_call": pages / calls if calls else None}
    return {"seconds": seconds, "cpu_seconds": cpu, "gpu": gpu,
            "report": report.to_dict() if isinstance(report, ReadReport) else None}


def _service_counters() -> dict:
    """GPU calls and pages of every GPU service of this user on this node, summed."""
    from ..options import current_options
    from ..service.launch import node_stats
    from ..service.rundir import ServiceUnreachable, service_dir

    try:
        services = node_stats(service_dir(current_options().service_dir or None, create=False))
    except ServiceUnreachable:
        services = []
    return {"services": len(services), "gpu_calls": sum(int(s.get("gpu_calls", 0)) for s in services),
            "gpu_pages": sum(int(s.get("gpu_pages", 0)) for s in services)}


def _gpu_processes() -> int | None:
    """Processes holding a CUDA context on the node's GPUs (nvidia-smi), None without it."""
    from .system import nvidia_smi

    text, _ = nvidia_smi("compute-apps=pid")
    return None if text is None else len(text.split())


def _mean_report(reports: list[dict]) -> dict | None:
    reports = [r for r in reports if r]
    if not reports:
        return None
    n = len(reports)
    stages: dict[str, float] = {}
    for r in reports:
        for k, v in r["stages_s"].items():
            stages[k] = stages.get(k, 0.0) + v / n
    backends: dict[str, dict[str, Any]] = {}
    for r in reports:
        for entry in r["by_backend"]:
            key = f"{entry['codec']} on {entry['backend']}"
            backends.setdefault(key, {"pages": 0, "uncompressed_bytes": 0, "seconds": 0.0})
            if entry["pages"] is None or backends[key]["pages"] is None:  # pyarrow (no GPU): not counted
                backends[key]["pages"] = None
            else:
                backends[key]["pages"] += entry["pages"] // n
            backends[key]["uncompressed_bytes"] += entry["uncompressed_bytes"] // n
            backends[key]["seconds"] += entry["seconds"] / n
    decoded: dict[str, int] = {}
    for r in reports:
        for entry in r.get("columns", []):
            decoded[entry["decoded_on"]] = decoded.get(entry["decoded_on"], 0) + entry["arrow_bytes"] // n
    last = reports[-1]
    return {
        "stages_s": stages,
        "backends": backends,
        "decoded_arrow_bytes": decoded,
        "batches": last["batches"],
        "fallbacks": last["fallbacks"],
        "retries": last["retries"],
        "decoded": decode_summary(last.get("columns", [])),
    }


def decode_summary(columns: list[dict]) -> dict | None:
    """Where one read's columns were decoded: the GPU's share of the Arrow bytes, and why not on the GPU.

    Parameters
    ----------
    columns : list of dict
        ``ReadReport.to_dict()["columns"]``.

    Returns
    -------
    dict or None
        ``gpu_fraction`` (of the Arrow bytes decoded), ``arrow_bytes``,
        ``gpu_columns`` and ``pyarrow_columns`` (names), and ``why_not_gpu``:
        ``{reason: fraction of the Arrow bytes}``; None when the report
        has no column records.
    """
    total = sum(int(c["arrow_bytes"]) for c in columns)
    if not columns:
        return None
    gpu = sum(int(c["arrow_bytes"]) for c in columns if c["decoded_on"] == "gpu")
    why: dict[str, float] = {}
    for c in columns:
        if c["decoded_on"] != "gpu":
            reason = c["why_not_gpu"] or "unknown"
            why[reason] = why.get(reason, 0.0) + (int(c["arrow_bytes"]) / total if total else 0.0)
    return {
        "gpu_fraction": gpu / total if total else None,
        "arrow_bytes": total,
        "gpu_columns": sorted({c["column"] for c in columns if c["decoded_on"] == "gpu"}),
        "pyarrow_columns": sorted({c["column"] for c in columns if c["decoded_on"] != "gpu"}),
        "why_not_gpu": dict(sorted(why.items(), key=lambda kv: -kv[1])),
    }


def _mean_gpu(runs: list) -> dict | None:
    runs = [r for r in runs if r]
    if not runs:
        return None
    calls = sum(r["calls"] for r in runs)
    pages = sum(r["pages"] for r in runs)
    return {"services": max(r["services"] for r in runs),
            "gpu_processes": max((r["gpu_processes"] for r in runs if r["gpu_processes"] is not None), default=None),
            "calls_per_read": calls / len(runs), "pages_per_call": pages / calls if calls else None}


def measure_dataset(scheduler: Scheduler, variants: dict, dataset: Dataset, repeats: int, warmup: bool = True,
                    tick=None) -> dict:
    """Every usable variant on every codec of ``dataset``, ``repeats`` times.

    Runs are interleaved (repeat, codec, variant) so that drift of the
    machine spreads over all variants alike. A variant that applies to some
    codecs only (the ceiling) has figures for those only. With ``warmup``,
    every (variant, codec) pair is read once, untimed, before the first
    timed read, so that no timed read pays for a first use: numba compiles
    (or loads from its cache) the kernels in each worker process, a GPU
    backend loads a codec's kernels on its first call of that codec, the
    GPU service warms its decoder up when a client that decodes on the GPU
    first attaches. A warm-up of each variant on one codec left the other
    codecs' first uses in their first timed read. A pair whose warm-up
    read fails is not timed (its error is reported).

    Returns
    -------
    dict
        ``{variant: {codec: figures}}``; figures hold summaries of
        ``seconds``, ``arrow_gbps``, ``file_gbps``, ``cpu_s_per_gb`` and a
        mean ``report``, or an ``error``.
    """
    usable = {k: v for k, v in variants.items() if v.unavailable is None}
    raw: dict = {v: {c: [] for c in dataset.dirs} for v in usable}
    errors: dict = {}
    if warmup:
        for codec, path in dataset.dirs.items():
            for name, variant in usable.items():
                if not variant.applies_to(codec):
                    continue
                try:
                    measure_read(scheduler, variant, path)
                except Exception as exc:  # reported per pair, the run goes on
                    errors[(name, codec)] = f"{type(exc).__name__}: {exc}"
                if tick:
                    tick()
    for _ in range(repeats):
        for codec, path in dataset.dirs.items():
            for name, variant in usable.items():
                if not variant.applies_to(codec):
                    continue
                if (name, codec) in errors:
                    continue
                try:
                    raw[name][codec].append(measure_read(scheduler, variant, path))
                except Exception as exc:
                    errors[(name, codec)] = f"{type(exc).__name__}: {exc}"
                if tick:
                    tick()
    gb = dataset.arrow_bytes / 1e9
    out: dict = {}
    for name in variants:
        out[name] = {}
        for codec in dataset.dirs:
            if not variants[name].applies_to(codec):
                continue
            if name not in usable:
                out[name][codec] = {"error": f"unavailable: {variants[name].unavailable}"}
                continue
            err = errors.get((name, codec))
            runs = raw[name][codec]
            if err or not runs:
                out[name][codec] = {"error": err or "no run"}
                continue
            secs = [r["seconds"] for r in runs]
            file_bytes = (dataset.ipc_bytes or 0) if variants[name].reads_ipc else dataset.file_bytes[codec]
            out[name][codec] = {
                "seconds": summarize(secs),
                "arrow_gbps": summarize([gb / s for s in secs]),
                "file_gbps": summarize([file_bytes / 1e9 / s for s in secs]),
                "cpu_s_per_gb": summarize([r["cpu_seconds"] / gb for r in runs]),
                "report": _mean_report([r["report"] for r in runs]),
                "gpu": _mean_gpu([r["gpu"] for r in runs]),
            }
    return out
