"""``report.md``: the run's figures as tables, the target checks, the plots."""

from __future__ import annotations

import math

from .e2eruns import E2eRun, cluster_shapes, e2e_runs, shapes_of
from .scale import SMALL_READ_NOTE, small_reads
from .stats import ratio
from .system import format_system
from .variants import BASELINE, CEILING, CEILING_LABEL, DECODE_CPU, DEFAULT

__all__ = ["render_report"]


def _num(x: float) -> str:
    """Three significant figures, never in exponent form."""
    if x == 0 or abs(x) >= 100:
        return f"{x:.0f}"
    digits = max(0, 2 - int(math.floor(math.log10(abs(x)))))
    return f"{x:.{digits}f}"


def _fmt(summary, _unused: int = 3) -> str:
    """Median (min–max), three significant figures."""
    if not summary or summary.get("median") is None:
        return "–"
    if summary["n"] == 1:
        return _num(summary["median"])
    return f"{_num(summary['median'])} ({_num(summary['min'])}–{_num(summary['max'])})"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _cell(fig, key):
    if not isinstance(fig, dict):
        return "–"
    if "error" in fig:
        return "n/a" if fig["error"].startswith("unavailable") else "error"
    return _fmt(fig.get(key))


def _label(name: str) -> str:
    """A variant's column name; the ceiling's says it is not an engine."""
    return f"{name} (reference)" if name == CEILING else name


def _e2e_section(results: dict) -> list[str]:
    lines = []
    small = small_reads(results)
    for run in e2e_runs(results):
        ds, per_variant = run.dataset, run.figures
        names = list(per_variant)
        codecs = list(next(iter(per_variant.values())).keys())
        bound = per_variant.get(BASELINE, {}).get("uncompressed", {})
        lines += ["", f"### {ds}, {run.where}" + (" (small read)" if ds in small else ""), ""]
        rows = []
        for codec in codecs:
            row = [codec]
            for n in names:
                row.append(_cell(per_variant[n].get(codec), "arrow_gbps"))
            for n in names[1:]:
                fig = per_variant[n].get(codec, {})
                r = ratio(fig.get("arrow_gbps") if "error" not in fig else None, per_variant[BASELINE].get(codec, {}).get("arrow_gbps"))
                b = ratio(fig.get("arrow_gbps") if "error" not in fig else None, bound.get("arrow_gbps") if "error" not in bound else None)
                row.append(f"{r:.2f} / {b:.2f}" if r and b else "–")
            rows.append(row)
        lines.append("GB/s of Arrow data, median (min–max); ratios: vs pyarrow on the same codec / vs pyarrow on the uncompressed copy.")
        if DECODE_CPU in per_variant:
            lines.append(f"{DEFAULT} reads at the default options (decode='auto': where a GPU backend is in use "
                         f"the GPU decodes the columns it supports); {DECODE_CPU} is the same read with "
                         "decode='cpu' (pyarrow decodes every column; the GPU decompresses the codecs where "
                         "that is faster than pyarrow's own read, pyarrow reads the others itself).")
        lines.append("")
        lines += _table(["codec"] + [_label(n) for n in names] + [f"{_label(n)}: ratios" for n in names[1:]], rows)
        if CEILING in per_variant:
            plan = results.get("ceiling", {}).get(ds, {})
            parts = f"{plan['partitions']} partitions: {plan['how']}" if "partitions" in plan else "the Parquet read's partitions"
            lines += ["", f"{_label(CEILING)}: {CEILING_LABEL}, read through `dd.from_map` ({parts}) and "
                      "converted to pandas as dask's pyarrow engine does: the same table and the same tasks with "
                      "nothing to find, decompress or decode, so what a read costs apart from Parquet. A reference, "
                      "not a target; measured on the uncompressed row only."]
        lines += ["", "GB/s of file bytes (the ceiling's: of its IPC files) and worker CPU seconds per GB of Arrow data:", ""]
        rows = [
            [codec]
            + [_cell(per_variant[n].get(codec), "file_gbps") for n in names]
            + [_cell(per_variant[n].get(codec), "cpu_s_per_gb") for n in names]
            for codec in codecs
        ]
        lines += _table(["codec"] + [f"{_label(n)} file GB/s" for n in names] + [f"{_label(n)} CPU s/GB" for n in names], rows)
        gpu_rows = [
            [f"{n} / {codec}", str(g["services"]), "–" if g["gpu_processes"] is None else str(g["gpu_processes"]),
             f"{g['calls_per_read']:.0f}", "–" if g["pages_per_call"] is None else f"{g['pages_per_call']:.0f}"]
            for n in names for codec in codecs
            for g in [(per_variant[n].get(codec) or {}).get("gpu")] if g and g["calls_per_read"]
        ]
        if gpu_rows:
            lines += ["", "The GPU service during these reads (services of this user, processes with a CUDA "
                      "context on the GPUs, batched GPU calls per read, pages per call):", ""]
            lines += _table(["variant / codec", "services", "GPU processes", "calls per read", "pages per call"],
                            gpu_rows)
        errors = {
            f"{n} / {c}": f["error"]
            for n, v in per_variant.items()
            for c, f in v.items()
            if isinstance(f, dict) and "error" in f
        }
        if errors:
            lines += ["", "Not measured: " + "; ".join(f"{k}: {v}" for k, v in sorted(errors.items())[:8])]
    return lines


def _threaded_runs(results: dict) -> list[tuple[str, E2eRun]]:
    """``(dataset label, run)`` of each threaded run; the label names the threads when the run had several totals."""
    several = len(shapes_of(results, "threads")) > 1
    return [(f"{r.dataset}, {r.where}" if several else r.dataset, r) for r in e2e_runs(results, scheduler="threads")]


def _stage_section(results: dict) -> list[str]:
    rows = []
    for label, run in _threaded_runs(results):
        gb = results["datasets"][run.dataset]["arrow_bytes"] / 1e9
        for name, per_codec in run.figures.items():
            for codec, fig in per_codec.items():
                rep = fig.get("report") if isinstance(fig, dict) else None
                if not rep:
                    continue
                st = rep["stages_s"]
                rows.append(
                    [label, name, codec]
                    + [f"{st.get(k, 0.0) / gb:.3f}" for k in ("io", "scan", "decompress", "gpu_decode", "decode")]
                    + [", ".join(sorted(rep.get("backends", {}))) or "–", _decoded_by(rep), str(rep.get("batches", ""))]
                )
    if not rows:
        return ["", "No stage report (no hwdecomp variant ran under the threaded scheduler)."]
    return ["", "Seconds per GB of Arrow data, summed over threads (mean of repeats):", ""] + _table(
        ["dataset", "variant", "codec", "io", "scan", "decompress", "gpu_decode", "decode", "decompressed by",
         "decoded by (Arrow MB)", "batches"], rows
    ) + _decoded_section(results)


def _decoded_section(results: dict) -> list[str]:
    """Where each hwdecomp variant's columns were decoded (from the threaded run's reports)."""
    rows = []
    for label, run in _threaded_runs(results):
        for name, per_codec in run.figures.items():
            for codec, fig in per_codec.items():
                dec = ((fig.get("report") if isinstance(fig, dict) else None) or {}).get("decoded")
                if not dec:
                    continue
                share = "–" if dec["gpu_fraction"] is None else f"{100 * dec['gpu_fraction']:.0f}%"
                why = "; ".join(f"{w} ({100 * f:.0f}%)" for w, f in dec["why_not_gpu"].items()) or "–"
                rows.append([label, name, codec, share, str(len(dec["gpu_columns"])), str(len(dec["pyarrow_columns"])), why])
    if not rows:
        return []
    return ["", "Where the columns were decoded (last repeat's report): share of the Arrow bytes decoded on the GPU, "
            "columns decoded on the GPU and by pyarrow, and why not on the GPU (share of the Arrow bytes):", ""] + _table(
        ["dataset", "variant", "codec", "on the GPU", "GPU columns", "pyarrow columns", "why not on the GPU"], rows)


def _merged(fig: dict) -> str:
    """The merged figure of a dataset's GPU decode kernels: GB/s, why it failed, or a dash."""
    if "merged_output_gbps" in fig:
        return _fmt(fig["merged_output_gbps"])
    if "merged_error" in fig:
        return "error: " + fig["merged_error"][:80]
    return "–"


def _gpudecode_section(results: dict) -> list[str]:
    """The GPU decode kernels alone, per dataset."""
    part = results.get("gpudecode")
    if not part:
        return ["", "Not run (the gpudecode part was not asked for)."]
    if "skipped" in part:
        return ["", f"Not measured: {part['skipped']}."]
    rows, timing, merged = [], "", ""
    for ds, fig in part.items():
        if "error" in fig:
            rows.append([ds, "error: " + fig["error"][:120], "", "", "", "", "", ""])
            continue
        timing = fig.get("timing", timing)
        merged = fig.get("merged_timing", merged)
        left = ", ".join(f"{c} ({r})" for c, r in fig.get("fallbacks", {}).items()) or "–"
        rows.append([ds, str(fig["files"]), f"{fig['input_bytes'] / 1e9:.3f}", f"{fig['output_bytes'] / 1e9:.3f}",
                     _fmt(fig["output_gbps"]), _merged(fig),
                     _fmt(fig["input_gbps"]), left])
    also = f"; merged: {merged}, as the GPU service decodes reads that reach it together" if merged else ""
    return ["", f"Each dataset's uncompressed files, the column chunks already on the device; timed: {timing}"
            f"{also}. GB/s median (min–max) of the repeats.", ""] + _table(
        ["dataset", "files", "input GB", "Arrow output GB", "Arrow output GB/s", "merged: Arrow output GB/s",
         "input GB/s", "left to pyarrow"], rows)


def _decoded_by(rep: dict) -> str:
    """``gpu 812.3, pyarrow 40.1``: Arrow MB decoded per place (a mean run's), or "–"."""
    decoded = rep.get("decoded_arrow_bytes") or {}
    return ", ".join(f"{where} {b / 1e6:.1f}" for where, b in sorted(decoded.items())) or "–"


def _page_size(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def _decompress_section(results: dict) -> list[str]:
    dec = results.get("decompression", {})
    lines = []
    copy = results.get("copy_bandwidth", {})
    if "skipped" in copy:
        lines.append(f"- Pinned copy bandwidth: not measured ({copy['skipped']}).")
    elif copy:
        for kind in ("pinned", "pageable"):
            if kind in copy:
                lines.append(f"- {kind.capitalize()} copies, GB/s: host to device {_fmt(copy[kind]['h2d'], 1)}, device to host {_fmt(copy[kind]['d2h'], 1)}.")
    for name, why in dec.get("unavailable", {}).items():
        lines.append(f"- Backend {name} not measured: {why}.")
    for info in (dec, dec.get("small_pages", {})):
        backends = info.get("backends", {})
        if not backends:
            continue
        if lines:
            lines.append("")
        codecs = sorted({c for v in backends.values() for c in v})
        pages = info.get("pages", {})
        size = _page_size(pages.get("page_bytes", 1 << 20))
        lines += [f"{size} pages ({pages.get('count', '?')} of them), default options: GB/s of output, median "
                  "(min–max); compression ratio of the pages: "
                  + ", ".join(f"{c} {r:.2f}" for c, r in info.get("ratios", {}).items()), ""]
        rows = [[label] + [_cell(per.get(c), "gbps") for c in codecs] for label, per in backends.items()]
        lines += _table(["backend"] + codecs, rows)
    sweep = dec.get("sweep", {})
    if sweep:
        lines += ["", "Sweep (GB/s of output, median), by pages per call:", ""]
        sizes = sorted({p["pages_per_call"] for v in sweep.values() for pts in v.values() for p in pts})
        rows = []
        for label, per_codec in sweep.items():
            for codec, pts in per_codec.items():
                for s in dict.fromkeys(p["streams"] for p in pts):
                    by = {p["pages_per_call"]: p for p in pts if p["streams"] == s}
                    rows.append([label, codec, str(s or "–")] + [(_fmt(by[n]["gbps"], 1) if n in by and "gbps" in by[n] else "–") for n in sizes])
        lines += _table(["backend", "codec", "streams"] + [str(n) for n in sizes], rows)
    lines += _checksum_section(dec.get("checksums", {}))
    return lines


_TARGETS_NOTE = (
    "Each line is one measured figure against its own target, in this order: hwdecomp-auto on each compressed codec "
    "against pyarrow on the uncompressed copy (what decoding alone allows: lineitem >= 0.97, high-entropy >= 0.90); "
    "hwdecomp-auto against pyarrow on the uncompressed files (>= 0.97); the CPU backend against pyarrow on the same "
    "codec (>= 0.95); hwdecomp-auto's worker CPU seconds per GB, GPU service included, against pyarrow's on the "
    "uncompressed copy (<= 1.05); on a 16x1 LocalCluster reading lineitem, one process with a CUDA context and at "
    "least 2000 pages per batched GPU call; decompression alone at the default options with 1 MiB and 64 KiB pages "
    "(>= 45 GB/s, gzip >= 28); GPU decoding: hwdecomp-auto (decode on the GPU) against pyarrow on lineitem snappy at "
    "4x4 (>= 3.0) and on every high-entropy codec (>= 3.0), its worker CPU seconds per GB, GPU service included "
    "(<= 0.5), and the GPU decode kernels alone on lineitem (>= 100 GB/s of Arrow output); last, per dataset, the "
    "decode-free ceiling against pyarrow (a reference, no target). End-to-end targets are checked on the distributed "
    "scheduler, at every cluster shape of the run (each line names its shape; the 16x1 and 4x4 lines at theirs "
    "only), and not judged on a small read (under 1 GB of Arrow data per dataset: the figure is shown, the verdict "
    "is not). Ratios are of medians."
)


def _checksum_section(cost: dict) -> list[str]:
    """GB/s with no checksum, the default ones, and verify_checksums; the cost in %."""
    if not cost:
        return []
    lines = ["", "Checksums (GB/s of output, median; cost against none): default = a GZIP page's "
             "CRC-32 (always on), verify = plus every page's CRC-32 (`verify_checksums`):", ""]
    rows = []
    for label, per_codec in cost.items():
        for codec, fig in per_codec.items():
            if "error" in fig:
                rows.append([label, codec, fig["error"][:80], "", ""])
                continue
            base = fig["none"]["gbps"]["median"]
            cells = []
            for check in ("default", "verify"):
                m = fig[check]["gbps"]["median"]
                cells.append(f"{_num(m)} ({100 * (base - m) / base:+.1f}%)" if base and m else "–")
            rows.append([label, codec, _num(base)] + cells)
    return lines + _table(["backend", "codec", "none", "default", "verify"], rows)


def _targets_section(checks: list[dict]) -> list[str]:
    rows = []
    for c in checks:
        met = "reference" if c.get("reference") else {True: "met", False: "**missed**", None: "not measured"}[c.get("met")]
        if met == "not measured" and c.get("small_read") and c.get("measured"):
            met = "not judged (small read)"
        rows.append([c["what"], c["target"], c.get("measured") or "–", met, c.get("limit", "")])
    return _table(["target", "wanted", "measured", "", "by how much, and what limits it"], rows)


def _shapes_line(results: dict) -> str:
    """The cluster shapes measured and the threaded scheduler's threads, as one sentence."""
    cluster = cluster_shapes(results) or ["not recorded"]
    threads = ", ".join(s.split("x")[-1] for s in shapes_of(results, "threads")) or "not recorded"
    return (f"Cluster shapes (workers x threads per worker), one LocalCluster each, the variants interleaved within "
            f"it: {', '.join(cluster)}; threaded scheduler: {threads} threads in this process.")


def _small_read_lines(results: dict) -> list[str]:
    small = small_reads(results)
    if not small:
        return []
    sizes = ", ".join(f"{ds} {b / 1e9:.3g} GB" for ds, b in small.items())
    return ["", f"**{SMALL_READ_NOTE}** (Arrow data: {sizes}). The targets are not judged on them."]


def render_report(results: dict, checks: list[dict], plots: dict) -> str:
    """The Markdown report of one run."""
    cfg = results["config"]
    # Runs before every pair was warmed up warmed each variant on one codec.
    warmup = results.get("warmup", "one warm-up read per variant")
    small = small_reads(results)
    lines = [
        f"# hwdecomp benchmark — {results['started']}",
        "",
        f"Command: `{cfg.get('command', 'run_bench(...)')}`",
        *_small_read_lines(results),
        "",
        "## System",
        "",
        "```",
        format_system(results["system"]),
        "```",
        "",
        f"{_shapes_line(results)} "
        f"Repeats: {cfg['repeats']} (after {warmup}). Files are in the page cache (written just before, or read in the warm-up): "
        "the figures are the read path's, not the disk's. Throughput counts the whole `dd.read_parquet(...).persist()` call, graph construction included.",
        "",
        "## Datasets",
        "",
    ]
    rows = []
    for ds, d in results.get("datasets", {}).items():
        for codec, nbytes in d["file_bytes"].items():
            rows.append([f"{ds} (small read)" if ds in small else ds, codec, str(d["rows"]), f"{d['arrow_bytes'] / 1e9:.3f}", f"{nbytes / 1e9:.3f}", f"{d['arrow_bytes'] / max(1, nbytes):.2f}", str(d["files"])])
    lines += _table(["dataset", "codec", "rows", "Arrow GB", "file GB", "Arrow / file", "files"], rows)
    lines += ["", "## Targets", "", _TARGETS_NOTE, ""] + _targets_section(checks)
    lines += ["", "## End to end: `dd.read_parquet`"] + _e2e_section(results)
    if "throughput" in plots:
        lines += ["", f"![throughput]({plots['throughput']})"]
    if "cpu" in plots:
        lines += ["", f"![CPU seconds per GB]({plots['cpu']})"]
    lines += ["", "## Stage breakdown (hwdecomp, threaded scheduler)"] + _stage_section(results)
    if "stages" in plots:
        lines += ["", f"![stages]({plots['stages']})"]
    lines += ["", "## GPU decode kernels alone"] + _gpudecode_section(results)
    lines += ["", "## Decompression alone, host to host", ""] + _decompress_section(results)
    for key in ("decompression", "sweep"):
        if key in plots:
            lines += ["", f"![{key}]({plots[key]})"]
    skipped = dict(results.get("skipped", {}))
    if "finished" not in results:
        missing = [
            f"{ds} on {sched}"
            for ds in results.get("datasets", {})
            for sched in cfg.get("schedulers", ())
            if "e2e" in cfg.get("parts", ()) and sched not in results.get("endtoend", {}).get(ds, {})
        ]
        skipped["run cut short"] = (
            "the run ended (time limit) before it finished; the figures above are those measured. "
            + ("End-to-end parts not measured: " + ", ".join(missing) + "." if missing else "")
        )
    if skipped:
        lines += ["", "## Not run", ""] + [f"- {k}: {v}" for k, v in skipped.items()]
    lines.append("")
    return "\n".join(lines)
