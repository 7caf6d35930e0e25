"""What a run's own figures say limits a missed end-to-end target.

Each ``*_reasons`` function is a target's ``reasons`` in the table of
:mod:`.targets`: given the target, the run and the codec of a missed
check, it returns the parts its ``limit`` adds after "missed by N%":
what pyarrow itself does on the codec, the variant's own fixed cost, the
GPU calls, the threaded run's stage shares, what share of the bytes the
GPU decoded.
"""

from __future__ import annotations

from .stats import ratio
from .target_runs import Target, TargetRun, ceiling_ratio, default_read, figure, threaded_report
from .variants import BASELINE, CEILING, DECODE_CPU, DEFAULT

__all__ = ["UNCOMPRESSED_LIMIT", "vs_uncompressed_reasons", "uncompressed_reasons", "cpu_backend_reasons", "cpu_seconds_reasons",
           "gpu_decode_reasons", "gpu_cpu_seconds_reasons"]

# The uncompressed target's limit (hwdecomp ÷ pyarrow, both on the
# uncompressed files): under it, a read pays a fixed cost of its own.
UNCOMPRESSED_LIMIT = 0.97


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
    gpu = figure(fig, "gpu")
    if not gpu or codec == "uncompressed":  # no page of it goes to a GPU
        return None
    if not gpu.get("calls_per_read"):
        return f"no batched GPU call during the read (GPU services: {gpu['services']}): its pages were not decompressed on a GPU"
    procs = "unknown" if gpu["gpu_processes"] is None else gpu["gpu_processes"]
    return (f"GPU: {gpu['pages_per_call']:.0f} pages per batched call, {gpu['calls_per_read']:.0f} calls per read, "
            f"GPU services: {gpu['services']}, processes with a CUDA context: {procs}")


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


def _present(*texts: str | None) -> list[str]:
    return [t for t in texts if t]


def _read_texts(run: TargetRun, codec: str) -> list[str]:
    """The default read's GPU calls and the threaded run's stage shares."""
    read = default_read(run)
    return _present(_gpu_text(run.fig(read, codec), codec), _stage_text(threaded_report(run, read, codec)))


def vs_uncompressed_reasons(target: Target, run: TargetRun, codec: str) -> list[str]:
    """pyarrow's own cost of ``codec``, the default read's fixed cost, its GPU calls and stages."""
    read = default_read(run)
    why = []
    bound = run.fig(BASELINE, "uncompressed")
    same = run.fig(BASELINE, codec)
    p = ratio(figure(same, "arrow_gbps"), figure(bound, "arrow_gbps"))
    mine = ratio(figure(run.fig(read, codec), "arrow_gbps"), figure(same, "arrow_gbps"))
    if p is not None and mine is not None:
        why.append(f"pyarrow itself reads {codec} at {p:.2f} of its uncompressed speed, so the target asks for "
                   f"{target.bound / p:.2f}x pyarrow on {codec}; {read} reaches {mine:.2f}x")
    own = ratio(figure(run.fig(read, "uncompressed"), "arrow_gbps"), figure(bound, "arrow_gbps"))
    if own is not None:
        why.append(f"{read} on the uncompressed files reaches {own:.2f} of pyarrow ("
                   + ("fixed cost of fetch, scan and image" if own < UNCOMPRESSED_LIMIT else "no fixed-cost penalty")
                   + ")")
    return why + _read_texts(run, codec)


def uncompressed_reasons(target: Target, run: TargetRun, codec: str) -> list[str]:
    """No page is decompressed: the gap is hwdecomp's own; the threaded run's stage shares."""
    return ["no page is decompressed here, so all of the gap is hwdecomp's own fetch, scan and image cost",
            *_present(_stage_text(threaded_report(run, default_read(run), "uncompressed")))]


def cpu_backend_reasons(target: Target, run: TargetRun, codec: str) -> list[str]:
    """The threaded run's stage shares of hwdecomp-cpu."""
    return _present(_stage_text(threaded_report(run, target.variant, codec)))


def cpu_seconds_reasons(target: Target, run: TargetRun, codec: str) -> list[str]:
    """pyarrow's CPU seconds on ``codec`` and on the uncompressed copy, the default read's; GPU calls and stages."""
    read = default_read(run)
    why = []
    mine = figure(run.fig(read, codec), "cpu_s_per_gb")
    unc = figure(run.fig(BASELINE, "uncompressed"), "cpu_s_per_gb")
    same = figure(run.fig(BASELINE, codec), "cpu_s_per_gb")
    if same is not None and codec != "uncompressed":
        why.append(f"pyarrow spends {same['median']:.2f} s/GB on {codec} and {unc['median']:.2f} on the "
                   f"uncompressed copy, {read} {mine['median']:.2f}")
    return why + _read_texts(run, codec)


def gpu_decode_reasons(target: Target, run: TargetRun, codec: str) -> list[str]:
    """The decode-free ceiling, pyarrow decoding, the share the GPU decoded, the stages and GPU calls."""
    why = []
    ceiling = ceiling_ratio(run, codec)
    if ceiling is not None:
        why.append(f"the decode-free ceiling reads at {ceiling:.2f}x pyarrow on {codec}")
    cpu = ratio(figure(run.fig(DECODE_CPU, codec), "arrow_gbps"), figure(run.fig(BASELINE, codec), "arrow_gbps"))
    if cpu is not None:
        why.append(f"{DECODE_CPU} (pyarrow decodes) reaches {cpu:.2f}x")
    report = threaded_report(run, DEFAULT, codec)
    why += _present(_decoded_text(report), _decode_stages_text(report), _gpu_text(run.fig(DEFAULT, codec), codec))
    if report is None:
        why.append("no stage profile (the threaded scheduler was not run)")
    return why


def gpu_cpu_seconds_reasons(target: Target, run: TargetRun, codec: str) -> list[str]:
    """The CPU seconds of pyarrow, pyarrow decoding and the decode-free ceiling; the share the GPU decoded."""
    why = []
    for name, what in ((BASELINE, f"pyarrow on {codec}"), (DECODE_CPU, DECODE_CPU),
                       (CEILING, "the decode-free ceiling (uncompressed IPC)")):
        other = figure(run.fig(name, "uncompressed" if name == CEILING else codec), "cpu_s_per_gb")
        if other is not None:
            why.append(f"{what}: {other['median']:.2f} s/GB")
    report = threaded_report(run, DEFAULT, codec)
    return why + _present(_decoded_text(report), _decode_stages_text(report))
