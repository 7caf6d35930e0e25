"""Where a GPU read's time goes: the GPU service's timeline at scale, read by read.

Usage::

    python benchmarks/profile_timeline.py OUT [--data DIR] [--size 3GB] [--files 32]
        [--datasets lineitem,entropy] [--codecs snappy] [--cluster 4x4] [--repeats 2]

Generates (or reuses, under ``--data``) the bench's tables, starts a
distributed LocalCluster with ``HWDECOMP_TIMELINE`` set (the workers and the
GPU service they start record their spans, see :mod:`dask_hwdecomp.timeline`)
and reads every dataset and codec, interleaved: ``pyarrow``, ``pyarrow`` on
the uncompressed files, the decode-free IPC ceiling, hwdecomp with
``decode="cpu"`` and with ``decode="auto"`` (``--variants``; a variant
``decode-auto:streams=8`` sets further options, so that option values are
compared in one run), each ``--repeats`` times after a
warm-up, persisted then released as ``hwdecomp bench`` does; then pyarrow
and each hwdecomp variant once more **while a persisted read of the
uncompressed files is still held** (``held``), the case where the shared
segments of the read before cannot be reused (pyarrow's held read is the
one to divide by).

Writes ``OUT/timeline.md`` (per read: its seconds and GB/s, per span
kind its count, summed and covered seconds and bytes, then each GPU
decoder runner's busy time split into CPU, GPU waits and other waits, and
each GPU decompression call with its GPU share and a total per stream; see
:mod:`dask_hwdecomp.bench.timeline`), ``OUT/reads.json`` (with the runners'
split per read),
the raw spans (``OUT/spans/``) and a Gantt chart of the last timed read of
each hwdecomp variant (``OUT/gantt-*.png``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    from dask_hwdecomp.bench.scale import add_scale_arguments

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_scale_arguments(p)
    p.add_argument("--datasets", default="lineitem,entropy")
    p.add_argument("--codecs", default="snappy")
    p.add_argument("--cluster", default="4x4")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--variants", default="pyarrow,pyarrow-uncompressed,ceiling,decode-cpu,decode-auto",
                   help="decode-D[:NAME=VALUE...][@uncompressed] reads with decode=D and those options, "
                        "of the uncompressed copy with @uncompressed")
    args = p.parse_args(argv)

    out: Path = args.out
    spans_dir = out / "spans"
    spans_dir.mkdir(parents=True, exist_ok=True)
    for old in spans_dir.glob("timeline-*.jsonl"):
        old.unlink()
    os.environ["HWDECOMP_TIMELINE"] = str(spans_dir)  # before any worker or service starts

    import dask.dataframe as dd
    from dask.utils import parse_bytes
    from distributed import Client, LocalCluster, futures_of, wait

    from dask_hwdecomp import hwdecomp, timeline
    from dask_hwdecomp.bench import timeline as tl
    from dask_hwdecomp.bench.ceiling import read_ipc_ceiling
    from dask_hwdecomp.bench.data import generate

    root = args.data or out / "data"
    codecs = [c for c in args.codecs.split(",") if c]
    t = time.perf_counter()
    datasets = [generate(root, kind, parse_bytes(args.size), args.files, codecs=codecs)
                for kind in args.datasets.split(",") if kind]
    print(f"data ready in {time.perf_counter() - t:.1f} s: "
          + ", ".join(f"{d.name} {d.arrow_bytes / 1e9:.2f} GB in {d.files} files" for d in datasets), flush=True)

    workers, threads = (int(x) for x in args.cluster.split("x"))
    cluster = LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True, memory_limit=0,
                           dashboard_address=None)
    client = Client(cluster)
    wanted = args.variants.split(",")
    for v in wanted:
        if v.startswith("decode-"):
            variant_read(v)  # a misspelt option or copy fails here, before any read

    def reader(variant: str, ds, codec: str):
        if variant == "pyarrow":
            return lambda: dd.read_parquet(str(ds.dirs[codec]), engine="pyarrow")
        if variant == "pyarrow-uncompressed":
            return lambda: dd.read_parquet(str(ds.dirs["uncompressed"]), engine="pyarrow")
        if variant == "ceiling":
            return lambda: read_ipc_ceiling(ds.dirs["uncompressed"])
        copy, opts = variant_read(variant)
        return lambda: dd.read_parquet(str(ds.dirs[copy or codec]), engine=hwdecomp,
                                       hwdecomp_options={"backend": "auto", **opts})

    reads = []
    windows = []
    from dask_hwdecomp.service.launch import node_stats
    from dask_hwdecomp.service.rundir import service_dir

    def cpu_seconds() -> tuple[float, float]:
        """CPU seconds used so far by this node's GPU services and by the whole machine (Linux /proc)."""
        tick = os.sysconf("SC_CLK_TCK")
        service = 0.0
        for stats in node_stats(service_dir(None, create=False)):
            try:
                fields = Path(f"/proc/{stats['service_pid']}/stat").read_text().rsplit(")", 1)[1].split()
                service += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
            except (KeyError, OSError):
                pass
        cpu = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        busy = sum(int(x) for x in cpu[:8]) - int(cpu[3]) - int(cpu[4])  # all but idle and iowait
        return service, busy / tick

    cpu: dict[str, tuple[float, float]] = {}

    def timed(label: str, make, held: list | None = None) -> tl.Window:
        """Persist one read and time it; keep the result in ``held``, else release it."""
        c0 = cpu_seconds()
        t0 = time.perf_counter()
        persisted = client.persist(make())
        wait(persisted)
        t1 = time.perf_counter()
        c1 = cpu_seconds()
        cpu[label] = (c1[0] - c0[0], c1[1] - c0[1])
        failed = [f for f in futures_of(persisted) if f.status == "error"]
        if failed:  # a read that failed is no figure
            raise RuntimeError(f"{label}: {len(failed)} tasks failed") from failed[0].exception()
        if held is not None:
            held.append(persisted)
        del persisted
        client.run(gc.collect)
        return tl.Window(label, t0, t1)

    def note(ds, codec: str, v: str, repeat, w: tl.Window) -> None:
        windows.append(w)
        service_s, machine_s = cpu[w.label]
        reads.append({"dataset": ds.name, "codec": codec, "variant": v, "repeat": repeat, "t0": w.t0, "t1": w.t1,
                      "seconds": w.seconds, "arrow_gbps": ds.arrow_bytes / 1e9 / w.seconds,
                      "service_cpu_s": service_s, "machine_cpu_s": machine_s})
        print(f"{w.label}: {w.seconds:.3f} s, {ds.arrow_bytes / 1e9 / w.seconds:.2f} GB/s; CPU s/GB: service "
              f"{service_s / (ds.arrow_bytes / 1e9):.2f} ({service_s / w.seconds:.1f} cores), machine "
              f"{machine_s / (ds.arrow_bytes / 1e9):.2f} ({machine_s / w.seconds:.1f} cores)", flush=True)

    try:
        for ds in datasets:
            for codec in codecs:
                # Warm-up: imports, kernel caches, the service and its first registrations.
                for v in wanted:
                    timed("warm-up", reader(v, ds, codec))
                for r in range(args.repeats):
                    for v in wanted:
                        note(ds, codec, v, r + 1, timed(f"{ds.name} {codec} {v} #{r + 1}", reader(v, ds, codec)))
                # pyarrow too: a held result slows every reader's allocations, not only hwdecomp's.
                # Not the @uncompressed variants: their read of the held files would be the held result.
                for v in [v for v in wanted if (v.startswith("decode-") and not variant_read(v)[0]) or v == "pyarrow"]:
                    held: list = []
                    # The uncompressed files first (other task keys than the codec's), held.
                    timed("held", reader(v, ds, "uncompressed"), held)
                    note(ds, codec, v, "held", timed(f"{ds.name} {codec} {v} held", reader(v, ds, codec)))
                    held.clear()
                    client.run(gc.collect)
        client.run(timeline.flush)
        for line in mean_ratios(reads):
            print(line, flush=True)
        # What the service holds pinned once every read was released: bounded by the readers' pools.
        for stats in node_stats(service_dir(None, create=False)):
            print("service after the reads: " + ", ".join(
                f"{k} {stats[k]}" for k in ("clients", "all_host_registrations", "all_host_register_s",
                                             "all_host_pinned_bytes", "decodes", "decode_runs",
                                             "decode_runs_ahead") if k in stats), flush=True)
        time.sleep(1.5)  # the service writes its spans at least every second
    finally:
        client.close()
        cluster.close()
    time.sleep(3)  # the service exits and writes the rest
    spans = tl.load(spans_dir)
    lines = [f"# Timeline at scale ({args.cluster}, {', '.join(f'{d.name} {d.arrow_bytes / 1e9:.2f} GB / {d.files} files' for d in datasets)})",
             "", f"python {' '.join(sys.argv)}", "", "```"]
    # Printed read by read as it is rendered, and before the charts: a device
    # call's time limit that cuts the analysis keeps what was printed.
    print("\n".join(lines), flush=True)
    for read, w in zip(reads, windows):  # note() appends to both
        runners = tl.runner_split(spans, w)
        table = tl.render(w, tl.summarize(spans, w), calls=tl.batcher_calls(spans, w), runners=runners)
        print(table + "\n", flush=True)
        lines += [table, ""]
        read["decoder_runners"] = [r._asdict() for r in runners]
    lines.append("```")
    print("```", flush=True)
    (out / "timeline.md").write_text("\n".join(lines))
    (out / "reads.json").write_text(json.dumps(reads, indent=1))
    for w in windows:
        if w.label.endswith(f"#{args.repeats}") and "decode-" in w.label:
            name = re.sub(r"[^A-Za-z0-9_.+-]+", "-", w.label.replace("#", "").replace(":", "+"))
            tl.gantt(spans, w, out / f"gantt-{name}.png")
    return 0


def mean_ratios(reads: list[dict]) -> list[str]:
    """Each variant's mean seconds over its reads (held ones included), and pyarrow's mean over it.

    One line per dataset, codec and variant, as ``mean DATASET CODEC VARIANT: S s over N reads, R x pyarrow``;
    the ratio is left out where the profile has no pyarrow read of that dataset and codec.
    """
    groups: dict[tuple, list[float]] = {}
    for r in reads:
        groups.setdefault((r["dataset"], r["codec"], r["variant"]), []).append(r["seconds"])
    lines = []
    for (ds, codec, v), secs in groups.items():
        mean = sum(secs) / len(secs)
        base = groups.get((ds, codec, "pyarrow"))
        ratio = f", {sum(base) / len(base) / mean:.2f} x pyarrow" if base else ""
        lines.append(f"mean {ds} {codec} {v}: {mean:.3f} s over {len(secs)} reads{ratio}")
    return lines


def variant_read(variant: str) -> tuple[str, dict]:
    """The copy a variant ``decode-...[@uncompressed]`` reads (empty: the codec's) and its options.

    ``@uncompressed`` is the GPU's decode of the uncompressed copy: what the decode alone allows.
    """
    name, _, copy = variant.partition("@")
    if copy not in ("", "uncompressed"):
        raise SystemExit(f"variant {variant!r}: only @uncompressed names another copy")
    return copy, variant_options(name)


def variant_options(variant: str) -> dict:
    """The hwdecomp options of a variant ``decode-D[:NAME=VALUE...]``: ``decode`` D, and each option after it.

    ``decode-auto:streams=8`` reads with ``decode="auto"`` and 8 streams.
    Options a GPU backend is created with (``streams``, ``batch_bytes``,
    ...) get a backend of their own in the same GPU service, so such
    variants interleave in one profile.
    """
    from dask_hwdecomp.options import parse_option_texts

    head, *rest = variant.split(":")
    texts = {"decode": head.removeprefix("decode-")}
    for item in rest:
        name, eq, text = item.partition("=")
        if not eq:
            raise SystemExit(f"variant {variant!r}: {item!r} is not NAME=VALUE")
        texts[name] = text
    return parse_option_texts(texts)


if __name__ == "__main__":
    raise SystemExit(main())
