"""What a GPU-decoded output's copy out of shared memory costs on this host, by where it lands.

Usage::

    python benchmarks/copy_probe.py [--mib 95] [--threads 1,4] [--repeats 5]

A read whose outputs press the shared pool copies each of them (about
95 MB at the bench's scale) out of its shared segment into ordinary memory
on the task's thread (``decode_output_copy`` in the timeline). On the
H100 host of 2026-12-05 such a copy took about 45 ms of CPU, on an idle
2-core development machine about 9 ms: this times the same copy, from a
populated memfd segment as the reader's pool makes them, into

- ``numpy``: a fresh ``np.empty`` (what the read does), every page
  faulted on the copy;
- ``huge``: a fresh anonymous mapping advised ``MADV_HUGEPAGE``;
- ``populate``: a fresh anonymous mapping populated first
  (``MADV_POPULATE_WRITE``);
- ``reused``: a buffer already written once (no fault at all: the copy's
  own cost);

with ``--threads`` copies at once (a worker's reading threads), and prints
milliseconds a copy (the best of ``--repeats``) and GB/s; plus the host's
transparent huge page settings.
"""

from __future__ import annotations

import argparse
import mmap
import threading
import time
from pathlib import Path

import numpy as np


def _fresh_numpy(n: int) -> np.ndarray:
    return np.empty(n, np.uint8)


def _fresh_mapping(n: int, advice: int | None) -> np.ndarray:
    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if advice is not None:
        try:
            m.madvise(advice)
        except OSError:
            pass  # the kernel lacks it: the figure says what that costs
    return np.frombuffer(m, np.uint8)


def _copies(src: np.ndarray, n: int, threads: int, fresh, reused: list) -> float:
    """Seconds for ``threads`` copies of ``src`` at once, each into ``fresh(n)`` (None: a reused buffer)."""
    keep: list = []

    def copy(i: int) -> None:
        dst = reused[i] if fresh is None else fresh(n)
        dst[:] = src
        keep.append(dst)

    workers = [threading.Thread(target=copy, args=(i,)) for i in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mib", type=int, default=95)
    p.add_argument("--threads", default="1,4")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)

    from dask_hwdecomp.service.shm import SharedSegment

    n = args.mib << 20
    for name in ("enabled", "defrag", "shmem_enabled"):
        path = Path("/sys/kernel/mm/transparent_hugepage") / name
        print(f"transparent_hugepage/{name}: {path.read_text().strip() if path.exists() else '-'}")
    src_seg = SharedSegment(1, n)
    src = np.frombuffer(src_seg.view, np.uint8)
    src[::4096] = 1
    kinds = {
        "numpy": _fresh_numpy,
        "huge": lambda k: _fresh_mapping(k, getattr(mmap, "MADV_HUGEPAGE", 14)),
        "populate": lambda k: _fresh_mapping(k, getattr(mmap, "MADV_POPULATE_WRITE", 23)),
    }
    for threads in [int(t) for t in args.threads.split(",") if t]:
        reused = [np.ones(n, np.uint8) for _ in range(threads)]
        for kind in [*kinds, "reused"]:
            best = min(_copies(src, n, threads, kinds.get(kind), reused) for _ in range(args.repeats))
            print(f"{threads} thread(s), {kind:9s}: {1e3 * best:7.1f} ms for {threads} copies of {args.mib} MiB, "
                  f"{threads * n / best / 1e9:6.1f} GB/s", flush=True)
    src_seg.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
