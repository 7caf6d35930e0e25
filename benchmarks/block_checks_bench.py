"""The block checks' kernel alone on the GPU: GB/s of output it walks, per codec and page size.

Usage (on the GPU machine, from the repository root; a dataset of
``hwdecomp bench``, e.g. the one ``run-h200-checks.sh`` keeps)::

    python benchmarks/block_checks_bench.py /tmp/checks-data/lineitem/uncompressed --mib 256

Pages are cut from the files' bytes (``bench.pages``), compressed with
Snappy and LZ4, laid end to end on the device, and walked by
``block_checks.check_blocks`` as the nvCOMP launcher queues it (one
thread a block), timed from the launch to the stream's end over ``--repeats`` launches. The
figure to hold against nvCOMP's decompression of the same pages (the
bench's decompression part): a walk slower than it adds to every GPU call.
"""

from __future__ import annotations

import argparse
import glob
import sys
import time
from pathlib import Path

import numpy as np

from dask_hwdecomp.bench.pages import compress_pages, read_plain_pages
from dask_hwdecomp.gpu.block_checks import BLOCK_OK, WALK_LZ4, WALK_SNAPPY, check_blocks
from dask_hwdecomp.gpu.cuda_jit import cuda

_WALKS = {"snappy": WALK_SNAPPY, "lz4_raw": WALK_LZ4}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path, help="a directory of Parquet files (uncompressed) to cut pages from")
    ap.add_argument("--mib", type=int, default=256, help="output bytes walked per launch")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    files = sorted(glob.glob(str(args.data / "*.parquet")))
    stream = cuda.stream()
    for page_kib in (1024, 64):
        pages = read_plain_pages(files, args.mib << 20, page_kib << 10)
        for codec, walk in _WALKS.items():
            ps = compress_pages(codec, pages)
            n = len(ps.jobs)
            arena = cuda.to_device(np.frombuffer(ps.src, np.uint8))
            offsets = np.array([j.src_offset for j in ps.jobs], np.uint64)
            sizes = cuda.to_device(np.array([j.src_size for j in ps.jobs], np.uint64))
            caps = cuda.to_device(np.array([j.dst_size for j in ps.jobs], np.uint64))
            fault = cuda.device_array(n, np.int32)
            times = []
            for _ in range(args.repeats + 1):  # the first compiles or loads the kernel
                ptrs = cuda.to_device(offsets)
                stream.synchronize()
                began = time.perf_counter()  # the launch's Python and the kernel, as a GPU call pays them
                check_blocks(walk, arena, 0, ptrs, sizes, caps, fault, 0, stream)
                stream.synchronize()
                times.append(time.perf_counter() - began)
            bad = int((fault.copy_to_host() != BLOCK_OK).sum())
            best = min(times[1:])
            print(f"{codec} {page_kib} KiB pages: {n} blocks, {ps.out_bytes / 1e6:.0f} MB out, "
                  f"walk {best * 1e3:.2f} ms = {ps.out_bytes / best / 1e9:.1f} GB/s of output (refused {bad})",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
