"""dd.read_parquet on the threaded scheduler: engine="pyarrow" against engine=hwdecomp (CPU backend).

Usage: python scripts/bench_read.py ROOT [REPEATS]

ROOT holds ``<codec>/*.parquet``. Variants run interleaved per repeat:
pyarrow, hwdecomp with the compiled scan, hwdecomp with the Python reference
scan. Prints the median wall seconds and the ratios to pyarrow.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import dask
import dask.dataframe as dd

from dask_hwdecomp import collect_reports, hwdecomp
from dask_hwdecomp.readpath import batch

VARIANTS = ("pyarrow", "hwdecomp", "hwdecomp-reference-scan")


def read(path: Path, variant: str) -> tuple[float, float, float]:
    batch.FAST_SCAN = variant != "hwdecomp-reference-scan"
    kw = {"engine": "pyarrow"} if variant == "pyarrow" else {"engine": hwdecomp, "hwdecomp_options": {"backend": "cpu"}}
    with collect_reports() as report:
        t0, c0 = time.perf_counter(), time.process_time()
        df = dd.read_parquet(str(path), **kw).compute()
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert len(df)
    return elapsed, cpu, report.stages["scan"]


def main():
    root = Path(sys.argv[1])
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    codecs = [d.name for d in sorted(root.iterdir()) if d.is_dir()]
    times = {(c, v): [] for c in codecs for v in VARIANTS}
    with dask.config.set(scheduler="threads"):
        for c in codecs:
            read(root / c, "hwdecomp")  # warm: imports, kernels, page cache
        for _ in range(repeats):
            for c in codecs:
                for v in VARIANTS:
                    times[(c, v)].append(read(root / c, v))
    print(f"median of {repeats}, threaded scheduler; wall s, process CPU s; throughput ratio = pyarrow wall / variant wall")
    print(f"{'codec':13} {'pyarrow':>13} {'hwdecomp':>13} {'ref-scan':>13} | {'hw/pa':>6} {'ref/pa':>6} |"
          f" scan stage s: {'hwdecomp':>8} {'ref-scan':>8}")
    for c in codecs:
        w = {v: statistics.median(t[0] for t in times[(c, v)]) for v in VARIANTS}
        u = {v: statistics.median(t[1] for t in times[(c, v)]) for v in VARIANTS}
        cells = " ".join(f"{w[v]:6.3f}/{u[v]:6.3f}" for v in VARIANTS)
        sc = {v: statistics.median(t[2] for t in times[(c, v)]) for v in VARIANTS}
        print(f"{c:13} {cells} | {w['pyarrow'] / w['hwdecomp']:6.2f} {w['pyarrow'] / w['hwdecomp-reference-scan']:6.2f} |"
              f" {'':13} {sc['hwdecomp']:8.3f} {sc['hwdecomp-reference-scan']:8.3f}")


if __name__ == "__main__":
    main()
