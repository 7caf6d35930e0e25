"""What a corrupt page costs on the GPU, and whom: the figures of the faults issue, on the H200.

Usage (the GPU machine, repository root; tests/ is put on the path)::

    python benchmarks/faults_h200.py --out /tmp/out/faults [--parts alone,together,sigkill] [--backend nvcomp]

Parts:

``alone``
    For each GPU codec and corruption (``tests/corruption.py``: noise after
    valid framing, a few flipped bits) and a few seeds: a file with one
    corrupt data page, read alone; the seconds to the project's error (and
    pyarrow's), whether the GPU service hung or died on it (the error says),
    and the seconds of the next read of the good file (it pays a restart).
    Cases the CPU reads without an error (flipped bits in Zstd literals)
    are counted and left out. Target: every error within 2 s.
``together``
    16 files read at once by a LocalCluster of 4 workers x 4 threads, 15
    good ones and one whose Zstd page hung the GPU in the probe, against
    the same 16 with a good file in its place, interleaved: every good
    result equal to pyarrow's, and each good file's time with the corrupt
    one beside it against its time without. Target: none 2 s slower.
``sigkill``
    The same cluster reads 16 files, each task several times; the service
    is SIGKILLed while requests are in it. Every read must equal pyarrow's
    or fail with a clear error; no worker may die; each worker's shared
    segments must all be its pool's idle ones afterwards (none leaked).

``--backend cpu`` runs ``alone`` and ``together`` without a GPU (no
service), and ``--standin DIR`` runs ``sigkill`` against a service of the
CI's busy engine stand-in in DIR (``tests/service_backends.py``), to try
the script. It prints the system, a line per figure, and
writes ``OUT/faults.json``; the exit status is 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import dask_hwdecomp  # noqa: E402
from dask_hwdecomp.errors import CorruptPageError  # noqa: E402
from dask_hwdecomp.jobs import Algo  # noqa: E402

from corruption import corrupt_file as _corrupted  # noqa: E402

CODECS = {"zstd": Algo.ZSTD, "snappy": Algo.SNAPPY, "lz4": Algo.LZ4, "gzip": Algo.DEFLATE}
TARGET_ALONE_S = 2.0
TARGET_TOGETHER_S = 2.0


def _system() -> dict:
    out = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
    try:
        import subprocess

        out["gpu"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, ValueError):
        out["gpu"] = "none"
    return out


def _table(rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"v": rng.integers(0, 40, rows), "w": rng.integers(0, 9, rows)})


def _write(path: Path, codec: str, rows: int, seed: int) -> Path:
    pq.write_table(_table(rows, seed), path, compression=codec, use_dictionary=False, data_page_size=48 << 10)
    return path


def _timed_error(fn, *args, **kw) -> tuple[float, BaseException | None]:
    t0 = time.perf_counter()
    try:
        fn(*args, **kw)
    except Exception as exc:  # what is measured
        return time.perf_counter() - t0, exc
    return time.perf_counter() - t0, None


def part_alone(work: Path, backend: str, seeds: int) -> dict:
    rows, skipped = [], 0
    for codec, algo in CODECS.items():
        good = _write(work / f"good-{codec}.parquet", codec, 200_000, 11)
        dask_hwdecomp.read_table(good, backend=backend)  # the service is up and warm
        for mode in ("noise", "bitflip"):
            for seed in range(seeds):
                bad = _corrupted(good, work / f"bad-{codec}-{mode}-{seed}.parquet", algo, mode, seed)
                _, on_cpu = _timed_error(dask_hwdecomp.read_table, bad, backend="cpu")
                if not isinstance(on_cpu, CorruptPageError):
                    skipped += 1  # the CPU reads it (or refuses it otherwise): nobody could name the page
                    continue
                ours_s, ours = _timed_error(dask_hwdecomp.read_table, bad, backend=backend)
                pyarrow_s, theirs = _timed_error(pq.read_table, bad)
                next_s, after = _timed_error(dask_hwdecomp.read_table, good, backend=backend)
                said = str(ours)
                row = {"codec": codec, "mode": mode, "seed": seed, "ours_s": round(ours_s, 3),
                       "pyarrow_s": round(pyarrow_s, 3), "next_read_s": round(next_s, 3),
                       "error": type(ours).__name__ if ours is not None else None,
                       "named": isinstance(ours, CorruptPageError) and ours.location == on_cpu.location,
                       "service": ("hung" if "GPU service did not" in said else "died" if "GPU service died" in said
                                   else "failed" if "GPU service failed" in said else "survived"),
                       "pyarrow_error": type(theirs).__name__ if theirs is not None else None,
                       "next_read_error": repr(after) if after is not None else None}
                rows.append(row)
                print(f"alone {codec:6} {mode:7} seed {seed}: ours {ours_s:6.2f} s ({row['error']}, service "
                      f"{row['service']}, page named: {row['named']}), pyarrow {pyarrow_s:5.2f} s, "
                      f"next read {next_s:5.2f} s", flush=True)
    worst = max((r["ours_s"] for r in rows), default=0.0)
    ok = all(r["named"] and r["ours_s"] <= TARGET_ALONE_S and r["next_read_error"] is None for r in rows)
    print(f"alone: {len(rows)} cases ({skipped} the CPU reads, left out), worst {worst:.2f} s to the error "
          f"(target {TARGET_ALONE_S} s): {'met' if ok else 'MISSED'}", flush=True)
    return {"cases": rows, "left_out": skipped, "worst_s": worst, "target_met": ok}


def _cluster(backend: str, standin: str | None = None):
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=4, threads_per_worker=4, processes=True, dashboard_address=None)
    client = Client(cluster)
    if standin:
        client.run(_use_standin, standin)
    return cluster, client


def _use_standin(directory: str) -> None:
    """In a worker: the registry's "hardware" backend is a service of the busy stand-in in ``directory``."""
    import threading

    from dask_hwdecomp.routing import registry

    from service_backends import open_backend

    lock = threading.Lock()
    real = registry.get_backend

    def get_backend(name, options):
        if name == "cpu":
            return real(name, options)
        with lock:
            key = ("standin", name)
            if key not in registry._open:
                registry._open[key] = open_backend("standin_busy", options, directory)
            return registry._open[key]

    registry.probe = lambda name: None if name in ("hardware", "cpu") else "stand-in run"
    registry.get_backend = get_backend


def _read_one(path: str, backend: str, repeats: int = 1) -> dict:
    """In a worker: read ``path`` ``repeats`` times, each compared with pyarrow's table."""
    import time as _time

    import pyarrow.parquet as _pq

    import dask_hwdecomp as _hw

    try:
        want = _pq.read_table(path)
    except Exception:  # a corrupt file: an error is the right answer
        want = None
    out = {"path": path, "reads": 0, "wrong": 0, "errors": [], "seconds": []}
    for _ in range(repeats):
        t0 = _time.perf_counter()
        try:
            got = _hw.read_table(path, backend=backend)
        except Exception as exc:  # reported
            out["errors"].append(f"{type(exc).__name__}: {exc}"[:400])
        else:
            out["reads"] += 1
            out["wrong"] += 0 if want is not None and got.equals(want) else 1
        out["seconds"].append(_time.perf_counter() - t0)
    return out


def part_together(work: Path, backend: str, rounds: int) -> dict:
    good = [_write(work / f"t-good-{i:02d}.parquet", "zstd", 1_000_000, 100 + i) for i in range(16)]
    template = _write(work / "t-template.parquet", "zstd", 200_000, 11)
    bad = _corrupted(template, work / "t-bad.parquet", Algo.ZSTD, "bitflip", 8)  # hung the GPU in the probe
    cluster, client = _cluster(backend)
    try:
        client.gather(client.map(_read_one, [str(p) for p in good], backend=backend, pure=False))  # warm
        without: dict = {str(p): [] for p in good[:15]}
        with_bad: dict = {str(p): [] for p in good[:15]}
        bad_runs, wrong, errors = [], 0, []
        for _ in range(rounds):
            for files, into in ((good, without), (good[:15] + [bad], with_bad)):
                results = client.gather(client.map(_read_one, [str(p) for p in files], backend=backend, pure=False))
                for r in results:
                    if r["path"] == str(bad):
                        bad_runs.append({"seconds": r["seconds"][0], "error": (r["errors"] or [None])[0]})
                        continue
                    if r["path"] in into:  # the 16th good file only stands in for the corrupt one
                        into[r["path"]].append(r["seconds"][0])
                    wrong += r["wrong"]
                    errors += r["errors"]
        slower = {p: float(np.median(with_bad[p]) - np.median(without[p])) for p in without}
        worst = max(slower.values())
        ok = wrong == 0 and not errors and worst <= TARGET_TOGETHER_S
        print(f"together: 15 good files x {rounds} rounds: {wrong} wrong, {len(errors)} errors; median time beside "
              f"the corrupt file minus without it: worst {worst:+.2f} s (target <= {TARGET_TOGETHER_S} s): "
              f"{'met' if ok else 'MISSED'}", flush=True)
        for run in bad_runs:
            print(f"together: the corrupt file: {run['seconds']:.2f} s: {run['error']}", flush=True)
        return {"wrong": wrong, "errors": errors[:20], "slower_s": slower, "worst_slower_s": worst,
                "corrupt_file": bad_runs, "target_met": ok}
    finally:
        client.close()
        cluster.close()


def _segments() -> dict:
    """In a worker: its shared segments open (by name) and its GPU backend's idle pool segments."""
    from dask_hwdecomp.routing import registry

    names = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/memfd:hwdecomp-"):
            names.add(target.split()[0])
    idle = sum(b.stats()["pinned_idle_blocks"] for b in list(registry._open.values()) if hasattr(b, "pid"))
    return {"open": len(names), "idle_in_pools": idle}


def part_sigkill(work: Path, backend: str, repeats: int, standin: str | None = None) -> dict:
    from dask_hwdecomp.service.launch import node_stats
    from dask_hwdecomp.service.rundir import service_dir

    rows = 100_000 if standin else 1_000_000  # the stand-in is a Python engine
    files = [_write(work / f"k-{i:02d}.parquet", "snappy", rows, 200 + i) for i in range(16)]
    cluster, client = _cluster(backend, standin)
    try:
        client.gather(client.map(_read_one, [str(p) for p in files], backend=backend, pure=False))  # warm
        workers = sorted(client.scheduler_info()["workers"])
        futures = client.map(_read_one, [str(p) for p in files], backend=backend, repeats=repeats, pure=False)
        directory = standin or service_dir(None)
        deadline = time.monotonic() + 120
        killed = None
        while killed is None and time.monotonic() < deadline:
            for entry in node_stats(directory):
                if entry.get("taken_run_bytes", 0) > 0:
                    killed = entry["service_pid"]
                    os.kill(killed, signal.SIGKILL)
                    break
            time.sleep(0.001)
        results = client.gather(futures)
        reads = sum(r["reads"] for r in results)
        wrong = sum(r["wrong"] for r in results)
        errors = [e for r in results for e in r["errors"]]
        alive = sorted(client.scheduler_info()["workers"])
        segments = client.run(_segments)
        leaked = {w: s for w, s in segments.items() if s["open"] != s["idle_in_pools"]}
        ok = killed is not None and wrong == 0 and alive == workers and not leaked and \
            all("CorruptPageError" not in e for e in errors)
        print(f"sigkill: service {killed} killed under 16 tasks x {repeats} reads: {reads} right, {wrong} wrong, "
              f"{len(errors)} errors; workers alive {len(alive)}/{len(workers)}; segments not in a pool: "
              f"{leaked or 'none'}: {'met' if ok else 'MISSED'}", flush=True)
        for e in errors[:10]:
            print(f"sigkill: error: {e}", flush=True)
        return {"killed": killed, "reads": reads, "wrong": wrong, "errors": errors[:20],
                "workers_before": workers, "workers_after": alive, "segments": segments, "target_met": ok}
    finally:
        client.close()
        cluster.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/faults"))
    ap.add_argument("--parts", default="alone,together,sigkill")
    ap.add_argument("--backend", default="nvcomp")
    ap.add_argument("--seeds", type=int, default=4, help="corruption seeds per codec and mode (alone)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (together)")
    ap.add_argument("--repeats", type=int, default=6, help="reads per task (sigkill)")
    ap.add_argument("--standin", metavar="DIR", help="sigkill against the busy stand-in's service in DIR (no GPU)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "files"
    work.mkdir(exist_ok=True)
    summary: dict = {"system": _system(), "backend": args.backend}
    print(json.dumps(summary["system"]), flush=True)
    parts = args.parts.split(",")
    if "alone" in parts:
        summary["alone"] = part_alone(work, args.backend, args.seeds)
    if "together" in parts:
        summary["together"] = part_together(work, args.backend, args.rounds)
    if "sigkill" in parts:
        if args.standin:
            summary["sigkill"] = part_sigkill(work, "auto", args.repeats, args.standin)
        elif args.backend == "cpu":
            print("sigkill: left out: the CPU backend has no service to kill", flush=True)
        else:
            summary["sigkill"] = part_sigkill(work, args.backend, args.repeats)
    (args.out / "faults.json").write_text(json.dumps(summary, indent=1, default=str))
    missed = [k for k, v in summary.items() if isinstance(v, dict) and v.get("target_met") is False]
    print(f"targets missed: {missed or 'none'}", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
