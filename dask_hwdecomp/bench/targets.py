"""The benchmark's targets, a table, checked against one run's figures.

:data:`TARGETS` is the table: one :class:`~.target_runs.Target` a row, in
the order the checks come out (end to end on the distributed scheduler,
for each LocalCluster shape of the run, the 16×1 and 4×4 ones for their
shape only; the threaded scheduler's figures are reported, not checked).
In words:

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

Most rows are a ratio of two figures (or one figure) of every run, codec
by codec, checked by :func:`check_targets` itself; the others name their
own ``checks`` (:mod:`.target_checks`).
"""

from __future__ import annotations

from itertools import groupby

from .e2eruns import shapes_of
from .scale import SMALL_READ_BYTES, small_reads
from .stats import ratio
from .target_checks import (
    ceiling_rows,
    contexts_checks,
    decompress_checks,
    kernel_checks,
    pages_per_call_checks,
)
from .target_reasons import (
    UNCOMPRESSED_LIMIT,
    cpu_backend_reasons,
    cpu_seconds_reasons,
    gpu_cpu_seconds_reasons,
    gpu_decode_reasons,
    uncompressed_reasons,
    vs_uncompressed_reasons,
)
from .target_runs import (
    DEFAULT_READ,
    SAME_CODEC,
    SCHEDULER,
    Target,
    TargetRun,
    clusters,
    default_read,
    figure,
    judge,
    new_check,
    where,
)
from .variants import BASELINE, DEFAULT

__all__ = ["Target", "TARGETS", "check_targets"]

_UNCOMPRESSED_COPY = (BASELINE, "uncompressed")
_DECOMPRESS = ("decompression alone, host to host, {codec}, {size} pages: GB/s of output at the default options, "
               "best GPU backend")


def _gpu_decode_checks(targets: tuple[Target, ...], results: dict, runs: list[TargetRun]) -> list[dict]:
    """hwdecomp-auto ÷ pyarrow on one dataset, codec and cluster shape: a check whether or not it was run."""
    if not runs:
        return []
    (target,) = targets
    dataset, shape, codec = target.dataset or "", target.shape or "", target.codec or ""
    shapes = shapes_of(results, SCHEDULER)
    if dataset in results.get("endtoend", {}) and shape in shapes:
        return [_ratio_check(target, TargetRun(results, dataset, shape), codec, dataset=dataset, shape=shape)]
    check = new_check(target, target.measures.format(where=where(dataset, shape), codec=codec), dataset=dataset,
                      shape=shape)
    why = (f"not measured: the run has no {dataset} read" if dataset not in results.get("endtoend", {})
           else f"not measured ({clusters(shapes)})")
    check.update(measured=None, met=None, limit=why)
    return [check]


TARGETS: tuple[Target, ...] = (
    Target(kind="vs-uncompressed", dataset="lineitem", limit=0.97, figure="arrow_gbps", over=_UNCOMPRESSED_COPY,
           codecs="compressed", reasons=vs_uncompressed_reasons,
           measures="{where}, {codec}: throughput, {read} on {codec} ÷ pyarrow on the uncompressed copy"),
    Target(kind="vs-uncompressed", dataset="entropy", limit=0.90, figure="arrow_gbps", over=_UNCOMPRESSED_COPY,
           codecs="compressed", reasons=vs_uncompressed_reasons,
           measures="{where}, {codec}: throughput, {read} on {codec} ÷ pyarrow on the uncompressed copy"),
    Target(kind="uncompressed", limit=UNCOMPRESSED_LIMIT, figure="arrow_gbps", codecs="uncompressed",
           reasons=uncompressed_reasons,
           measures="{where}, uncompressed: throughput, {read} ÷ pyarrow on the same uncompressed files"),
    Target(kind="cpu-backend", limit=0.95, figure="arrow_gbps", variant="hwdecomp-cpu", reasons=cpu_backend_reasons,
           measures="{where}, {codec}: throughput, hwdecomp-cpu ÷ pyarrow on the same {codec} files"),
    Target(kind="cpu-seconds", limit=1.05, op="<=", figure="cpu_s_per_gb", over=_UNCOMPRESSED_COPY,
           reasons=cpu_seconds_reasons,
           measures="{where}, {codec}: worker CPU s per GB (GPU service included), {read} ÷ pyarrow on the "
                    "uncompressed copy"),
    # One GPU service per GPU, holding the only CUDA context there.
    Target(kind="contexts", dataset="lineitem", shape="16x1", limit=1, op="=", shown="g", figure="gpu_processes",
           checks=contexts_checks,
           measures="lineitem, LocalCluster {label}, {read}: processes with a CUDA context on the GPUs (most during "
                    "any read)"),
    Target(kind="pages-per-call", dataset="lineitem", shape="16x1", limit=2000, shown="g", figure="pages_per_call",
           checks=pages_per_call_checks,
           measures="lineitem, LocalCluster {label}, {codec}: mean pages per batched GPU call, {read}"),
    # Host-to-host decompression at the default options, GB/s of output.
    *(Target(kind="decompress", codec=codec, limit=limit, shown="g", unit=" GB/s", figure="gbps",
             checks=decompress_checks, measures=_DECOMPRESS)
      for codec, limit in (("snappy", 45.0), ("lz4_raw", 45.0), ("zstd", 45.0), ("gzip", 28.0))),
    Target(kind="gpu-decode", dataset="lineitem", shape="4x4", codec="snappy", limit=3.0, figure="arrow_gbps",
           variant=DEFAULT, reasons=gpu_decode_reasons, checks=_gpu_decode_checks,
           measures="GPU decoding: {where}, {codec}: throughput, hwdecomp-auto (decode on the GPU) ÷ pyarrow on "
                    "{codec}"),
    Target(kind="gpu-decode-entropy", dataset="entropy", limit=3.0, figure="arrow_gbps", variant=DEFAULT,
           reasons=gpu_decode_reasons,
           measures="GPU decoding: {where}, {codec}: throughput, hwdecomp-auto ÷ pyarrow on the same {codec} files"),
    Target(kind="gpu-cpu-seconds", limit=0.5, op="<=", figure="cpu_s_per_gb", variant=DEFAULT, over=None,
           reasons=gpu_cpu_seconds_reasons,
           measures="GPU decoding: {where}, {codec}: worker CPU s per GB (GPU service included), hwdecomp-auto"),
    Target(kind="gpu-kernels", dataset="lineitem", limit=100.0, shown="g", unit=" GB/s", figure="output_gbps",
           checks=kernel_checks,
           measures="GPU decode kernels alone, {dataset}, uncompressed files on the device: GB/s of Arrow output "
                    "(measure + place + write)"),
    Target(kind="ceiling", codec="snappy", limit=None, figure="arrow_gbps", checks=ceiling_rows,
           measures="reference: {where}: throughput, decode-free ceiling (Arrow IPC of the uncompressed files) ÷ "
                    "pyarrow on {codec}"),
)


def _codecs(target: Target, run: TargetRun) -> list[str]:
    if target.codecs == "compressed":
        return run.compressed()
    if target.codecs == "uncompressed":
        return ["uncompressed"] if "uncompressed" in run.codecs else []
    return run.codecs


def _ratio_check(target: Target, run: TargetRun, codec: str, **rest) -> dict:
    """``target`` on ``run``'s ``codec``: its variant's figure (÷ the ``over`` one), judged, a miss explained."""
    read = default_read(run) if target.variant == DEFAULT_READ else target.variant
    fig = run.fig(read, codec)
    check = new_check(target, target.measures.format(where=run.where, codec=codec, read=read), **rest)
    if target.over is None:
        mine = figure(fig, target.figure)
        value, missing = (mine["median"] if mine else None), run.missing(fig)
    else:
        variant, over_codec = target.over
        base = run.fig(variant, codec if over_codec == SAME_CODEC else over_codec)
        value, missing = ratio(figure(fig, target.figure), figure(base, target.figure)), run.missing(fig, base)
    if judge(check, target, value, missing) and target.reasons is not None:
        check["limit"] = "; ".join([check["limit"], *target.reasons(target, run, codec)])
    return check


def check_targets(results: dict) -> list[dict]:
    """Every target check of ``results``, in the order of :data:`TARGETS`, the reference rows last.

    The end-to-end checks are made for every cluster shape of the run, in
    its order, each dataset within a shape; the shape-bound ones (16x1,
    4x4) for theirs. On a small-read dataset (:mod:`.scale`) no check is
    judged: each keeps its figure, ``met`` is None and ``limit`` says why.

    Parameters
    ----------
    results : dict
        One run's results (``results.json``).

    Returns
    -------
    list of dict
        One check a target and run (and codec, page size), as results.json
        holds them under ``targets``.
    """
    runs = [TargetRun(results, ds, shape) for shape in shapes_of(results, SCHEDULER) for ds in results.get("endtoend", {})]
    checks: list[dict] = []
    for _kind, rows in groupby(TARGETS, key=lambda t: t.kind):
        targets = tuple(rows)
        if targets[0].checks is not None:
            checks += targets[0].checks(targets, results, runs)
            continue
        for run in runs:
            for target in targets:
                if target.dataset in (None, run.dataset):
                    checks += run.tag([_ratio_check(target, run, codec) for codec in _codecs(target, run)])
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
