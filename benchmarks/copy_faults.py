"""How fast a task copies one GPU-decoded output (about 95 MB) out of shared memory, by destination.

Usage::

    python benchmarks/copy_faults.py [--mib 95] [--repeats 5] [--threads 4]

The read's tail copies outputs past the zero-copy share into fresh memory
(``service/decoding.py``); at scale each copy ran at about 2.3 GB/s. This
times the same copy into: fresh ``np.empty`` memory (what the read does),
a buffer reused from the copy before (pre-faulted), fresh anonymous memory
advised for transparent huge pages, fresh memory populated by one
``MADV_POPULATE_WRITE`` before the copy, and fresh ``np.empty`` memory from
``--threads`` threads of one process at once (as a worker's tasks do). It
prints the machine's transparent-huge-page settings first.
"""

from __future__ import annotations

import argparse
import mmap
import threading
import time
from pathlib import Path

import numpy as np

MADV_POPULATE_WRITE = 23  # Linux 5.14


def _thp() -> str:
    out = []
    for name in ("enabled", "defrag"):
        p = Path("/sys/kernel/mm/transparent_hugepage") / name
        out.append(f"{name}: {p.read_text().strip() if p.exists() else '?'}")
    return "; ".join(out)


def _anon(nbytes: int, advice: int | None) -> np.ndarray:
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if advice is not None:
        m.madvise(advice)
    return np.frombuffer(m, dtype=np.uint8)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=95)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=4)
    args = ap.parse_args(argv)
    n = args.mib << 20
    src = np.random.default_rng(0).integers(0, 255, n, dtype=np.uint8)
    print(_thp(), flush=True)
    reused = np.empty(n, np.uint8)
    reused[:] = 1

    def fresh():
        return np.empty(n, np.uint8)

    def huge():
        return _anon(n, getattr(mmap, "MADV_HUGEPAGE", 14))

    def populated():
        return _anon(n, MADV_POPULATE_WRITE)

    ways = {"np.empty (the read's way)": fresh, "reused buffer": lambda: reused, "MADV_HUGEPAGE": huge,
            "MADV_POPULATE_WRITE then copy": populated}
    for name, make in ways.items():
        best = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            try:
                dst = make()
            except OSError as exc:
                best = None
                print(f"{name}: not available ({exc})")
                break
            dst[:] = src
            best.append(time.perf_counter() - t)
            del dst
        if best:
            s = sorted(best)[len(best) // 2]
            print(f"{name}: {s * 1e3:.1f} ms, {n / s / 1e9:.2f} GB/s (median of {args.repeats})", flush=True)
    times: list[float] = []
    lock = threading.Lock()

    def one():
        t = time.perf_counter()
        dst = np.empty(n, np.uint8)
        dst[:] = src
        with lock:
            times.append(time.perf_counter() - t)

    threads = [threading.Thread(target=one) for _ in range(args.threads)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    print(f"np.empty from {args.threads} threads at once: {np.median(times) * 1e3:.1f} ms each, "
          f"{args.threads * n / wall / 1e9:.2f} GB/s together", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
