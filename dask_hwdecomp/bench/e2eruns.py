"""The end-to-end figures of a run's results: one record per dataset, scheduler and shape.

``results.json`` holds them as ``endtoend[dataset][scheduler][shape]`` =
``{variant: {codec: figures}}``, the LocalCluster shapes listed in
``config["shapes"]`` (the threaded scheduler's follow from them:
:func:`.shapes.threaded_shapes`). Results written before a run measured
several shapes hold ``endtoend[dataset][scheduler]`` for one shape,
``config["workers"]`` × ``config["threads"]``; they are read here the same
way, so the report, the plots and the target checks see one layout (and
``hwdecomp bench --rerender`` still reads old results).
"""

from __future__ import annotations

from dataclasses import dataclass

from .shapes import parse_shape, parse_shapes, threaded_shapes

__all__ = ["E2eRun", "cluster_shapes", "shapes_of", "e2e_runs", "figures_of"]


@dataclass(frozen=True)
class E2eRun:
    """The figures of one dataset read on one scheduler at one shape.

    Attributes
    ----------
    dataset : str
    scheduler : str
        ``"distributed"`` or ``"threads"``.
    shape : str
        ``"4x4"``: a LocalCluster's workers × threads; the threaded
        scheduler's is ``1xN``, N threads in the benchmark's process.
    figures : dict
        ``{variant: {codec: figures}}``.
    """

    dataset: str
    scheduler: str
    shape: str
    figures: dict

    @property
    def where(self) -> str:
        """``"LocalCluster 4x4"`` or ``"threaded scheduler, 16 threads"``."""
        if self.scheduler == "distributed":
            return f"LocalCluster {self.shape}"
        try:
            return f"threaded scheduler, {parse_shape(self.shape).total_threads} threads"
        except ValueError:  # results that recorded no shape
            return f"threaded scheduler, shape {self.shape}"


def _by_shape(results: dict) -> bool:
    return "shapes" in results.get("config", {})


def cluster_shapes(results: dict) -> list[str]:
    """The LocalCluster shapes the run was asked for (whether or not it ran the distributed scheduler)."""
    cfg = results.get("config", {})
    if _by_shape(results):
        return [str(s) for s in parse_shapes(cfg["shapes"])]
    if cfg.get("workers") and cfg.get("threads"):
        return [f"{cfg['workers']}x{cfg['threads']}"]
    return []


def shapes_of(results: dict, scheduler: str) -> list[str]:
    """The shapes ``scheduler`` was run at (or was to be run at), in order."""
    cluster = cluster_shapes(results)
    if scheduler == "distributed" or not cluster:
        return cluster
    return [str(s) for s in threaded_shapes(cluster)]


def e2e_runs(results: dict, dataset: str | None = None, scheduler: str | None = None) -> list[E2eRun]:
    """Every measured (dataset, scheduler, shape), in the order measured; optionally of one dataset or scheduler."""
    out = []
    for ds, per_sched in results.get("endtoend", {}).items():
        if dataset is not None and ds != dataset:
            continue
        for sched, value in per_sched.items():
            if scheduler is not None and sched != scheduler:
                continue
            if _by_shape(results):
                out += [E2eRun(ds, sched, shape, figures) for shape, figures in value.items()]
            else:
                out.append(E2eRun(ds, sched, next(iter(shapes_of(results, sched)), "?"), value))
    return out


def figures_of(results: dict, dataset: str, scheduler: str, shape: str) -> dict | None:
    """``{variant: {codec: figures}}`` of one run, or None when it was not measured."""
    return next((r.figures for r in e2e_runs(results, dataset, scheduler) if r.shape == shape), None)
