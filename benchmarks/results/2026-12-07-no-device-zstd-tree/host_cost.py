"""The host cost of the Zstd checks: ``find_suspects`` over every Zstd page of the bench's tables (not in CI).

Writes the bench's lineitem and entropy tables (``dask_hwdecomp.bench``'s
generators, its dictionary settings) as Zstd Parquet under ``--data``
(reused when there), gathers every page's stored bytes into one batch of
jobs, and times ``find_suspects`` over it: the CPU seconds of the best of
``--repeats`` runs after a warm-up (which loads or compiles the numba
code), per GB of compressed pages and per Huffman tree description.

Run it from a checkout (PYTHONPATH) to measure that checkout: once on the
commit before the tree check and once after, same data, same machine.

Usage: python host_cost.py --data DIR [--mb 150] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pyarrow.parquet as pq

from dask_hwdecomp.bench.tables import KINDS, bytes_per_row, make_table
from dask_hwdecomp.decompress.table_checks import find_suspects
from dask_hwdecomp.errors import PageLocation
from dask_hwdecomp.format.footer import parse_footer
from dask_hwdecomp.format.pages import chunk_range, scan_chunk
from dask_hwdecomp.jobs import Algo, Job, JobTable


def write(data: Path, mb: int) -> list[Path]:
    out = []
    for kind in ("lineitem", "entropy"):
        rows = int(mb * 1e6 / bytes_per_row(kind))
        part_rows = 500_000
        for i, first in enumerate(range(0, rows, part_rows)):
            p = data / f"{kind}-{mb}-{i:03d}.parquet"
            if not p.exists():
                table = make_table(kind, min(part_rows, rows - first), seed=i, first_row=first)
                pq.write_table(table, p, compression="zstd", use_dictionary=KINDS[kind][1])
            out.append(p)
    return out


def batch(paths: list[Path]):
    """(jobs, source, dst bytes, compressed-literal blocks) of every page of ``paths``."""
    src = bytearray()
    jobs = []
    dst = 0
    for path in paths:
        data = path.read_bytes()
        footer = parse_footer(data, len(data), str(path))
        for rg in range(footer.num_row_groups):
            for chunk in footer.column_chunks(rg):
                rng = chunk_range(chunk, footer.footer_offset, PageLocation())
                if not rng.length:
                    continue
                view = memoryview(data)[rng.start: rng.start + rng.length]
                for p in scan_chunk(view, rng, PageLocation(), max_page_bytes=1 << 30):
                    if not p.compressed:
                        continue
                    at = rng.start + p.body_start + p.levels_size
                    size = p.body_size - p.levels_size
                    jobs.append(Job(Algo.ZSTD, len(src), size, dst, p.uncompressed_size - p.levels_size, 0, None))
                    src += data[at: at + size]
                    dst += p.uncompressed_size - p.levels_size
    return jobs, memoryview(bytes(src)), dst


def trees(src: bytes, jobs) -> int:
    """Compressed blocks with a Huffman tree description (compressed literals), over all frames."""
    n = 0
    for job in jobs:
        frame = src[job.src_offset: job.src_offset + job.src_size]
        fhd = frame[4]
        single = (fhd >> 5) & 1
        pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + ((1 if single else 0), 2, 4, 8)[fhd >> 6]
        while True:
            bh = int.from_bytes(frame[pos:pos + 3], "little")
            btype, bsize = (bh >> 1) & 3, bh >> 3
            n += btype == 2 and frame[pos + 3] & 3 == 2
            pos += 3 + (1 if btype == 1 else bsize)
            if bh & 1:
                break
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--mb", type=int, default=150, help="Arrow MB of each table")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    a.data.mkdir(parents=True, exist_ok=True)
    jobs, src, dst = batch(write(a.data, a.mb))
    table = JobTable.from_jobs(jobs)
    n_trees = trees(bytes(src), jobs)
    found = find_suspects(table, src, len(src), dst, 1 << 30, frozenset(Algo))  # warm-up: load or compile
    assert len(found.rows) == 0
    best = min(_cpu(lambda: find_suspects(table, src, len(src), dst, 1 << 30, frozenset(Algo)))
               for _ in range(a.repeats))
    gb = len(src) / 1e9
    print(f"{len(jobs)} Zstd pages, {gb:.3f} GB compressed ({dst / 1e9:.3f} GB decompressed), {n_trees} trees")
    print(f"find_suspects: {best:.4f} CPU s = {best / gb:.4f} CPU s/GB compressed, "
          f"{best / (dst / 1e9):.4f} per GB decompressed, {best / max(n_trees, 1) * 1e6:.2f} us per tree")


def _cpu(fn) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


if __name__ == "__main__":
    main()

