"""The benchmark targets that are not a ratio of two end-to-end figures, each checked its own way.

Each function here is a ``checks`` of the table in :mod:`.targets`:
``(targets, results, runs) -> list of checks``, given the table's rows of
its kind, the run's results and its end-to-end runs (:class:`.TargetRun`).

- :func:`contexts_checks`, :func:`pages_per_call_checks`: on the 16×1
  lineitem read, the processes with a CUDA context and the pages per
  batched GPU call (the GPU service's figures);
- :func:`decompress_checks`: decompression alone, best GPU backend, per
  page size and codec, with what the copies and the sweep allow;
- :func:`kernel_checks`: the GPU decode kernels alone, GB/s of output;
- :func:`ceiling_rows`: reference rows, no target: the decode-free
  ceiling ÷ pyarrow.
"""

from __future__ import annotations

from typing import NamedTuple

from .e2eruns import shapes_of
from .target_runs import (
    SCHEDULER,
    Target,
    TargetRun,
    ceiling_ratio,
    clusters,
    default_read,
    figure,
    new_check,
    percent,
)
from .variants import BASELINE, CEILING, DEFAULT

__all__ = ["contexts_checks", "pages_per_call_checks", "decompress_checks", "kernel_checks", "ceiling_rows"]


class _ServiceRead(NamedTuple):
    """The read the GPU service targets are checked on, or why it is not measured (``not_measured``)."""

    label: str
    run: TargetRun | None
    name: str
    not_measured: str | None


def _service_read(target: Target, results: dict) -> _ServiceRead:
    shapes = shapes_of(results, SCHEDULER)
    label = target.shape or ""
    measured = label in shapes
    # Without a 16x1 cluster, another shape's run names the variant and the codecs of the unmeasured lines.
    shape = label if measured or not shapes else shapes[0]
    dataset = target.dataset or ""
    run = TargetRun(results, dataset, shape) if dataset in results.get("endtoend", {}) else None
    why = None
    if not measured:
        why = f"not measured ({clusters(shapes)})"
    elif run is None or run.not_run:
        why = f"not measured: {run.not_run if run else 'the run has no ' + dataset + ' read'}"
    return _ServiceRead(label, run, default_read(run) if run is not None else DEFAULT, why)


def _gpu_figures(run: TargetRun) -> dict:
    return {c: figure(run.fig(default_read(run), c), "gpu") for c in run.codecs}


def contexts_checks(targets: tuple[Target, ...], results: dict, runs: list[TargetRun]) -> list[dict]:
    """The most processes with a CUDA context during any read of the service's run: one, the service."""
    if not runs:
        return []
    (target,) = targets
    read = _service_read(target, results)
    check = new_check(target, target.measures.format(label=read.label, read=read.name), dataset=target.dataset,
                      shape=read.label)
    if read.not_measured is not None or read.run is None:
        check.update(measured=None, met=None, limit=read.not_measured)
        return [check]
    run = read.run
    gpus = _gpu_figures(run)
    counted = {c: g[target.figure] for c, g in gpus.items() if g and g.get(target.figure) is not None}
    if not counted:
        check.update(measured=None, met=None, limit="not measurable here: nvidia-smi is absent or lists no GPU"
                     if any(gpus.values()) else f"not measured: {run.missing(*(run.fig(default_read(run), c) for c in run.codecs))}")
        return [check]
    codec, n = max(counted.items(), key=lambda kv: kv[1])
    check.update(value=n, measured=f"{n} (during the {codec} read)", met=target.met(n))
    if not check["met"]:
        services = max(g["services"] for g in gpus.values() if g)
        check["limit"] = (f"{n} processes hold a CUDA context, GPU services: {services}: "
                          + ("the workers did not share one service" if services > 1 else
                             "processes other than the service hold contexts (workers, or another program)"
                             if n > target.bound else "no process held a context during the read"))
    return [check]


def pages_per_call_checks(targets: tuple[Target, ...], results: dict, runs: list[TargetRun]) -> list[dict]:
    """Mean pages per batched GPU call on each compressed codec of the service's run."""
    if not runs:
        return []
    (target,) = targets
    read = _service_read(target, results)
    run = read.run
    if run is None:
        return []
    gpus = _gpu_figures(run) if read.not_measured is None else {}
    checks = []
    for codec in run.compressed():
        check = new_check(target, target.measures.format(label=read.label, codec=codec, read=read.name),
                          dataset=target.dataset, shape=read.label)
        checks.append(check)
        g = gpus.get(codec)
        if read.not_measured is not None:
            check.update(measured=None, met=None, limit=read.not_measured)
        elif g is None:
            check.update(measured=None, met=None, limit=f"not measured: {run.missing(run.fig(default_read(run), codec))}")
        elif g.get(target.figure) is None:
            check.update(measured=None, met=None, limit="not measurable here: no batched GPU call ran "
                         f"(GPU services: {g['services']}; without a GPU, pages are decompressed on the CPU)")
        else:
            v = g[target.figure]
            check.update(value=v, measured=f"{v:.0f} ({g['calls_per_read']:.0f} calls per read)", met=target.met(v))
            if not check["met"]:
                pages = v * g["calls_per_read"]
                check["limit"] = f"missed by {100 * (1 - v / target.bound):.0f}%; " + (
                    f"a whole read holds only {pages:.0f} pages: the dataset is too small to fill calls of "
                    f"{target.bound:g}" if pages < target.bound else
                    f"a read's {pages:.0f} pages went out in {g['calls_per_read']:.0f} calls: enough pages for full "
                    "calls, but the service merged only part of the read's requests into each")
    return checks


def _copy_bounds(copy: dict, page_ratio: float) -> tuple[float | None, float | None]:
    """(overlapped, serial) bounds on GB/s of output from pinned copies."""
    pinned = copy.get("pinned") if copy else None
    if not pinned:
        return None, None
    h2d = pinned["h2d"]["median"] * page_ratio  # output GB/s the input copy allows
    d2h = pinned["d2h"]["median"]
    return min(h2d, d2h), 1.0 / (1.0 / h2d + 1.0 / d2h)


def _gbps(fig) -> float | None:
    s = figure(fig, "gbps")
    return None if not s else s.get("median")


def _best_gpu(backends: dict, codec: str) -> tuple[str, float] | None:
    """The GPU backend with the highest GB/s on ``codec``, and that figure."""
    best = None
    for label, per_codec in backends.items():
        v = None if label.startswith("cpu") else _gbps(per_codec.get(codec))
        if v is not None and (best is None or v > best[1]):
            best = (label, v)
    return best


def _sweep_best(sweep: dict, label: str, codec: str) -> tuple[float, str] | None:
    points = [(v, p) for p in sweep.get(label, {}).get(codec, []) if (v := _gbps(p)) is not None]
    if not points:
        return None
    v, p = max(points, key=lambda vp: vp[0])
    return v, f"{p['pages_per_call']} pages per call, {p['streams']} streams"


def _decompress_miss(check: dict, target: Target, value: float, label: str, size: str, dec: dict, info: dict,
                     copy: dict) -> None:
    """Say, in ``check["limit"]``, what the copies, the sweep and the large pages allow."""
    codec = target.codec or ""
    page_ratio = info.get("ratios", {}).get(codec, 1.0)
    why = [f"missed by {100 * (1 - value / target.bound):.0f}% ({value:.1f} of {target.bound:g} GB/s)"]
    over, serial = _copy_bounds(copy, page_ratio)
    if over is not None and serial is not None:
        why.append(f"pinned copies allow {over:.1f} GB/s of output with both directions overlapped, {serial:.1f} "
                   f"in series (compression ratio {page_ratio:.2f})" + (
                       ": the run is copy-bound; only overlapping the copies or a faster link helps"
                       if value >= 0.9 * serial else ": the kernels (or their launch per call), not PCIe, limit it"))
    swept = _sweep_best(dec.get("sweep", {}), label, codec) if size == "1 MiB" else None
    if swept and swept[0] > value:
        why.append(f"the sweep's best point reaches {swept[0]:.1f} GB/s ({swept[1]}): the defaults leave "
                   f"{100 * (1 - value / swept[0]):.0f}% of it")
    large = _gbps(dec.get("backends", {}).get(label, {}).get(codec)) if size != "1 MiB" else None
    if large is not None:
        why.append(f"with 1 MiB pages {label} reaches {large:.1f} GB/s"
                   + (": the cost per page limits small pages" if large > value * 1.1 else ""))
    check["limit"] = "; ".join(why)


def decompress_checks(targets: tuple[Target, ...], results: dict, runs: list[TargetRun]) -> list[dict]:
    """GB/s of output at the default options, best GPU backend, per page size and codec."""
    dec = results.get("decompression", {})
    copy = results.get("copy_bandwidth", {})
    sets = [("1 MiB", dec, dec.get("backends")), ("64 KiB", dec.get("small_pages", {}), dec.get("small_pages", {}).get("backends"))]
    checks = []
    for size, info, backends in sets:
        for target in targets:
            codec = target.codec or ""
            check = new_check(target, target.measures.format(codec=codec, size=size))
            checks.append(check)
            if backends is None:
                check.update(measured=None, met=None, limit="not measured: " + (
                    "the decompress part was not run" if "backends" not in dec else f"this run has no {size} page set"))
                continue
            best = _best_gpu(backends, codec)
            if best is None:
                if not any(codec in per for per in backends.values()):
                    check.update(measured=None, met=None, limit=f"not measured: {codec} is not in this run")
                    continue
                missing = dec.get("unavailable", {})
                reasons = "; ".join(f"{k}: {v}" for k, v in missing.items()) or "none was asked for"
                cpu = ", ".join(f"{k} {v:.2f} GB/s" for k, per in backends.items()
                                if k.startswith("cpu-") and k != "cpu-1" and (v := _gbps(per.get(codec))) is not None)
                check.update(measured=None, met=None, limit=f"not measurable here: no GPU backend ran ({reasons}). "
                             f"CPU pool for reference: {cpu or 'not run'}")
                continue
            label, value = best
            check.update(measured=f"{value:.1f} GB/s ({label})", value=value, met=target.met(value))
            if not check["met"]:
                _decompress_miss(check, target, value, label, size, dec, info, copy)
    return checks


def kernel_checks(targets: tuple[Target, ...], results: dict, runs: list[TargetRun]) -> list[dict]:
    """The GPU decode kernels alone on the lineitem files: GB/s of Arrow output."""
    (target,) = targets
    dataset = target.dataset or ""
    check = new_check(target, target.measures.format(dataset=dataset), dataset=dataset)
    part = results.get("gpudecode")
    fig = (part or {}).get(dataset)
    if part is None:
        check.update(measured=None, met=None, limit="not measured: the gpudecode part was not run")
    elif "skipped" in part:
        check.update(measured=None, met=None, limit=f"not measurable here: {part['skipped']}")
    elif fig is None or "error" in fig:
        check.update(measured=None, met=None,
                     limit=f"not measured: {fig['error'] if fig else 'the run has no ' + dataset + ' dataset'}")
    else:
        v = fig[target.figure]["median"]
        check.update(value=v, measured=f"{v:.1f} GB/s", met=target.met(v))
        if not check["met"]:
            why = [f"missed by {percent(1 - v / target.bound)} ({v:.1f} of {target.bound:g} GB/s)",
                   f"input {fig['input_gbps']['median']:.1f} GB/s; {fig['files']} files, {fig['chunks']} column "
                   f"chunks, {fig['pages']} pages ({fig['pages'] / max(1, fig['files']):.0f} a file, one launch "
                   "sequence a file)"]
            if "merged_output_gbps" in fig:
                why.append(f"the files merged into one batch, as the GPU service decodes concurrent reads: "
                           f"{fig['merged_output_gbps']['median']:.1f} GB/s")
            if fig.get("fallbacks"):
                why.append("left to pyarrow: " + ", ".join(f"{c} ({r})" for c, r in fig["fallbacks"].items()))
            check["limit"] = "; ".join(why)
    return [check]


def ceiling_rows(targets: tuple[Target, ...], results: dict, runs: list[TargetRun]) -> list[dict]:
    """Reference, no target: the decode-free ceiling ÷ pyarrow on each codec, a row for each run that read it."""
    (target,) = targets
    rows = []
    for run in runs:
        if CEILING not in run.per_variant:
            continue
        ratios = {c: r for c in run.codecs if (r := ceiling_ratio(run, c)) is not None}
        codec = target.codec if target.codec and target.codec in run.codecs else next(iter(run.compressed()), "uncompressed")
        row = new_check(target, target.measures.format(where=run.where, codec=codec), reference=True, met=None)
        if codec not in ratios:
            row.update(measured=None, limit=f"not measured: {run.missing(run.fig(CEILING, 'uncompressed'), run.fig(BASELINE, codec))}")
        else:
            row.update(value=ratios[codec], measured=f"{ratios[codec]:.2f}",
                       limit="no engine that decodes on the CPU reads faster; ÷ pyarrow on every codec: "
                       + ", ".join(f"{c} {r:.2f}" for c, r in ratios.items()))
        rows += run.tag([row])
    return rows
