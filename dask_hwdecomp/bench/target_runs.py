"""A benchmark target, and the figures it is checked on.

A :class:`Target` is one row of the table in :mod:`.targets`: its kind,
what it measures, its limit and which figure. A :class:`TargetRun` is one
dataset read on the distributed scheduler at one LocalCluster shape, with
its figures by variant and codec, how a check names it (``where``) and why
a figure is missing. :func:`new_check` and :func:`judge` make a check's
record and fill in its verdict; the other helpers read one figure of a
run's record (None where it is missing or failed), the threaded run a
reason quotes, and the variant that reads at the default options.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .e2eruns import e2e_runs, figures_of
from .shapes import parse_shape
from .stats import ratio
from .variants import BASELINE, CEILING, DEFAULT

__all__ = ["SCHEDULER", "DEFAULT_READ", "SAME_CODEC", "Target", "TargetRun", "new_check", "judge", "figure", "why_missing", "where", "default_read", "threaded_report",
           "clusters", "ceiling_ratio", "percent"]

# The targets are for a LocalCluster; the threaded scheduler's figures are reported, not checked.
SCHEDULER = "distributed"
_DATASET_NAMES = {"entropy": "high-entropy"}
# A target's variant: whichever reads at the default options (:func:`default_read`).
DEFAULT_READ = "default read"
# A target's ``over`` codec: the codec of the figure it divides.
SAME_CODEC = "same codec"


@dataclass(frozen=True)
class Target:
    """One benchmark target: what it measures, the limit, which figure, and how it is checked.

    Attributes
    ----------
    kind : str
        The checks' ``kind`` in results.json; the table's rows of one kind
        are checked together, in the table's order.
    measures : str
        The checks' ``what``: a template of ``{where}`` (dataset and
        cluster shape), ``{codec}`` and ``{read}`` (the variant).
    limit : float or None
        The target figure; None for a reference row (no target).
    figure : str
        Which figure of the variant's record is checked (``arrow_gbps``,
        ``cpu_s_per_gb``, ...).
    op : str
        ``">="``, ``"<="`` or ``"="``: how the figure must compare with the limit.
    shown : str
        The format of the limit in ``target`` (``".2f"``, ``"g"``), and
    unit : str
        its unit there.
    variant : str
        Whose figure: a variant, or :data:`DEFAULT_READ`.
    over : tuple of (str, str), or None
        The variant and codec the figure is divided by (codec
        :data:`SAME_CODEC`: the checked one); None: the figure's median is
        checked as it is.
    codecs : str
        The codecs checked: ``"every"``, ``"compressed"``, ``"uncompressed"``.
    dataset, shape, codec : str or None
        The only dataset, cluster shape and codec the target is for.
    reasons : callable or None
        ``(target, run, codec) -> list of str``: what limits a missed check,
        after "missed by N%" (:mod:`.target_reasons`).
    checks : callable or None
        ``(targets, results, runs) -> list of checks``: a target checked
        its own way, given the table's rows of its kind; None: a ratio of
        two figures (or one figure) for every run, codec by codec.
    """

    kind: str
    measures: str
    limit: float | None
    figure: str
    op: str = ">="
    shown: str = ".2f"
    unit: str = ""
    variant: str = DEFAULT_READ
    over: tuple[str, str] | None = (BASELINE, SAME_CODEC)
    codecs: str = "every"
    dataset: str | None = None
    shape: str | None = None
    codec: str | None = None
    reasons: Callable[..., list[str]] | None = None
    checks: Callable[..., list[dict]] | None = None

    @property
    def target(self) -> str:
        """The target as results.json and the report show it: ``>= 0.97``, ``>= 45 GB/s``, ``reference``."""
        if self.limit is None:
            return "reference"
        return f"{self.op} {self.limit:{self.shown}}{self.unit}"

    @property
    def bound(self) -> float:
        """The limit of a target row.

        Raises
        ------
        ValueError
            For a reference row, which has no target.
        """
        if self.limit is None:
            raise ValueError(f"{self.kind}: a reference row has no target")
        return float(self.limit)

    def met(self, value: float) -> bool:
        """Whether ``value`` meets the target.

        Raises
        ------
        ValueError
            For a reference row, which has no target.
        """
        if self.op == "=":
            return value == self.bound
        return value >= self.bound if self.op == ">=" else value <= self.bound


def new_check(target: Target, what: str, **rest) -> dict[str, Any]:
    """A check's record of ``target``: its kind, what it measured, the target, then ``rest``."""
    return {"kind": target.kind, "what": what, "target": target.target, **rest}


def judge(check: dict, target: Target, value: float | None, why_missing: str) -> bool:
    """Fill ``measured``/``value``/``met`` of a ratio check; True when missed."""
    if value is None:
        check.update(measured=None, met=None, limit=f"not measured: {why_missing}")
        return False
    met = target.met(value)
    limit = target.bound
    # Three decimals where two would print the target itself for a miss.
    shown = f"{value:.2f}" if met or f"{value:.2f}" != f"{limit:.2f}" else f"{value:.3f}"
    check.update(value=value, measured=shown, met=met)
    if not met:
        check["limit"] = f"missed by {percent((limit - value if target.op == '>=' else value - limit) / limit)}"
    return not met


def figure(fig: dict | None, key: str):
    """``fig[key]``, or None where the figure is missing or its read failed."""
    return None if not isinstance(fig, dict) or "error" in fig else fig.get(key)


def why_missing(*figs) -> str:
    """The error of the first failed figure of ``figs``, else ``"missing"``."""
    for fig in figs:
        if isinstance(fig, dict) and "error" in fig:
            return fig["error"]
    return "missing"


def where(dataset: str, shape: str) -> str:
    """How a check names a dataset's run: ``high-entropy, LocalCluster 4x4``."""
    return f"{_DATASET_NAMES.get(dataset, dataset)}, LocalCluster {shape}"


def clusters(shapes: list[str]) -> str:
    """``cluster 4x4`` or ``clusters 4x4, 16x1``: the shapes a run measured, for a reason."""
    return f"cluster{'s' if len(shapes) > 1 else ''} {', '.join(shapes) or 'shape not recorded'}"


def percent(miss: float) -> str:
    """A miss as a share of its target: ``12%``, or ``0.3%`` under half a percent."""
    return f"{100 * miss:.0f}%" if miss >= 0.005 else f"{100 * miss:.1f}%"


class TargetRun:
    """The figures of one dataset on the distributed scheduler at one cluster shape, and how to name them.

    Parameters
    ----------
    results : dict
        The run's results (``results.json``).
    dataset : str
    shape : str
        ``"4x4"``: the LocalCluster's workers × threads.
    """

    def __init__(self, results: dict, dataset: str, shape: str):
        self.results = results
        self.dataset = dataset
        self.shape = shape
        self.per_variant = figures_of(results, dataset, SCHEDULER, shape) or {}
        measured = e2e_runs(results, dataset)
        any_sched: dict = self.per_variant or (measured[0].figures if measured else {})
        self.codecs = list(any_sched.get(BASELINE, {})) or list(next(iter(any_sched.values()), {}))
        self.where = where(dataset, shape)
        if self.per_variant:
            self.not_run = None
        elif any(r.scheduler == SCHEDULER for r in measured):
            self.not_run = f"the run has no LocalCluster {shape} read of {dataset}"
        else:
            self.not_run = "the distributed scheduler was not run (the targets are for a LocalCluster)"

    def tag(self, checks: list[dict]) -> list[dict]:
        """``checks`` with this run's dataset and shape recorded in each (results.json names every figure's shape)."""
        for check in checks:
            check.setdefault("dataset", self.dataset)
            check.setdefault("shape", self.shape)
        return checks

    def fig(self, variant: str, codec: str) -> dict | None:
        """The figures of ``variant`` on ``codec``, or None."""
        return self.per_variant.get(variant, {}).get(codec)

    def missing(self, *figs) -> str:
        """Why a check of ``figs`` has no figure: the run was not made, or the first failed figure's error."""
        return self.not_run or why_missing(*figs)

    def compressed(self) -> list[str]:
        """The run's codecs but ``uncompressed``."""
        return [c for c in self.codecs if c != "uncompressed"]


def default_read(run: TargetRun) -> str:
    """The variant that reads at the default options: ``hwdecomp-auto`` (decode='auto').

    The targets judge what a user gets by default.
    """
    return DEFAULT


def _total_threads(shape: str) -> int | None:
    try:
        return parse_shape(shape).total_threads
    except ValueError:
        return None


def threaded_report(run: TargetRun, variant: str, codec: str) -> dict | None:
    """The threaded run's mean report of ``variant`` on ``codec``: the run with as many threads as ``run``'s shape."""
    threaded = e2e_runs(run.results, run.dataset, "threads")
    same = [r for r in threaded if _total_threads(r.shape) == _total_threads(run.shape)]
    chosen = next(iter(same or threaded), None)
    fig = chosen.figures.get(variant, {}).get(codec) if chosen is not None else None
    return fig.get("report") if isinstance(fig, dict) else None


def ceiling_ratio(run: TargetRun, codec: str) -> float | None:
    """The decode-free ceiling (uncompressed IPC) ÷ pyarrow on ``codec``."""
    return ratio(figure(run.fig(CEILING, "uncompressed"), "arrow_gbps"), figure(run.fig(BASELINE, codec), "arrow_gbps"))
