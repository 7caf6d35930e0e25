"""engine="pyarrow" against engine=hwdecomp without a GPU, threaded scheduler.

Writes a few lineitem-like files per codec, then reads them, interleaved,
with ``engine="pyarrow"``, ``engine=hwdecomp`` (``backend="auto"``: on a
machine without a GPU, pyarrow's own read) and ``engine=hwdecomp`` with
``backend="cpu"`` (the project's page path on the CPU pool, which is what
``auto`` did without a GPU before it handed such reads to pyarrow). Prints
the median wall and process CPU seconds and their ratios to pyarrow.

    python benchmarks/no_gpu_auto.py --rows 1500000 --files 4 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import dask
import dask.dataframe as dd
import pyarrow.parquet as pq

from dask_hwdecomp import hwdecomp
from dask_hwdecomp.bench.tables import lineitem

VARIANTS = {
    "pyarrow": {"engine": "pyarrow"},
    "hwdecomp auto": {"engine": hwdecomp},
    "hwdecomp cpu": {"engine": hwdecomp, "hwdecomp_options": {"backend": "cpu"}},
}


def write(root: Path, codec: str, rows: int, files: int) -> Path:
    out = root / codec
    out.mkdir()
    per = rows // files
    for i in range(files):
        pq.write_table(lineitem(per, seed=i, first_row=i * per), out / f"part-{i}.parquet", compression=codec,
                       row_group_size=per // 4)
    return out


def read(path: Path, kwargs: dict) -> tuple[float, float]:
    cpu0, t0 = time.process_time(), time.perf_counter()
    dd.read_parquet(str(path), **kwargs).compute(scheduler="threads")
    return time.perf_counter() - t0, time.process_time() - cpu0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_500_000)
    p.add_argument("--files", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--codecs", default="snappy,zstd,gzip")
    args = p.parse_args()
    codecs = args.codecs.split(",")
    with tempfile.TemporaryDirectory(prefix="hwdecomp-nogpu-") as tmp, dask.config.set(scheduler="threads"):
        paths = {c: write(Path(tmp), c, args.rows, args.files) for c in codecs}
        for c in codecs:  # warm up imports, page cache, pools
            for kw in VARIANTS.values():
                read(paths[c], kw)
        times: dict = {(c, v): [] for c in codecs for v in VARIANTS}
        for _ in range(args.repeats):
            for c in codecs:
                for v, kw in VARIANTS.items():
                    times[(c, v)].append(read(paths[c], kw))
    print(f"{args.files} files x {args.rows // args.files:,} rows, threaded scheduler, median of {args.repeats}")
    print(f"{'codec':<8} {'variant':<14} {'wall s':>8} {'cpu s':>8} {'wall/pyarrow':>13} {'cpu/pyarrow':>12}")
    for c in codecs:
        base = [statistics.median(x) for x in zip(*times[(c, "pyarrow")])]
        for v in VARIANTS:
            wall, cpu = (statistics.median(x) for x in zip(*times[(c, v)]))
            print(f"{c:<8} {v:<14} {wall:>8.3f} {cpu:>8.3f} {wall / base[0]:>13.2f} {cpu / base[1]:>12.2f}")


if __name__ == "__main__":
    main()
