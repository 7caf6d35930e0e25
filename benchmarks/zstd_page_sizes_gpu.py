"""Does a GPU Zstd call last as long as its largest page? nvCOMP's time for one call of pages of one size class.

At scale a lineitem-like Zstd call took about 35 ms whether it held one part or three
(``benchmarks/results/2026-12-07-h100-walk-prepared/``): the length of a call may be its slowest
page's, and nvCOMP decodes a page in one thread block. This probe writes the bench's two tables (Zstd,
``bench/data.generate``), takes every page of one file, and times ``backend.decompress`` through
nvCOMP in-process on the pages of each size class alone (1 MiB dictionary pages, data pages of
hundreds of KB, small ones), on all the file's pages, on all but the largest class, and on each page
of the largest class alone (its 8 largest: output, input and ratio), beside libzstd on one host thread (the CPU
backend) over the same pages. Device only; prints a line per call: pages, their largest output, MB
out, the median wall ms of five calls on each.

    python benchmarks/zstd_page_sizes_gpu.py --root /tmp/zstd-sizes

It takes its page listing from ``benchmarks/zstd_streams_cost.py``, beside it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from zstd_streams_cost import pages_of

from dask_hwdecomp.bench.data import generate
from dask_hwdecomp.errors import PageLocation
from dask_hwdecomp.jobs import Algo, Job

ZSTD_CODEC = 6  # Parquet's codec number for ZSTD
CLASSES = ((768 << 10, 1 << 40), (256 << 10, 768 << 10), (0, 256 << 10))  # output bytes, [low, high)


def timed(backend, data: bytes, pages: list[tuple[int, int, int]], repeats: int) -> float:
    """Median wall ms of ``repeats`` calls of ``backend.decompress`` over ``pages``."""
    jobs, at = [], 0
    for i, (start, size, out) in enumerate(pages):
        jobs.append(Job(Algo.ZSTD, start, size, at, out, ZSTD_CODEC, PageLocation(file="probe", page=i)))
        at += out
    src = backend.host_buffer(len(data))
    dst = backend.host_buffer(max(at, 1))
    try:
        src.view[: len(data)] = data
        backend.decompress(jobs, src.view[: len(data)], dst.view[:at])  # warm
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            backend.decompress(jobs, src.view[: len(data)], dst.view[:at])
            times.append(1e3 * (time.perf_counter() - t))
        return statistics.median(times)
    finally:
        src.close()
        dst.close()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", type=Path, default=Path("/tmp/zstd-sizes"))
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    from dask_hwdecomp.decompress.cpu import CpuBackend
    from dask_hwdecomp.decompress.nvcomp import create
    from dask_hwdecomp.options import Options

    with create(Options(streams=1, batch_latency_ms=0.0, zstd_stream_walk=False)) as backend, CpuBackend(1) as cpu:
        for kind in ("lineitem", "entropy"):
            ds = generate(a.root, kind, 400 << 20, files=4, codecs=("zstd",))
            data = sorted(Path(ds.dirs["zstd"]).glob("*.parquet"))[0].read_bytes()
            pages = [tuple(p) for p in pages_of(data).tolist() if p[1] > 0 and p[2] > 0]
            groups = [(f"[{lo >> 10} KiB, {min(hi, 1 << 30) >> 10} KiB)", [p for p in pages if lo <= p[2] < hi])
                      for lo, hi in CLASSES]
            groups += [("all", pages), ("all but the first class", [p for p in pages if p[2] < CLASSES[0][0]])]
            for name, chosen in groups:
                if not chosen:
                    continue
                sizes = np.array([p[2] for p in chosen])
                ms = timed(backend, data, chosen, a.repeats)
                host = timed(cpu, data, chosen, a.repeats)
                print(f"{kind} {name}: {len(chosen)} pages, largest {sizes.max() / 1e3:.0f} KB, "
                      f"{sizes.sum() / 1e6:.1f} MB out; nvCOMP {ms:.1f} ms ({sizes.sum() / 1e6 / ms:.2f} GB/s), "
                      f"libzstd on one thread {host:.1f} ms", flush=True)
            # Each page of the largest class alone (its 8 largest): which of them sets a call's length.
            for start, size, out in sorted((p for p in pages if p[2] >= CLASSES[0][0]), key=lambda p: -p[2])[:8]:
                ms = timed(backend, data, [(start, size, out)], a.repeats)
                host = timed(cpu, data, [(start, size, out)], a.repeats)
                print(f"{kind} one page at byte {start}: {out / 1e3:.0f} KB out of {size / 1e3:.0f} KB "
                      f"(ratio {out / size:.2f}); nvCOMP {ms:.1f} ms, libzstd {host:.1f} ms", flush=True)


if __name__ == "__main__":
    main()
