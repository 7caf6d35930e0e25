"""A read's report as ``distributed`` fine performance metrics.

Inside a task on a ``distributed`` worker, :func:`digest` hands each figure
of a :class:`~dask_hwdecomp.report.ReadReport` to
``distributed.metrics.context_meter``: stage times as seconds (so they show
as their own activities in the dashboard's Fine Performance Metrics),
bytes and page counts per backend and codec (for ``pyarrow (no GPU)``
reads: bytes from the footer and a count of files, no pages). Outside a
worker it does nothing. :func:`cluster_metrics` reads the totals back from
the scheduler (they travel with worker heartbeats, so they lag a read by up
to a heartbeat); :func:`cluster_report` asks every worker's
:class:`~dask_hwdecomp.engine.plugin.HwdecompPlugin` instead, and is exact
once the reads' tasks have finished.
"""

from __future__ import annotations

from ..report import PYARROW_NO_GPU, PYARROW_READERS, UNKNOWN_CODEC, ReadReport

__all__ = ["digest", "cluster_metrics", "cluster_report", "PREFIX"]

PREFIX = "hwdecomp"


def digest(report: ReadReport) -> None:
    """Send ``report``'s figures to the current task's context meter and worker plugin."""
    try:
        from distributed import get_worker
        from distributed.metrics import context_meter
    except ImportError:  # pragma: no cover - distributed is a dependency
        return
    try:
        plugin = get_worker().extensions.get("hwdecomp")
    except ValueError:  # not inside a distributed worker
        plugin = None
    if plugin is not None:
        plugin.add(report)
    for stage, seconds in report.stages.items():
        if seconds:
            context_meter.digest_metric(f"{PREFIX}-{stage}", seconds, "seconds")
    for (backend, codec), s in report.by_backend.items():
        label = f"{PREFIX}-{backend}-{codec}"
        if backend in PYARROW_READERS:
            # pyarrow does not count pages; its bytes come from the footer.
            if codec != UNKNOWN_CODEC:
                context_meter.digest_metric(label, s.compressed_bytes, "compressed-bytes")
                context_meter.digest_metric(label, s.uncompressed_bytes, "bytes")
            continue
        context_meter.digest_metric(label, s.pages, "pages")
        context_meter.digest_metric(label, s.compressed_bytes, "compressed-bytes")
        context_meter.digest_metric(label, s.uncompressed_bytes, "bytes")
    if any(backend == PYARROW_NO_GPU for backend, _ in report.by_backend):
        # Such a read went to pyarrow whole: every file of it.
        context_meter.digest_metric(f"{PREFIX}-{PYARROW_NO_GPU}", report.files, "files")
    for where, total in report.decoded_on().items():
        # Arrow bytes decoded on the GPU and by pyarrow: where decoding went.
        context_meter.digest_metric(f"{PREFIX}-decoded-on-{where}", total["arrow_bytes"], "bytes")
    if report.fallbacks:
        context_meter.digest_metric(f"{PREFIX}-fallback", len(report.fallbacks), "files")
    if report.retries:
        context_meter.digest_metric(f"{PREFIX}-cpu-retry", len(report.retries), "pages")
    for backend, pages in report.redone.items():
        context_meter.digest_metric(f"{PREFIX}-{backend}-redone-on-cpu", pages, "pages")


def cluster_metrics(client) -> dict:
    """hwdecomp's cumulative metrics from the scheduler: ``{(label, unit): value}``.

    Workers send metrics with their heartbeat, so figures of a read appear
    a heartbeat after it ends.

    Parameters
    ----------
    client : distributed.Client
    """

    def collect(dask_scheduler=None):
        out = {}
        for key, value in dask_scheduler.cumulative_worker_metrics.items():
            if isinstance(key, tuple) and len(key) >= 2:
                label, unit = key[-2], key[-1]
                if isinstance(label, str) and label.startswith(PREFIX + "-"):
                    out[(label, unit)] = out.get((label, unit), 0) + value
        return out

    return client.run_on_scheduler(collect)


def cluster_report(client, reset: bool = False) -> ReadReport:
    """The workers' ``dd.read_parquet`` reads, summed: exact once their tasks finished.

    Each worker's :class:`~dask_hwdecomp.engine.plugin.HwdecompPlugin` adds
    up the report of every ``dd.read_parquet(engine=hwdecomp)`` partition
    read on it before the task returns, so after ``compute``/``wait``
    returns nothing is missing or late.

    Parameters
    ----------
    client : distributed.Client
    reset : bool
        Start every worker's totals again from zero.

    Raises
    ------
    RuntimeError
        A worker without the plugin (register ``HwdecompPlugin`` first).
    """

    def take(dask_worker=None):
        plugin = dask_worker.extensions.get("hwdecomp")
        return None if plugin is None else plugin.take_totals(reset)

    total = ReadReport()
    for address, report in sorted(client.run(take).items()):
        if report is None:
            raise RuntimeError(
                f"worker {address} has no HwdecompPlugin; register it with "
                "client.register_plugin(HwdecompPlugin()) before reading"
            )
        total += report
    return total
