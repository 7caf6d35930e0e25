"""Mutated Parquet files through ``read_table(backend="nvcomp")``, each in a child process.

Usage (on the GPU machine, from the repository root, tests/ importable)::

    python scripts/gpu_mutation_run.py --cases 1600 --workers 4 --seconds 300 --out /tmp/mut
    python scripts/gpu_mutation_run.py --cases 1500 --timeout 5 --decode gpu --out /tmp/mut-decode
    python scripts/gpu_mutation_run.py --only 622,1137 --backend cpu --out /tmp/replay   # two cases again

Seeds: files written here with every GPU codec (page v1 and v2, dictionary
on and off, gzip pages of several members, checksummed Zstd frames) and the
corpus files (``tests/data/parquet-testing``, or ``$HWDECOMP_CORPUS``) with a GPU codec. Each case is a seed
turned into a broken variant by one of ``tests/fuzzing.py``'s mutators and
read by a guarded child (``tests/fuzz_worker.py``: ours, then pyarrow's)
with a timeout (``--timeout``: a case that takes longer counts as a hang).
``--workers`` harnesses run side by side, each child with its own
attachment to the GPU service; each first reads a valid seed, untimed, so
that starting the service is no case's time. ``--decode gpu`` also decodes
on the GPU.

The figure that matters: files pyarrow refuses with a checksum or data-check
error (``incorrect data check``, ``checksum``, ``CRC``) but we return rows
for. It must be 0; the script exits 1 otherwise, and on any other FAIL
verdict. A summary is printed and written to ``OUT/summary.json``; failing
mutants are kept under ``OUT/failures``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from mutation_seeds import mutant, seed_maps  # noqa: E402

from fuzzing import Harness, Results  # noqa: E402

CHECK_ERROR = re.compile(r"incorrect data check|checksum|crc", re.IGNORECASE)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1600)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=300.0, help="stop starting cases after this long")
    ap.add_argument("--timeout", type=float, default=40.0, help="seconds per case before it counts as a hang")
    ap.add_argument("--gpu-timeout", type=float, default=10.0, help="the reads' gpu_timeout_s")
    ap.add_argument("--out", type=Path, default=Path("/tmp/mutation-run"))
    ap.add_argument("--backend", default="nvcomp", help="the backend read with (cpu: a dry run without GPU)")
    ap.add_argument("--decode", default="cpu", choices=("cpu", "auto", "gpu"), help="the reads' decode")
    ap.add_argument("--only", type=lambda s: [int(x) for x in s.split(",")], default=None,
                    help="replay only these case numbers (comma-separated)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    maps = seed_maps(args.out)
    options = {"gpu_timeout_s": args.gpu_timeout, "decode": args.decode} if args.backend != "cpu" else {}
    started = time.monotonic()
    lock = threading.Lock()
    counter = iter(args.only if args.only is not None else range(args.cases))
    verdicts: Counter = Counter()
    failures: list = []
    per_seed: Counter = Counter()

    def worker(w: int) -> None:
        work = args.out / f"w{w}"
        work.mkdir(exist_ok=True)
        harness = Harness(work, timeout=180.0, memory_limit=0)
        try:
            harness.run(maps[0][0].read_bytes(), "warm-up", backend=args.backend, options=options)
            harness.timeout, harness.results = args.timeout, Results()
            while time.monotonic() - started < args.seconds:
                with lock:
                    i = next(counter, None)
                if i is None:
                    return
                path, label, data = mutant(maps, i)
                harness.run(data, label, backend=args.backend, options=options)
                with lock:
                    per_seed[path.name] += 1
        finally:
            harness.close()
            with lock:
                verdicts.update(harness.results.verdicts)
                failures.extend(harness.results.failures)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(args.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    rows_on_check = [f for f in failures if f[1] == "FAIL-rows-where-pyarrow-refuses" and CHECK_ERROR.search(f[2])]
    keep = args.out / "failures"
    keep.mkdir(exist_ok=True)
    for label, _verdict, _detail, data in failures[:50]:
        (keep / (label.replace(":", "_") + ".parquet")).write_bytes(data)
    summary = {
        "cases": sum(verdicts.values()),
        "seconds": round(elapsed, 1),
        "seeds": len(maps),
        "verdicts": dict(sorted(verdicts.items())),
        "rows_where_pyarrow_refuses_with_a_check_error": len(rows_on_check),
        "failures": [f"{v} {label}: {d}" for label, v, d, _ in failures[:50]],
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "failures"}))
    for line in summary["failures"]:
        print(line[:300])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
