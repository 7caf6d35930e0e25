"""Thread seconds of page scan + layout (+ fill) per GB, compiled kernels vs the Python reference.

Usage: python scripts/bench_scan.py ROOT [REPEATS]

ROOT holds ``<codec>/*.parquet`` (``dask_hwdecomp.bench.data.generate`` writes
one). Every file of a codec is fetched into one buffer, as a batch; the two
layouts run interleaved, ``REPEATS`` times; the median is printed per codec.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np
from fsspec.implementations.local import LocalFileSystem

from dask_hwdecomp.format.fastlayout import ChunkSpec, FileSpec, lay_out_batch, reference_layout
from dask_hwdecomp.readpath.plan import Piece, plan_piece


def batch(paths):
    fs = LocalFileSystem()
    parts, files, pos = [], [], 0
    for path in paths:
        plan = plan_piece(fs, Piece(str(path)), None)
        data = path.read_bytes()
        files.append(FileSpec(plan.footer, plan.row_groups,
                              [ChunkSpec(c.row_group, c.column, c.rng, c.where, pos + c.rng.start) for c in plan.chunks]))
        parts.append(data)
        pos += len(data)
    return np.frombuffer(bytearray(b"".join(parts)), np.uint8), files


def run(fn, src, files):
    """(layout seconds, fill seconds, layout); the destination is faulted in before the fill."""
    t0 = time.thread_time()
    layout = fn(memoryview(src), files, max_page_bytes=1 << 30, verify_checksums=False)
    t1 = time.thread_time()
    dst = np.ones(layout.size, np.uint8)
    t2 = time.thread_time()
    layout.fill(memoryview(dst), memoryview(src))
    return t1 - t0, time.thread_time() - t2, layout


def main():
    root = Path(sys.argv[1])
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    batches = {d.name: batch(sorted(d.glob("*.parquet"))) for d in sorted(root.iterdir()) if d.is_dir()}
    run(lay_out_batch, *next(iter(batches.values())))  # compile or load the kernels
    times = {(c, v, k): [] for c in batches for v in ("reference", "compiled") for k in (0, 1)}
    sizes = {}
    for _ in range(repeats):
        for codec, (src, files) in batches.items():
            for name, fn in (("reference", reference_layout), ("compiled", lay_out_batch)):
                t, f, layout = run(fn, src, files)
                times[(codec, name, 0)].append(t)
                times[(codec, name, 1)].append(f)
                sizes[codec] = (layout.size, len(layout.jobs))
    print("thread seconds per GB of uncompressed image, median of", repeats)
    print(f"{'codec':13} {'image MB':>8} {'jobs':>6} | {'scan+layout: ref':>16} {'compiled':>9} {'ratio':>6} |"
          f" {'fill: ref':>9} {'compiled':>9}")
    for codec in batches:
        gb = sizes[codec][0] / 1e9
        m = {k: statistics.median(v) / gb for k, v in times.items() if k[0] == codec}
        r, c = m[(codec, "reference", 0)], m[(codec, "compiled", 0)]
        print(f"{codec:13} {sizes[codec][0] / 1e6:8.1f} {sizes[codec][1]:6d} | {r:16.4f} {c:9.4f} {r / c:5.1f}x |"
              f" {m[(codec, 'reference', 1)]:9.4f} {m[(codec, 'compiled', 1)]:9.4f}")


if __name__ == "__main__":
    main()
