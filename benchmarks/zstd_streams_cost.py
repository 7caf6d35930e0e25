"""CPU cost of finding the Huffman literal streams of Zstd pages (``format/zstd_streams.pages_streams``).

Writes the bench's lineitem and high-entropy tables (``bench/data.generate``,
zstd) of about ``--mb`` MB of Arrow each, scans every page of every column,
and times ``pages_streams`` over each file's pages (the host's share of the
stream walk; the walk itself runs on the GPU). Also times the host walk of
every literal (``walk_streams``), the cost the GPU takes off the host.
Prints CPU seconds per GB of Arrow.

    python benchmarks/zstd_streams_cost.py --mb 300 --root /tmp/zstd-cost
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from dask_hwdecomp.bench.data import generate
from dask_hwdecomp.errors import PageLocation
from dask_hwdecomp.format.footer import parse_footer
from dask_hwdecomp.format.pages import chunk_range, scan_chunk
from dask_hwdecomp.format.zstd_streams import pages_streams, walk_streams


def pages_of(data: bytes) -> np.ndarray:
    """(body start, body size, output size) of every page of every column chunk of a Parquet file."""
    footer = parse_footer(data, len(data), "bench")
    out = []
    for rg in range(footer.num_row_groups):
        for chunk in footer.column_chunks(rg):
            rng = chunk_range(chunk, footer.footer_offset, PageLocation())
            view = memoryview(data)[rng.start : rng.start + rng.length]
            for p in scan_chunk(view, rng, PageLocation(), max_page_bytes=1 << 30):
                out.append((rng.start + p.body_start, p.body_size, p.uncompressed_size - p.levels_size))
    return np.array(out, np.int64).reshape(-1, 3)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=300)
    ap.add_argument("--root", type=Path, default=Path("/tmp/zstd-streams-cost"))
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    for kind in ("lineitem", "entropy"):
        ds = generate(a.root, kind, a.mb << 20, files=4, codecs=("zstd",))
        files = sorted(Path(ds.dirs["zstd"]).glob("*.parquet"))
        loaded = [(np.frombuffer(f.read_bytes(), np.uint8), pages_of(f.read_bytes())) for f in files]
        pages_streams(loaded[0][0], loaded[0][1][:, 0].copy(), loaded[0][1][:, 1].copy())  # compiled
        best = best_walk = float("inf")
        streams = literals = 0
        for _ in range(a.repeats):
            cpu = walk = 0.0
            streams = literals = 0
            for src, pages in loaded:
                t = time.process_time()
                s = pages_streams(src, pages[:, 0].copy(), pages[:, 1].copy())
                cpu += time.process_time() - t
                t = time.process_time()
                left = walk_streams(src, s.start, s.end, s.literals, s.tree, s.lengths, s.lengths_at, s.table_log)
                walk += time.process_time() - t
                assert not left.any() and not s.bad.any()
                streams += len(s.start)
                literals += int(s.literals.sum())
            best, best_walk = min(best, cpu), min(best_walk, walk)
        gb = ds.arrow_bytes / 1e9
        print(f"{kind}: {len(files)} files, {sum(len(p) for _, p in loaded)} pages, {streams} streams, "
              f"{literals} literals, {gb:.3f} GB of Arrow: pages_streams {best / gb:.4f} CPU s/GB, "
              f"host walk of every literal {best_walk / gb:.3f} CPU s/GB")


if __name__ == "__main__":
    main()
