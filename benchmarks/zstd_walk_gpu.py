"""GPU time of the Huffman stream walk kernel per file, against its host share (device only, a probe).

Writes the bench's two tables (Zstd, 400 MB each in 4 files) under /tmp/walkdata, finds the streams of
three files of each on the host and times the kernel of the tree on PYTHONPATH over them (the median of
five launches, a block of ``LANES`` threads per stream), checking it against the host walk:

    PYTHONPATH=.devcarry/before python benchmarks/zstd_walk_gpu.py
"""
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, "benchmarks")


def main():
    from numba import cuda
    from zstd_streams_cost import pages_of

    from dask_hwdecomp.bench.data import generate
    from dask_hwdecomp.decompress import zstd_walk_kernel as kernels
    from dask_hwdecomp.format.zstd_streams import pages_streams, walk_streams

    walk_kernel, lanes = kernels.walk_kernel, kernels.LANES
    stream = cuda.stream()
    for kind in ("entropy", "lineitem"):
        ds = generate(Path("/tmp/walkdata"), kind, 400 << 20, files=4, codecs=("zstd",))
        for f in sorted(Path(ds.dirs["zstd"]).glob("*.parquet"))[:3]:
            data = f.read_bytes()
            src = np.frombuffer(bytearray(data), np.uint8)
            pg = pages_of(data)
            off, size = np.ascontiguousarray(pg[:, 0]), np.ascontiguousarray(pg[:, 1])
            t0 = time.perf_counter()
            s = pages_streams(src, off, size)
            t1 = time.perf_counter()
            cols = [np.ascontiguousarray(c, np.int64) for c in (s.start, s.end, s.literals, s.lengths_at[s.tree], s.table_log[s.tree])]
            host_left = walk_streams(src, s.start, s.end, s.literals, s.tree, s.lengths, s.lengths_at, s.table_log)
            d_src = cuda.to_device(src, stream=stream)
            d_cols = [cuda.to_device(c, stream=stream) for c in cols]
            d_len = cuda.to_device(np.ascontiguousarray(s.lengths), stream=stream)
            out = cuda.device_array(len(s.start), np.int64, stream=stream)
            m = len(s.start)
            walk_kernel[m, lanes, stream](d_src, *d_cols, d_len, out)  # warm
            stream.synchronize()
            times = []
            for _ in range(5):
                a, b = cuda.event(), cuda.event()
                a.record(stream)
                walk_kernel[m, lanes, stream](d_src, *d_cols, d_len, out)
                b.record(stream)
                b.synchronize()
                times.append(cuda.event_elapsed_time(a, b))
            same = np.array_equal(out.copy_to_host(), host_left)
            lits = int(s.literals.sum())
            print(f"{kind} {f.name}: {len(data)/1e6:.0f} MB, pages {len(pg)}, streams {m}, literals {lits/1e6:.1f} M, "
                  f"host pages_streams {1e3*(t1-t0):.2f} ms, kernel min {min(times):.2f} ms median {sorted(times)[2]:.2f} ms "
                  f"({lits/min(times)/1e6:.2f} G literals/s), equal to host walk: {same}", flush=True)


if __name__ == "__main__":
    main()
