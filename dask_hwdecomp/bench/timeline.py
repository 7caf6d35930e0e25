"""Reading a timeline back: spans per read window, and where the time went.

The spans come from :mod:`dask_hwdecomp.timeline` (every process that had
``HWDECOMP_TIMELINE`` set: the GPU service and the readers). A *window* is
one read as its driver timed it; a span counts in a window by the part of
it that lies inside.

For each kind of span a window gives ``count``, ``sum_s`` (the spans'
seconds added up: work or waiting summed over threads), ``union_s`` (the
seconds of the window covered by at least one such span: how long the
kind was *going on*), ``nbytes`` and ``per_s`` (the kind's bytes over its
union). ``union_s`` near the window's length marks what the read was
bound by.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Window", "load", "summarize", "render", "gantt"]


@dataclass(frozen=True)
class Window:
    """One timed read: what it was, and its start and end (``time.perf_counter()``)."""

    label: str
    t0: float
    t1: float

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0


def load(directory) -> list[dict]:
    """Every span of every ``timeline-<pid>.jsonl`` under ``directory``, with its ``pid``."""
    spans = []
    for path in sorted(Path(directory).glob("timeline-*.jsonl")):
        pid = int(path.stem.split("-")[1])
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                row["pid"] = row.get("pid", pid)
                row["proc"] = pid
                spans.append(row)
    return spans


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, None
    start = 0.0
    for a, b in sorted(intervals):
        if end is None or a > end:
            if end is not None:
                total += end - start
            start, end = a, b
        else:
            end = max(end, b)
    if end is not None:
        total += end - start
    return total


def summarize(spans: list[dict], window: Window) -> dict:
    """``{kind: {count, sum_s, union_s, nbytes, per_s, fields_s}}`` of the spans inside ``window``.

    ``fields_s`` sums the spans' own fields of seconds (named ``*_s``, such
    as the decoder's ``gpu_measure_s``), each in the share of its span that
    lies inside the window.
    """
    by_kind: dict[str, list] = {}
    fields_s: dict[str, dict] = {}
    for s in spans:
        a, b = max(s["t0"], window.t0), min(s["t1"], window.t1)
        if b <= a and not (s["t0"] == s["t1"] and window.t0 <= s["t0"] <= window.t1):
            continue
        share = (b - a) / (s["t1"] - s["t0"]) if s["t1"] > s["t0"] else 1.0
        by_kind.setdefault(s["k"], []).append((a, max(a, b), share * float(s.get("nbytes", 0) or 0)))
        seconds = fields_s.setdefault(s["k"], {})
        for name, value in s.items():
            if name.endswith("_s") and isinstance(value, (int, float)):
                seconds[name] = seconds.get(name, 0.0) + share * value
    out = {}
    for kind, rows in sorted(by_kind.items()):
        union = _union([(a, b) for a, b, _ in rows])
        nbytes = sum(n for _, _, n in rows)
        out[kind] = {"count": len(rows), "sum_s": sum(b - a for a, b, _ in rows), "union_s": union,
                     "nbytes": int(nbytes), "per_s": nbytes / union if union > 0 else None,
                     "fields_s": dict(sorted(fields_s.get(kind, {}).items()))}
    return out


def render(window: Window, summary: dict) -> str:
    """A table of one window's summary, longest union first."""
    lines = [f"{window.label}: {window.seconds:.3f} s",
             f"  {'kind':16} {'count':>7} {'sum s':>9} {'union s':>9} {'% of read':>9} {'GB':>8} {'GB/s':>7}"]
    for kind, f in sorted(summary.items(), key=lambda kv: -kv[1]["union_s"]):
        rate = f"{f['per_s'] / 1e9:7.1f}" if f["per_s"] else "      -"
        lines.append(f"  {kind:16} {f['count']:7d} {f['sum_s']:9.3f} {f['union_s']:9.3f} "
                     f"{100 * f['union_s'] / window.seconds:8.0f}% {f['nbytes'] / 1e9:8.2f} {rate}")
        if f.get("fields_s"):
            lines.append("    " + ", ".join(f"{name} {value:.3f}" for name, value in f["fields_s"].items()))
    return "\n".join(lines)


def gantt(spans: list[dict], window: Window, path, kinds=None) -> None:
    """Draw ``window``'s spans, one row per process and thread, to ``path`` (PNG; needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    inside = [s for s in spans if s["t1"] > window.t0 and s["t0"] < window.t1 and (kinds is None or s["k"] in kinds)]
    rows = sorted({(s["proc"], s["th"]) for s in inside})
    index = {r: i for i, r in enumerate(rows)}
    names = sorted({s["k"] for s in inside})
    colours = {k: plt.cm.tab20(i % 20) for i, k in enumerate(names)}
    fig, ax = plt.subplots(figsize=(14, max(3, 0.18 * len(rows) + 1)))
    for s in inside:
        a, b = max(s["t0"], window.t0) - window.t0, min(s["t1"], window.t1) - window.t0
        ax.barh(index[(s["proc"], s["th"])], max(b - a, 1e-4), left=a, height=0.8, color=colours[s["k"]])
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{p} {t}"[:40] for p, t in rows], fontsize=5)
    ax.set_xlabel("seconds into the read")
    ax.set_title(window.label)
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colours[k]) for k in names], labels=names,
              fontsize=6, loc="upper right", ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
