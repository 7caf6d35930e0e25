"""The benchmark's targets, checked against one run's figures.

The targets, in this order (end to end on the distributed scheduler, for
each LocalCluster shape of the run, the 16×1 and 4×4 ones for their shape
only; the threaded scheduler's figures are reported, not checked):

=====================================================================  ==========
measure                                                                target
=====================================================================  ==========
lineitem, hwdecomp-auto, every codec: throughput ÷ pyarrow on the      >= 0.97
uncompressed copy
entropy (high-entropy), same                                           >= 0.90
every dataset, uncompressed files: hwdecomp-auto ÷ pyarrow             >= 0.97
every dataset, hwdecomp-cpu ÷ pyarrow on the same codec, every codec   >= 0.95
every dataset, worker CPU s/GB of hwdecomp-auto (GPU service           <= 1.05
included), every codec, ÷ pyarrow's on the uncompressed copy
16×1 lineitem read: processes with a CUDA context on the GPUs          = 1
16×1 lineitem read: mean pages per batched GPU call, every codec       >= 2000
decompression alone, host to host, default options, best GPU backend,  >= 45 GB/s
1 MiB pages and 64 KiB pages: snappy, lz4_raw, zstd                    (gzip 28)
GPU decoding: lineitem, snappy, LocalCluster 4×4: throughput of        >= 3.0
hwdecomp-auto (decode auto: on the GPU) ÷ pyarrow on snappy
GPU decoding: high-entropy, every codec: hwdecomp-auto ÷ pyarrow on    >= 3.0
the same codec
GPU decoding: every dataset and codec, worker CPU s/GB of              <= 0.5
hwdecomp-auto (GPU service included)
GPU decode kernels alone, lineitem, files on the device: GB/s of       >= 100
Arrow output
=====================================================================  ==========

Beside the GPU decoding targets, a reference row per dataset (no target):
the decode-free ceiling (Arrow IPC, :mod:`.ceiling`) ÷ pyarrow, what no
engine that decodes on the CPU can pass.

pyarrow on the uncompressed copy is the bound decoding alone sets: beating
it on a compressed codec means decompression costs the read nothing.

Each check names exactly one measured figure (``what``), its target, the
figure (``measured``, and ``value``), whether it is met (None: not measured,
not measurable on this machine, or not judged on a small read), by how much
it is missed and what the run's own figures say limits it (``limit``). An
end-to-end check also records its ``dataset`` and cluster ``shape``; one
on a dataset under 1 GB of Arrow data (:mod:`.scale`) is not judged
(``small_read``: its figure is kept, its verdict is None).
"""

from __future__ import annotations

from typing import Any

from .e2eruns import e2e_runs, figures_of, shapes_of
from .scale import SMALL_READ_BYTES, small_reads
from .shapes import parse_shape
from .stats import ratio
from .variants import BASELINE, CEILING, DECODE_CPU, DEFAULT

__all__ = [
    "VS_UNCOMPRESSED_TARGETS",
    "UNCOMPRESSED_TARGET",
    "CPU_BACKEND_TARGET",
    "CPU_SECONDS_TARGET",
    "CONTEXTS_TARGET",
    "PAGES_PER_CALL_TARGET",
    "SERVICE_SHAPE",
    "DECOMPRESS_TARGETS_GBPS",
    "GPU_DECODE_SPEEDUP",
    "GPU_DECODE_SHAPE",
    "ENTROPY_SPEEDUP",
    "GPU_DECODE_CPU_S_PER_GB",
    "KERNEL_GBPS_TARGET",
    "check_targets",
]

# hwdecomp-auto on a compressed codec ÷ pyarrow on the uncompressed copy, per dataset.
VS_UNCOMPRESSED_TARGETS = {"lineitem": 0.97, "entropy": 0.90}
# hwdecomp-auto ÷ pyarrow, both on the uncompressed files.
UNCOMPRESSED_TARGET = 0.97
# hwdecomp-cpu ÷ pyarrow on the same codec.
CPU_BACKEND_TARGET = 0.95
# hwdecomp-auto worker CPU s/GB ÷ pyarrow's on the uncompressed copy.
CPU_SECONDS_TARGET = 1.05
# One GPU service per GPU, holding the only CUDA context there.
CONTEXTS_TARGET = 1
PAGES_PER_CALL_TARGET = 2000
# The cluster shape and dataset the GPU service targets are measured on.
SERVICE_SHAPE = (16, 1)
SERVICE_DATASET = "lineitem"
# Host-to-host decompression at the default options, GB/s of output.
DECOMPRESS_TARGETS_GBPS = {"snappy": 45.0, "lz4_raw": 45.0, "zstd": 45.0, "gzip": 28.0}

# GPU decoding: hwdecomp-auto ÷ pyarrow on snappy, lineitem, on this cluster shape.
GPU_DECODE_SPEEDUP = 3.0
GPU_DECODE_SHAPE = (4, 4)
GPU_DECODE_DATASET = "lineitem"
GPU_DECODE_CODEC = "snappy"
# hwdecomp-auto ÷ pyarrow on the same codec, high-entropy dataset, every codec.
ENTROPY_SPEEDUP = 3.0
# Worker CPU seconds per GB of Arrow data, GPU service included, of hwdecomp-auto.
GPU_DECODE_CPU_S_PER_GB = 0.5
# The GPU decode kernels alone on the lineitem files: GB/s of Arrow output on the device.
KERNEL_GBPS_TARGET = 100.0

_CPU_VARIANT = "hwdecomp-cpu"
_SCHED = "distributed"
_DATASET_NAMES = {"entropy": "high-entropy"}


def _figure(fig: dict | None, key: str):
    return None if not isinstance(fig, dict) or "error" in fig else fig.get(key)


def _why_missing(*figs) -> str:
    for fig in figs:
        if isinstance(fig, dict) and "error" in fig:
            return fig["error"]
    return "missing"


def _check(kind: str, what: str, target: str, **rest) -> dict[str, Any]:
    return {"kind": kind, "what": what, "target": target, **rest}


def _judge(check: dict, value: float | None, target: float, higher: bool, why_missing: str) -> bool:
    """Fill ``measured``/``value``/``met`` of a ratio check; True when missed."""
    if value is None:
        check.update(measured=None, met=None, limit=f"not measured: {why_missing}")
        return False
    met = value >= target if higher else value <= target
    # Three decimals where two would print the target itself for a miss.
    shown = f"{value:.2f}" if met or f"{value:.2f}" != f"{target:.2f}" else f"{value:.3f}"
    check.update(value=value, measured=shown, met=met)
    if not met:
        check["limit"] = f"missed by {_percent((target - value) / target if higher else (value - target) / target)}"
    return not met


def _percent(miss: float) -> str:
    return f"{100 * miss:.0f}%" if miss >= 0.005 else f"{100 * miss:.1f}%"


def _stage_text(report: dict | None) -> str | None:
    if not report:
        return None
    stages = report["stages_s"]
    total = sum(stages.values()) or 1.0
    parts = ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in sorted(stages.items(), key=lambda kv: -kv[1]))
    backends = ", ".join(sorted(report.get("backends", {})))
    text = f"stage shares (threaded run, summed over threads): {parts}; pages decompressed by: {backends or 'none'}"
    if backends and all(k.endswith(" on cpu") for k in report["backends"]):
        text += ("; every page was decompressed on the CPU pool, so decompression is CPU work in series with "
                 "decoding and nothing is taken off the CPU")
    return text


def _gpu_text(fig: dict | None, codec: str) -> str | None:
    gpu = _figure(fig, "gpu")
    if not gpu or codec == "uncompressed":  # no page of it goes to a GPU
        return None
    if not gpu.get("calls_per_read"):
        return f"no batched GPU call during the read (GPU services: {gpu['services']}): its pages were not decompressed on a GPU"
    procs = "unknown" if gpu["gpu_processes"] is None else gpu["gpu_processes"]
    return (f"GPU: {gpu['pages_per_call']:.0f} pages per batched call, {gpu['calls_per_read']:.0f} calls per read, "
            f"GPU services: {gpu['services']}, processes with a CUDA context: {procs}")


def _threaded_report(run: _Run, variant: str, codec: str) -> dict | None:
    """The threaded run's mean report of ``variant`` on ``codec``: the run with as many threads as ``run``'s shape."""
    threaded = e2e_runs(run.results, run.dataset, "threads")
    same = [r for r in threaded if _total_threads(r.shape) == _total_threads(run.shape)]
    chosen = next(iter(same or threaded), None)
    fig = chosen.figures.get(variant, {}).get(codec) if chosen is not None else None
    return fig.get("report") if isinstance(fig, dict) else None


def _total_threads(shape: str) -> int | None:
    try:
        return parse_shape(shape).total_threads
    except ValueError:
        return None


def _clusters(shapes: list[str]) -> str:
    """``cluster 4x4`` or ``clusters 4x4, 16x1``: the shapes a run measured, for a reason."""
    return f"cluster{'s' if len(shapes) > 1 else ''} {', '.join(shapes) or 'shape not recorded'}"


class _Run:
    """The figures of one dataset on the distributed scheduler at one cluster shape, and how to name them."""

    def __init__(self, results: dict, dataset: str, shape: str):
        self.results = results
        self.dataset = dataset
        self.shape = shape
        self.per_variant = figures_of(results, dataset, _SCHED, shape) or {}
        measured = e2e_runs(results, dataset)
        any_sched: dict = self.per_variant or (measured[0].figures if measured else {})
        self.codecs = list(any_sched.get(BASELINE, {})) or list(next(iter(any_sched.values()), {}))
        self.where = f"{_DATASET_NAMES.get(dataset, dataset)}, LocalCluster {shape}"
        if self.per_variant:
            self.not_run = None
        elif any(r.scheduler == _SCHED for r in measured):
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
        return self.per_variant.get(variant, {}).get(codec)

    def missing(self, *figs) -> str:
        return self.not_run or _why_missing(*figs)

    def compressed(self) -> list[str]:
        return [c for c in self.codecs if c != "uncompressed"]


def _default_read(run: _Run) -> str:
    """The variant that reads at the default options: decode='cpu' where the run measured it.

    The decompression targets judge what a user gets by default; the GPU
    decoding targets judge ``hwdecomp-auto`` (decode='auto').
    """
    return DECODE_CPU if any(run.fig(DECODE_CPU, c) for c in run.codecs) else DEFAULT


def _vs_uncompressed_checks(run: _Run) -> list[dict]:
    """hwdecomp-auto on each compressed codec ÷ pyarrow on the uncompressed copy."""
    target = VS_UNCOMPRESSED_TARGETS.get(run.dataset)
    if target is None:
        return []
    bound = run.fig(BASELINE, "uncompressed")
    checks = []
    for codec in run.compressed():
        fig = run.fig(_default_read(run), codec)
        check = _check("vs-uncompressed", f"{run.where}, {codec}: throughput, {_default_read(run)} on {codec} ÷ pyarrow "
                       "on the uncompressed copy", f">= {target:.2f}")
        r = ratio(_figure(fig, "arrow_gbps"), _figure(bound, "arrow_gbps"))
        if _judge(check, r, target, True, run.missing(fig, bound)):
            why = [check["limit"]]
            same = run.fig(BASELINE, codec)
            p = ratio(_figure(same, "arrow_gbps"), _figure(bound, "arrow_gbps"))
            mine = ratio(_figure(fig, "arrow_gbps"), _figure(same, "arrow_gbps"))
            if p is not None and mine is not None:
                why.append(f"pyarrow itself reads {codec} at {p:.2f} of its uncompressed speed, so the target asks for "
                           f"{target / p:.2f}x pyarrow on {codec}; {_default_read(run)} reaches {mine:.2f}x")
            own = ratio(_figure(run.fig(_default_read(run), "uncompressed"), "arrow_gbps"), _figure(bound, "arrow_gbps"))
            if own is not None:
                why.append(f"{_default_read(run)} on the uncompressed files reaches {own:.2f} of pyarrow ("
                           + ("fixed cost of fetch, scan and image" if own < UNCOMPRESSED_TARGET else "no fixed-cost penalty")
                           + ")")
            why += [t for t in (_gpu_text(fig, codec), _stage_text(_threaded_report(run, _default_read(run), codec))) if t]
            check["limit"] = "; ".join(why)
        checks.append(check)
    return checks


def _uncompressed_check(run: _Run) -> list[dict]:
    """hwdecomp-auto ÷ pyarrow, both reading the uncompressed files."""
    if "uncompressed" not in run.codecs:
        return []
    fig, base = run.fig(_default_read(run), "uncompressed"), run.fig(BASELINE, "uncompressed")
    check = _check("uncompressed", f"{run.where}, uncompressed: throughput, {_default_read(run)} ÷ pyarrow on the same "
                   "uncompressed files", f">= {UNCOMPRESSED_TARGET:.2f}")
    r = ratio(_figure(fig, "arrow_gbps"), _figure(base, "arrow_gbps"))
    if _judge(check, r, UNCOMPRESSED_TARGET, True, run.missing(fig, base)):
        stages = _stage_text(_threaded_report(run, _default_read(run), "uncompressed"))
        check["limit"] += "; no page is decompressed here, so all of the gap is hwdecomp's own fetch, scan and image cost"
        if stages:
            check["limit"] += "; " + stages
    return [check]


def _cpu_backend_checks(run: _Run) -> list[dict]:
    """hwdecomp-cpu ÷ pyarrow on the same codec (throughput)."""
    checks = []
    for codec in run.codecs:
        fig, base = run.fig(_CPU_VARIANT, codec), run.fig(BASELINE, codec)
        check = _check("cpu-backend", f"{run.where}, {codec}: throughput, hwdecomp-cpu ÷ pyarrow on the same {codec} "
                       "files", f">= {CPU_BACKEND_TARGET:.2f}")
        r = ratio(_figure(fig, "arrow_gbps"), _figure(base, "arrow_gbps"))
        if _judge(check, r, CPU_BACKEND_TARGET, True, run.missing(fig, base)):
            stages = _stage_text(_threaded_report(run, _CPU_VARIANT, codec))
            if stages:
                check["limit"] += "; " + stages
        checks.append(check)
    return checks


def _cpu_seconds_checks(run: _Run) -> list[dict]:
    """hwdecomp-auto worker CPU s/GB ÷ pyarrow's on the uncompressed copy."""
    bound = run.fig(BASELINE, "uncompressed")
    checks = []
    for codec in run.codecs:
        fig = run.fig(_default_read(run), codec)
        check = _check("cpu-seconds", f"{run.where}, {codec}: worker CPU s per GB (GPU service included), "
                       f"{_default_read(run)} ÷ pyarrow on the uncompressed copy", f"<= {CPU_SECONDS_TARGET:.2f}")
        r = ratio(_figure(fig, "cpu_s_per_gb"), _figure(bound, "cpu_s_per_gb"))
        if _judge(check, r, CPU_SECONDS_TARGET, False, run.missing(fig, bound)):
            why = [check["limit"]]
            mine, unc = _figure(fig, "cpu_s_per_gb"), _figure(bound, "cpu_s_per_gb")
            same = _figure(run.fig(BASELINE, codec), "cpu_s_per_gb")
            if same is not None and codec != "uncompressed":
                why.append(f"pyarrow spends {same['median']:.2f} s/GB on {codec} and {unc['median']:.2f} on the "
                           f"uncompressed copy, {_default_read(run)} {mine['median']:.2f}")
            why += [t for t in (_gpu_text(fig, codec), _stage_text(_threaded_report(run, _default_read(run), codec))) if t]
            check["limit"] = "; ".join(why)
        checks.append(check)
    return checks


def _service_checks(results: dict) -> list[dict]:
    """On the 16×1 lineitem read: one CUDA context, and full batched calls."""
    shapes = shapes_of(results, _SCHED)
    label = f"{SERVICE_SHAPE[0]}x{SERVICE_SHAPE[1]}"
    measured = label in shapes
    # Without a 16x1 cluster, another shape's run names the variant and the codecs of the unmeasured lines.
    shape = label if measured or not shapes else shapes[0]
    run = _Run(results, SERVICE_DATASET, shape) if SERVICE_DATASET in results.get("endtoend", {}) else None
    name = _default_read(run) if run is not None else DEFAULT
    contexts = _check("contexts", f"{SERVICE_DATASET}, LocalCluster {label}, {name}: processes with a CUDA "
                      "context on the GPUs (most during any read)", f"= {CONTEXTS_TARGET}")
    codecs = run.compressed() if run else []
    per_call = [_check("pages-per-call", f"{SERVICE_DATASET}, LocalCluster {label}, {codec}: mean pages per "
                       f"batched GPU call, {name}", f">= {PAGES_PER_CALL_TARGET}") for codec in codecs]
    for check in [contexts, *per_call]:
        check.update(dataset=SERVICE_DATASET, shape=label)
    if not measured or run is None or run.not_run:
        why = (f"not measured ({_clusters(shapes)})" if not measured
               else f"not measured: {run.not_run if run else 'the run has no ' + SERVICE_DATASET + ' read'}")
        for check in [contexts, *per_call]:
            check.update(measured=None, met=None, limit=why)
        return [contexts, *per_call]
    gpus = {c: _figure(run.fig(_default_read(run), c), "gpu") for c in run.codecs}
    counted = {c: g["gpu_processes"] for c, g in gpus.items() if g and g.get("gpu_processes") is not None}
    if not counted:
        contexts.update(measured=None, met=None, limit="not measurable here: nvidia-smi is absent or lists no GPU"
                        if any(gpus.values()) else f"not measured: {run.missing(*(run.fig(_default_read(run), c) for c in run.codecs))}")
    else:
        codec, n = max(counted.items(), key=lambda kv: kv[1])
        contexts.update(value=n, measured=f"{n} (during the {codec} read)", met=n == CONTEXTS_TARGET)
        if n != CONTEXTS_TARGET:
            services = max(g["services"] for g in gpus.values() if g)
            contexts["limit"] = (f"{n} processes hold a CUDA context, GPU services: {services}: "
                                 + ("the workers did not share one service" if services > 1 else
                                    "processes other than the service hold contexts (workers, or another program)"
                                    if n > CONTEXTS_TARGET else "no process held a context during the read"))
    for codec, check in zip(codecs, per_call):
        g = gpus.get(codec)
        if g is None:
            check.update(measured=None, met=None, limit=f"not measured: {run.missing(run.fig(_default_read(run), codec))}")
        elif g.get("pages_per_call") is None:
            check.update(measured=None, met=None, limit="not measurable here: no batched GPU call ran "
                         f"(GPU services: {g['services']}; without a GPU, pages are decompressed on the CPU)")
        else:
            v = g["pages_per_call"]
            check.update(value=v, measured=f"{v:.0f} ({g['calls_per_read']:.0f} calls per read)",
                         met=v >= PAGES_PER_CALL_TARGET)
            if not check["met"]:
                pages = v * g["calls_per_read"]
                check["limit"] = f"missed by {100 * (1 - v / PAGES_PER_CALL_TARGET):.0f}%; " + (
                    f"a whole read holds only {pages:.0f} pages: the dataset is too small to fill calls of "
                    f"{PAGES_PER_CALL_TARGET}" if pages < PAGES_PER_CALL_TARGET else
                    f"a read's {pages:.0f} pages went out in {g['calls_per_read']:.0f} calls: enough pages for full "
                    "calls, but the service merged only part of the read's requests into each")
    return [contexts, *per_call]


def _copy_bounds(copy: dict, page_ratio: float) -> tuple[float | None, float | None]:
    """(overlapped, serial) bounds on GB/s of output from pinned copies."""
    pinned = copy.get("pinned") if copy else None
    if not pinned:
        return None, None
    h2d = pinned["h2d"]["median"] * page_ratio  # output GB/s the input copy allows
    d2h = pinned["d2h"]["median"]
    return min(h2d, d2h), 1.0 / (1.0 / h2d + 1.0 / d2h)


def _gbps(fig) -> float | None:
    s = _figure(fig, "gbps")
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


def _decompress_checks(results: dict) -> list[dict]:
    """GB/s of output at the default options, best GPU backend, per page size and codec."""
    dec = results.get("decompression", {})
    copy = results.get("copy_bandwidth", {})
    sets = [("1 MiB", dec, dec.get("backends")), ("64 KiB", dec.get("small_pages", {}), dec.get("small_pages", {}).get("backends"))]
    checks = []
    for size, info, backends in sets:
        for codec, target in DECOMPRESS_TARGETS_GBPS.items():
            check = _check("decompress", f"decompression alone, host to host, {codec}, {size} pages: GB/s of output "
                           "at the default options, best GPU backend", f">= {target:g} GB/s")
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
            check.update(measured=f"{value:.1f} GB/s ({label})", value=value, met=value >= target)
            if check["met"]:
                continue
            page_ratio = info.get("ratios", {}).get(codec, 1.0)
            why = [f"missed by {100 * (1 - value / target):.0f}% ({value:.1f} of {target:g} GB/s)"]
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
    return checks


def _decode_stages_text(report: dict | None) -> str | None:
    """Seconds of the threaded run's stages, GPU decoding against pyarrow's decoding and the I/O."""
    if not report:
        return None
    st = report["stages_s"]
    keys = ["gpu_decode", "decode", "io", "decompress", "scan", "pyarrow"]
    shown = ", ".join(f"{k} {st[k]:.2f} s" for k in keys if st.get(k))
    return f"stage profile (threaded run, summed over threads): {shown or 'no stage recorded'}"


def _decoded_text(report: dict | None) -> str | None:
    """What share of the Arrow bytes the GPU decoded, and why the rest was not."""
    dec = (report or {}).get("decoded")
    if not dec or dec.get("gpu_fraction") is None:
        return None
    text = f"the GPU decoded {100 * dec['gpu_fraction']:.0f}% of the Arrow bytes"
    if dec["why_not_gpu"]:
        text += "; pyarrow decoded the rest: " + ", ".join(f"{why} ({100 * share:.0f}%)"
                                                            for why, share in dec["why_not_gpu"].items())
    return text


def _ceiling_ratio(run: _Run, codec: str) -> float | None:
    """The decode-free ceiling (uncompressed IPC) ÷ pyarrow on ``codec``."""
    return ratio(_figure(run.fig(CEILING, "uncompressed"), "arrow_gbps"), _figure(run.fig(BASELINE, codec), "arrow_gbps"))


def _gpu_decode_limit(run: _Run, codec: str, check: dict) -> None:
    """Say, in ``check["limit"]``, what the run's figures show limits hwdecomp-auto on ``codec``."""
    why = [check["limit"]]
    ceiling = _ceiling_ratio(run, codec)
    if ceiling is not None:
        why.append(f"the decode-free ceiling reads at {ceiling:.2f}x pyarrow on {codec}")
    cpu = ratio(_figure(run.fig(DECODE_CPU, codec), "arrow_gbps"), _figure(run.fig(BASELINE, codec), "arrow_gbps"))
    if cpu is not None:
        why.append(f"{DECODE_CPU} (pyarrow decodes) reaches {cpu:.2f}x")
    report = _threaded_report(run, DEFAULT, codec)
    why += [t for t in (_decoded_text(report), _decode_stages_text(report), _gpu_text(run.fig(DEFAULT, codec), codec)) if t]
    if report is None:
        why.append("no stage profile (the threaded scheduler was not run)")
    check["limit"] = "; ".join(why)


def _gpu_decode_checks(results: dict) -> list[dict]:
    """hwdecomp-auto ÷ pyarrow: lineitem on snappy at 4×4, high-entropy on every codec."""
    e2e = results.get("endtoend", {})
    checks = []
    label = f"{GPU_DECODE_SHAPE[0]}x{GPU_DECODE_SHAPE[1]}"
    check = _check("gpu-decode", f"GPU decoding: {GPU_DECODE_DATASET}, LocalCluster {label}, {GPU_DECODE_CODEC}: "
                   f"throughput, hwdecomp-auto (decode on the GPU) ÷ pyarrow on {GPU_DECODE_CODEC}",
                   f">= {GPU_DECODE_SPEEDUP:.2f}")
    check.update(dataset=GPU_DECODE_DATASET, shape=label)
    checks.append(check)
    shapes = shapes_of(results, _SCHED)
    if GPU_DECODE_DATASET not in e2e:
        check.update(measured=None, met=None, limit=f"not measured: the run has no {GPU_DECODE_DATASET} read")
    elif label not in shapes:
        check.update(measured=None, met=None, limit=f"not measured ({_clusters(shapes)})")
    else:
        run = _Run(results, GPU_DECODE_DATASET, label)
        fig, base = run.fig(DEFAULT, GPU_DECODE_CODEC), run.fig(BASELINE, GPU_DECODE_CODEC)
        r = ratio(_figure(fig, "arrow_gbps"), _figure(base, "arrow_gbps"))
        if _judge(check, r, GPU_DECODE_SPEEDUP, True, run.missing(fig, base)):
            _gpu_decode_limit(run, GPU_DECODE_CODEC, check)
    for run in (_Run(results, "entropy", shape) for shape in shapes if "entropy" in e2e):
        for codec in run.codecs:
            fig, base = run.fig(DEFAULT, codec), run.fig(BASELINE, codec)
            check = _check("gpu-decode-entropy", f"GPU decoding: {run.where}, {codec}: throughput, hwdecomp-auto ÷ "
                           f"pyarrow on the same {codec} files", f">= {ENTROPY_SPEEDUP:.2f}")
            r = ratio(_figure(fig, "arrow_gbps"), _figure(base, "arrow_gbps"))
            if _judge(check, r, ENTROPY_SPEEDUP, True, run.missing(fig, base)):
                _gpu_decode_limit(run, codec, check)
            checks += run.tag([check])
    return checks


def _gpu_cpu_seconds_checks(run: _Run) -> list[dict]:
    """hwdecomp-auto's worker CPU s/GB, GPU service included: an absolute bound."""
    checks = []
    for codec in run.codecs:
        fig = run.fig(DEFAULT, codec)
        check = _check("gpu-cpu-seconds", f"GPU decoding: {run.where}, {codec}: worker CPU s per GB (GPU service "
                       "included), hwdecomp-auto", f"<= {GPU_DECODE_CPU_S_PER_GB:.2f}")
        mine = _figure(fig, "cpu_s_per_gb")
        if _judge(check, mine["median"] if mine else None, GPU_DECODE_CPU_S_PER_GB, False, run.missing(fig)):
            why = [check["limit"]]
            for name, what in ((BASELINE, f"pyarrow on {codec}"), (DECODE_CPU, DECODE_CPU),
                               (CEILING, "the decode-free ceiling (uncompressed IPC)")):
                other = _figure(run.fig(name, "uncompressed" if name == CEILING else codec), "cpu_s_per_gb")
                if other is not None:
                    why.append(f"{what}: {other['median']:.2f} s/GB")
            report = _threaded_report(run, DEFAULT, codec)
            why += [t for t in (_decoded_text(report), _decode_stages_text(report)) if t]
            check["limit"] = "; ".join(why)
        checks.append(check)
    return checks


def _kernel_check(results: dict) -> list[dict]:
    """The GPU decode kernels alone on the lineitem files: GB/s of Arrow output."""
    check = _check("gpu-kernels", f"GPU decode kernels alone, {GPU_DECODE_DATASET}, uncompressed files on the device: "
                   "GB/s of Arrow output (measure + place + write)", f">= {KERNEL_GBPS_TARGET:g} GB/s",
                   dataset=GPU_DECODE_DATASET)
    part = results.get("gpudecode")
    fig = (part or {}).get(GPU_DECODE_DATASET)
    if part is None:
        check.update(measured=None, met=None, limit="not measured: the gpudecode part was not run")
    elif "skipped" in part:
        check.update(measured=None, met=None, limit=f"not measurable here: {part['skipped']}")
    elif fig is None or "error" in fig:
        check.update(measured=None, met=None,
                     limit=f"not measured: {fig['error'] if fig else 'the run has no ' + GPU_DECODE_DATASET + ' dataset'}")
    else:
        v = fig["output_gbps"]["median"]
        check.update(value=v, measured=f"{v:.1f} GB/s", met=v >= KERNEL_GBPS_TARGET)
        if not check["met"]:
            why = [f"missed by {_percent(1 - v / KERNEL_GBPS_TARGET)} ({v:.1f} of {KERNEL_GBPS_TARGET:g} GB/s)",
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


def _ceiling_rows(run: _Run) -> list[dict]:
    """Reference, no target: the decode-free ceiling ÷ pyarrow on each codec."""
    ratios = {c: r for c in run.codecs if (r := _ceiling_ratio(run, c)) is not None}
    codec = GPU_DECODE_CODEC if GPU_DECODE_CODEC in run.codecs else next(iter(run.compressed()), "uncompressed")
    row = _check("ceiling", f"reference: {run.where}: throughput, decode-free ceiling (Arrow IPC of the uncompressed "
                 f"files) ÷ pyarrow on {codec}", "reference", reference=True, met=None)
    if codec not in ratios:
        row.update(measured=None, limit=f"not measured: {run.missing(run.fig(CEILING, 'uncompressed'), run.fig(BASELINE, codec))}")
        return [row]
    row.update(value=ratios[codec], measured=f"{ratios[codec]:.2f}",
               limit="no engine that decodes on the CPU reads faster; ÷ pyarrow on every codec: "
               + ", ".join(f"{c} {r:.2f}" for c, r in ratios.items()))
    return [row]


def check_targets(results: dict) -> list[dict]:
    """Every target check of ``results``, in the order of the module's table, then the reference rows.

    The end-to-end checks are made for every cluster shape of the run, in
    its order, each dataset within a shape; the shape-bound ones (16x1,
    4x4) for theirs. On a small-read dataset (:mod:`.scale`) no check is
    judged: each keeps its figure, ``met`` is None and ``limit`` says why.
    """
    runs = [_Run(results, ds, shape) for shape in shapes_of(results, _SCHED) for ds in results.get("endtoend", {})]
    checks: list[dict] = []
    for part in (_vs_uncompressed_checks, _uncompressed_check, _cpu_backend_checks, _cpu_seconds_checks):
        for run in runs:
            checks += run.tag(part(run))
    if runs:
        checks += _service_checks(results)
    checks += _decompress_checks(results)
    if runs:
        checks += _gpu_decode_checks(results)
        for run in runs:
            checks += run.tag(_gpu_cpu_seconds_checks(run))
    checks += _kernel_check(results)
    for run in runs:
        if CEILING in run.per_variant:
            checks += run.tag(_ceiling_rows(run))
    return _not_judged_on_small_reads(checks, small_reads(results))


def _not_judged_on_small_reads(checks: list[dict], small: dict[str, int]) -> list[dict]:
    """Mark the checks of small-read datasets as not judged, figure kept, with the reason."""
    for check in checks:
        nbytes = small.get(check.get("dataset", ""))
        if nbytes is None:
            continue
        why = (f"small read ({nbytes / 1e9:.3g} GB of Arrow data, under {SMALL_READ_BYTES / 1e9:g} GB): figures this "
               "small are dominated by per-task costs")
        check["small_read"] = True
        if check.get("reference"):
            check["limit"] = f"{why}; " + check.get("limit", "")
        elif check.get("met") is not None:
            check.update(met=None, limit=f"not judged at this size: {why}")
    return checks
