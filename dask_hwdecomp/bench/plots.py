"""The report's PNG plots (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .e2eruns import E2eRun, e2e_runs  # noqa: E402
from .scale import small_reads  # noqa: E402
from .variants import BASELINE, CEILING  # noqa: E402

__all__ = ["plot_all", "stage_rows", "stage_figure", "variant_colours"]

# Okabe-Ito: told apart with any colour vision; each variant keeps its colour in every plot.
_PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442"]
_FIXED = {BASELINE: _PALETTE[0], "hwdecomp-auto": _PALETTE[1], "hwdecomp-cpu": _PALETTE[2],
          "hwdecomp-nvcomp": _PALETTE[3], "hwdecomp-hardware": _PALETTE[4]}
_CEILING_STYLE = {"color": "black", "ls": "-.", "lw": 1.2}
_CEILING_SHORT = "Arrow IPC ceiling (mmap, no decoding)"
# Above this many times the tallest bar, the ceiling is written, not drawn:
# drawn, it would flatten the bars the plot is about.
_CEILING_SCALE = 2.5


def _med(fig, key):
    if not isinstance(fig, dict) or "error" in fig or not fig.get(key):
        return None
    return fig[key]


def variant_colours(names) -> dict:
    """``{name: colour}``: the engines' fixed colours, the rest from the palette in turn."""
    # Yellow last: thin bars of it are hard to see on white.
    spare = [_PALETTE[5], *_PALETTE[:5], _PALETTE[6]]
    out: dict[str, str] = {}
    for name in names:
        out[name] = _FIXED.get(name) or spare[sum(n not in _FIXED for n in out) % len(spare)]
    return out


def _ceiling(ax, per_variant: dict, key: str, top: float, unit: str) -> None:
    """The decode-free ceiling as a line, or as a note where it is off the scale."""
    s = _med(per_variant.get(CEILING, {}).get("uncompressed"), key)
    if s is None:
        return
    value = s["median"]
    if top <= 0 or value <= _CEILING_SCALE * top:
        ax.axhline(value, label=f"{_CEILING_SHORT}: {value:.3g} {unit}", **_CEILING_STYLE)
        return
    ax.set_ylim(0, 1.15 * top)
    ax.text(0.99, 0.97, f"{_CEILING_SHORT}: {value:.3g} {unit}, above the scale", transform=ax.transAxes,
            ha="right", va="top", fontsize=7, bbox={"facecolor": "white", "edgecolor": "black", "lw": 0.5})


def _bars(ax, per_variant: dict, key: str, codecs: list[str], title: str, ylabel: str, bound_line: bool, unit: str = "",
          legend_outside: bool = False):
    names = [n for n, v in per_variant.items() if n != CEILING and any(_med(f, key) for f in v.values())]
    colours = variant_colours(names)
    width = 0.8 / max(1, len(names))
    top = 0.0
    for i, name in enumerate(names):
        xs, ys, lo, hi = [], [], [], []
        for j, codec in enumerate(codecs):
            s = _med(per_variant[name].get(codec), key)
            if s is None:
                continue
            xs.append(j + (i - (len(names) - 1) / 2) * width)
            ys.append(s["median"])
            lo.append(s["median"] - s["min"])
            hi.append(s["max"] - s["median"])
            top = max(top, s["max"])
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=name, color=colours[name])
    bound = _med(per_variant.get(BASELINE, {}).get("uncompressed"), key)
    if bound_line and bound:
        ax.axhline(bound["median"], color=colours.get(BASELINE, "k"), ls="--", lw=1, label="pyarrow, uncompressed copy")
    _ceiling(ax, per_variant, key, top, unit)
    ax.set_xticks(range(len(codecs)), codecs, rotation=20)
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(ylabel)
    if ax.get_legend_handles_labels()[0]:
        # Outside, right of the panel: inside, it hid the bars of the first codec.
        ax.legend(fontsize=7, **({"loc": "upper left", "bbox_to_anchor": (1.01, 1.0)} if legend_outside else {}))


def _grid(runs: list[E2eRun], key: str, ylabel: str, unit: str, path: Path, small=()) -> Path | None:
    """One panel per end-to-end run (dataset, scheduler, shape), titled with all three; ``small``: small-read datasets."""
    if not runs:
        return None
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 3.2 * len(runs)), squeeze=False)
    for ax, run in zip(axes[:, 0], runs):
        per_variant = run.figures
        codecs = list(per_variant.get(BASELINE) or next(iter(per_variant.values())))
        title = f"{run.dataset} — {run.where}" + (" (SMALL READ: not for decisions)" if run.dataset in small else "")
        _bars(ax, per_variant, key, codecs, title, ylabel, bound_line=True, unit=unit, legend_outside=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def stage_rows(runs: list[E2eRun], arrow_bytes: dict) -> list[tuple[str, dict]]:
    """``(label, {stage: seconds per GB})`` of every threaded hwdecomp read with a report, of ``runs``."""
    rows = []
    threaded = [r for r in runs if r.scheduler == "threads"]
    several = len({r.shape for r in threaded}) > 1
    for run in threaded:
        ds = f"{run.dataset} {run.shape}" if several else run.dataset
        for name, per_codec in run.figures.items():
            for codec, fig in per_codec.items():
                rep = fig.get("report") if isinstance(fig, dict) else None
                if rep:
                    gb = arrow_bytes[run.dataset] / 1e9
                    rows.append((f"{ds} · {name.replace('hwdecomp-', '')} · {codec}", {k: v / gb for k, v in rep["stages_s"].items()}))
    return rows


def stage_figure(rows: list[tuple[str, dict]]):
    """The stacked stage bars of ``rows``; the caller saves and closes the figure."""
    stages = list(rows[0][1])
    # Horizontal bars, one line of height per row: labels of any length and
    # any number of rows stay readable and never overlap.
    fig, ax = plt.subplots(figsize=(8, 1.4 + 0.3 * len(rows)))
    left = [0.0] * len(rows)
    ys = range(len(rows))
    for stage in stages:
        vals = [r[1].get(stage, 0.0) for r in rows]
        ax.barh(ys, vals, left=left, label=stage)
        left = [b + v for b, v in zip(left, vals)]
    ax.set_yticks(ys, [r[0] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds per GB of Arrow data (summed over threads)")
    ax.set_title("hwdecomp stage breakdown (threaded scheduler)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def _stages(runs: list[E2eRun], arrow_bytes: dict, path: Path) -> Path | None:
    rows = stage_rows(runs, arrow_bytes)
    if not rows:
        return None
    fig = stage_figure(rows)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _decompress(dec: dict, copy: dict | None, path: Path) -> Path | None:
    sets = [(info.get("pages", {}).get("page_bytes", 1 << 20), info["backends"])
            for info in (dec, dec.get("small_pages", {})) if info.get("backends")]
    if not sets:
        return None
    fig, axes = plt.subplots(1, len(sets), figsize=(6 * len(sets), 3.8), squeeze=False, sharey=True)
    pinned = (copy or {}).get("pinned")
    for ax, (page_bytes, backends) in zip(axes[0], sets):
        codecs = sorted({c for v in backends.values() for c in v})
        size = f"{page_bytes >> 20} MiB" if page_bytes >= 1 << 20 else f"{page_bytes >> 10} KiB"
        _bars(ax, backends, "gbps", codecs, f"decompression alone, host to host, {size} pages, default options",
              "GB/s of output", bound_line=False)
        if pinned:
            ax.axhline(pinned["d2h"]["median"], color="r", ls=":", lw=1, label="pinned copy D2H")
            ax.axhline(pinned["h2d"]["median"], color="m", ls=":", lw=1, label="pinned copy H2D")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _sweep(dec: dict, path: Path) -> Path | None:
    sweep = dec.get("sweep", {})
    lines = []
    for label, per_codec in sweep.items():
        for codec, points in per_codec.items():
            by_streams: dict = {}
            for p in points:
                if p.get("gbps"):
                    by_streams.setdefault(p["streams"], []).append((p["pages_per_call"], p["gbps"]["median"]))
            for s, pts in by_streams.items():
                lines.append((f"{label} {codec}" + (f" {s} streams" if s else ""), sorted(pts)))
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, pts in lines:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("pages (1 MiB) per batched call")
    ax.set_ylabel("GB/s of output")
    ax.set_title("batch size sweep", fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_all(results: dict, out_dir) -> dict:
    """Write every plot the results allow; ``{name: file name}``."""
    out_dir = Path(out_dir)
    e2e = e2e_runs(results)
    small = small_reads(results)
    arrow_bytes = {k: v["arrow_bytes"] for k, v in results.get("datasets", {}).items()}
    made = {
        "throughput": _grid(e2e, "arrow_gbps", "GB/s of Arrow data", "GB/s", out_dir / "throughput.png", small),
        "cpu": _grid(e2e, "cpu_s_per_gb", "CPU s per GB of Arrow data", "CPU s/GB", out_dir / "cpu_seconds.png", small),
        "stages": _stages(e2e, arrow_bytes, out_dir / "stages.png"),
        "decompression": _decompress(results.get("decompression", {}), results.get("copy_bandwidth"), out_dir / "decompression.png"),
        "sweep": _sweep(results.get("decompression", {}), out_dir / "batch_sweep.png"),
    }
    return {k: v.name for k, v in made.items() if v is not None}
