"""A read's report as ``distributed`` fine performance metrics.

Inside a task on a ``distributed`` worker, :func:`digest` hands each figure
of a :class:`~dask_hwdecomp.report.ReadReport` to
``distributed.metrics.context_meter``: stage times as seconds (so they show
as their own activities in the dashboard's Fine Performance Metrics),
bytes and page counts per backend and codec (for ``pyarrow (no GPU)``
reads: bytes from the footer and a count of files, no pages). Outside a
worker it does nothing. :func:`cluster_metrics` reads the totals back from the scheduler.
"""

from __future__ import annotations

from ..report import PYARROW_NO_GPU, UNKNOWN_CODEC, ReadReport

__all__ = ["digest", "cluster_metrics", "PREFIX"]

PREFIX = "hwdecomp"


def digest(report: ReadReport) -> None:
    """Send ``report``'s figures to the current task's context meter."""
    try:
        from distributed.metrics import context_meter
    except ImportError:  # pragma: no cover - distributed is a dependency
        return
    for stage, seconds in report.stages.items():
        if seconds:
            context_meter.digest_metric(f"{PREFIX}-{stage}", seconds, "seconds")
    for (backend, codec), s in report.by_backend.items():
        label = f"{PREFIX}-{backend}-{codec}"
        if backend == PYARROW_NO_GPU:
            # pyarrow does not count pages; its bytes come from the footer.
            if codec != UNKNOWN_CODEC:
                context_meter.digest_metric(label, s.compressed_bytes, "compressed-bytes")
                context_meter.digest_metric(label, s.uncompressed_bytes, "bytes")
            continue
        context_meter.digest_metric(label, s.pages, "pages")
        context_meter.digest_metric(label, s.compressed_bytes, "compressed-bytes")
        context_meter.digest_metric(label, s.uncompressed_bytes, "bytes")
    if any(backend == PYARROW_NO_GPU for backend, _ in report.by_backend):
        context_meter.digest_metric(f"{PREFIX}-{PYARROW_NO_GPU}", report.files, "files")
    if report.fallbacks:
        context_meter.digest_metric(f"{PREFIX}-fallback", len(report.fallbacks), "files")
    if report.retries:
        context_meter.digest_metric(f"{PREFIX}-cpu-retry", len(report.retries), "pages")


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
