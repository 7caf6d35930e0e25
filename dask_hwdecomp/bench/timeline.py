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

Two views of the GPU service go further. :func:`batcher_calls` lists each
GPU decompression call of a window (a ``gpu_call`` span: its stream, parts,
pages, output bytes, and the GPU's own seconds of it where the backend
timed them with CUDA events), so its *GPU share* says how much of the
call's wall time the GPU was at work. :func:`runner_split` splits each GPU
decoder runner thread's busy time (its ``decode_run`` spans) into its CPU
seconds, its waits for the GPU (the synchronisations :data:`GPU_WAITS`,
less their own CPU seconds) and the rest: other waits, mostly for the
service's one GIL.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

__all__ = ["Window", "GpuCall", "RunnerSplit", "GPU_WAITS", "load", "summarize", "batcher_calls",
           "runner_split", "render", "gantt"]

# The decoder runner's spans that wait for the GPU: a stream's
# synchronisations (the measured records' copy back, the written pages'
# errors, the run's end) and the device pool growing (which synchronises
# the device).
GPU_WAITS = ("measure_wait", "write_wait", "decode_sync", "device_alloc")


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


class GpuCall(NamedTuple):
    """One GPU decompression call (a ``gpu_call`` span) as :func:`batcher_calls` lists it.

    ``gpu_s`` is the GPU's own seconds from the call's first copy in to its
    last copy out (CUDA events), None where the backend has no GPU clock
    (the CPU stand-in); ``gpu_share`` is it over ``seconds``, likewise.
    ``waited_s``: how long the call's oldest part waited to be taken.
    """

    proc: int
    stream: int
    t0: float
    seconds: float
    parts: int
    pages: int
    out_bytes: int
    gpu_s: float | None
    gpu_share: float | None
    cpu_s: float | None
    waited_s: float | None


class RunnerSplit(NamedTuple):
    """Where one GPU decoder runner thread's busy time in a window went.

    ``busy_s`` (its ``decode_run`` spans, their part inside the window) is
    ``cpu_s + gpu_wait_s + other_s``: its CPU seconds, its waits for the GPU
    (:data:`GPU_WAITS`, less the CPU seconds inside them) and the rest, time
    it waited for something else (mostly the GIL).
    """

    proc: int
    thread: str
    runs: int
    busy_s: float
    cpu_s: float
    gpu_wait_s: float
    other_s: float


def _inside(s: dict, window: Window) -> float | None:
    """The share of span ``s`` inside ``window`` (None: none of it; an instant inside counts whole)."""
    a, b = max(s["t0"], window.t0), min(s["t1"], window.t1)
    if b <= a and not (s["t0"] == s["t1"] and window.t0 <= s["t0"] <= window.t1):
        return None
    return (b - a) / (s["t1"] - s["t0"]) if s["t1"] > s["t0"] else 1.0


def summarize(spans: list[dict], window: Window) -> dict:
    """``{kind: {count, sum_s, union_s, nbytes, per_s, fields_s}}`` of the spans inside ``window``.

    ``fields_s`` sums the spans' own fields of seconds (named ``*_s``, such
    as the decoder's ``gpu_measure_s``), each in the share of its span that
    lies inside the window.
    """
    by_kind: dict[str, list] = {}
    fields_s: dict[str, dict] = {}
    for s in spans:
        share = _inside(s, window)
        if share is None:
            continue
        a, b = max(s["t0"], window.t0), min(s["t1"], window.t1)
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


def batcher_calls(spans: list[dict], window: Window) -> list[GpuCall]:
    """Every GPU decompression call that ran during ``window``, by start (whole calls, not their share)."""
    calls = []
    for s in spans:
        if s["k"] != "gpu_call" or _inside(s, window) is None:
            continue
        seconds = s["t1"] - s["t0"]
        gpu = s.get("gpu_s")
        calls.append(GpuCall(proc=s["proc"], stream=int(s.get("stream", 0)), t0=s["t0"], seconds=seconds,
                             parts=int(s.get("parts", 0)), pages=int(s.get("pages", 0)),
                             out_bytes=int(s.get("nbytes", 0)), gpu_s=gpu,
                             gpu_share=gpu / seconds if gpu is not None and seconds > 0 else None,
                             cpu_s=s.get("cpu_s"), waited_s=s.get("waited_s")))
    return sorted(calls, key=lambda c: (c.t0, c.proc, c.stream))


def runner_split(spans: list[dict], window: Window) -> list[RunnerSplit]:
    """Each GPU decoder runner thread's busy time in ``window``, split (see :class:`RunnerSplit`).

    A runner thread is one that recorded ``decode_run`` spans; its spans
    count by their share inside the window, their ``cpu_s`` likewise.
    """
    busy: dict[tuple, list[float]] = {}
    for s in spans:
        if s["k"] != "decode_run":
            continue
        share = _inside(s, window)
        if share is None:
            continue
        row = busy.setdefault((s["proc"], s["th"]), [0, 0.0, 0.0])
        row[0] += 1
        row[1] += share * (s["t1"] - s["t0"])
        row[2] += share * float(s.get("cpu_s", 0.0))
    waits = dict.fromkeys(busy, 0.0)
    for s in spans:
        if s["k"] not in GPU_WAITS or (s["proc"], s["th"]) not in waits:
            continue
        share = _inside(s, window)
        if share is not None:
            # never below nothing: the CPU clock and the wall clock tick apart
            waits[(s["proc"], s["th"])] += share * max(0.0, s["t1"] - s["t0"] - float(s.get("cpu_s", 0.0)))
    return [RunnerSplit(proc=proc, thread=th, runs=int(runs), busy_s=wall, cpu_s=cpu, gpu_wait_s=waits[(proc, th)],
                        other_s=wall - cpu - waits[(proc, th)])
            for (proc, th), (runs, wall, cpu) in sorted(busy.items())]


def _render_calls(window: Window, calls: Sequence[GpuCall]) -> list[str]:
    def share(gpu: float | None, seconds: float) -> str:
        return f"GPU {gpu:.4f} s ({100 * gpu / seconds:.0f}%)" if gpu is not None and seconds > 0 else "GPU -"

    lines = [f"  GPU calls: {len(calls)} (start into the read, stream, wall s, parts, pages, output MB, "
             "GPU s and share of the wall, dispatcher CPU s)"]
    streams: dict[tuple, list] = {}
    for c in calls:
        cpu = f"cpu {c.cpu_s:.4f}" if c.cpu_s is not None else "cpu -"
        lines.append(f"    {c.t0 - window.t0:8.3f} s  {c.proc}/{c.stream}  {c.seconds:.4f} s  parts {c.parts:3d}  "
                     f"pages {c.pages:5d}  {c.out_bytes / 1e6:8.2f} MB  {share(c.gpu_s, c.seconds)}  {cpu}")
        streams.setdefault((c.proc, c.stream), []).append(c)
    for (proc, stream), mine in sorted(streams.items()):
        wall = sum(c.seconds for c in mine)
        timed = [c.gpu_s for c in mine if c.gpu_s is not None]
        gpu = sum(timed) if len(timed) == len(mine) else None
        lines.append(f"  stream {proc}/{stream}: {len(mine)} calls, {wall:.3f} s, parts "
                     f"{sum(c.parts for c in mine)}, pages {sum(c.pages for c in mine)}, "
                     f"{sum(c.out_bytes for c in mine) / 1e6:.1f} MB, {share(gpu, wall)}")
    return lines


def _render_runners(window: Window, runners: Sequence[RunnerSplit]) -> list[str]:
    def part(x: float, whole: float) -> str:
        return f"{x:.3f} s ({100 * x / whole:.0f}%)" if whole > 0 else f"{x:.3f} s"

    return [f"  decoder runner {r.proc} {r.thread}: {r.runs} runs, busy {part(r.busy_s, window.seconds)} of the "
            f"read: CPU {part(r.cpu_s, r.busy_s)}, GPU waits {part(r.gpu_wait_s, r.busy_s)}, "
            f"other waits {part(r.other_s, r.busy_s)}" for r in runners]


def render(window: Window, summary: dict, calls: Sequence[GpuCall] = (),
           runners: Sequence[RunnerSplit] = ()) -> str:
    """A table of one window's summary, longest union first; then ``calls`` and ``runners``, if given.

    ``calls`` (:func:`batcher_calls`) get a line each and a total per
    stream, ``runners`` (:func:`runner_split`) a line each.
    """
    lines = [f"{window.label}: {window.seconds:.3f} s",
             f"  {'kind':16} {'count':>7} {'sum s':>9} {'union s':>9} {'% of read':>9} {'GB':>8} {'GB/s':>7}"]
    for kind, f in sorted(summary.items(), key=lambda kv: -kv[1]["union_s"]):
        rate = f"{f['per_s'] / 1e9:7.1f}" if f["per_s"] else "      -"
        lines.append(f"  {kind:16} {f['count']:7d} {f['sum_s']:9.3f} {f['union_s']:9.3f} "
                     f"{100 * f['union_s'] / window.seconds:8.0f}% {f['nbytes'] / 1e9:8.2f} {rate}")
        if f.get("fields_s"):
            lines.append("    " + ", ".join(f"{name} {value:.3f}" for name, value in f["fields_s"].items()))
    lines.extend(_render_runners(window, runners))
    if calls:
        lines.extend(_render_calls(window, calls))
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
