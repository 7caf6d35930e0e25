"""``hwdecomp demo``: read a dataset through ``dd.read_parquet(engine=hwdecomp)``
on a distributed ``LocalCluster`` and say what happened.

With no path it first writes a sample dataset (a TPC-H lineitem-like table,
snappy, several files). It checks the result against ``engine="pyarrow"``
and prints rows, bytes, the backend per codec and throughput.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

__all__ = ["add_parser", "run", "make_sample"]


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "demo",
        help="read a (generated) dataset with engine=hwdecomp on a LocalCluster",
        description=__doc__,
    )
    p.add_argument("path", nargs="?", help="Parquet file, directory or glob (default: make a sample)")
    p.add_argument("--rows", type=int, default=2_000_000, help="rows of the sample dataset")
    p.add_argument("--files", type=int, default=8, help="files of the sample dataset")
    p.add_argument("--codec", default="snappy", help="codec of the sample dataset")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="threads per worker")
    p.add_argument("--backend", default="auto", choices=("auto", "hardware", "nvcomp", "cpu"))
    p.add_argument("--no-check", action="store_true", help="skip the comparison with engine='pyarrow'")
    p.set_defaults(func=run)


def make_sample(root: Path, rows: int, files: int, codec: str) -> Path:
    """Write ``files`` Parquet files of a lineitem-like table under ``root``."""
    import pyarrow.parquet as pq
    from tqdm import tqdm

    from ..bench.tables import lineitem

    out = Path(root) / f"lineitem-{codec}"
    out.mkdir(parents=True, exist_ok=True)
    per = max(1, rows // files)
    for i in tqdm(range(files), desc="writing sample", unit="file"):
        table = lineitem(per, seed=i, first_row=i * per)
        pq.write_table(table, out / f"part-{i:04d}.parquet", compression=codec, row_group_size=per // 4 or 1)
    return out


def _wait_metrics(client, timeout: float = 10.0) -> dict:
    from ..engine.metrics import cluster_metrics
    from ..report import PYARROW_NO_GPU

    deadline = time.monotonic() + timeout
    found: dict = {}
    while time.monotonic() < deadline:
        found = cluster_metrics(client)
        # pages from the page path; pyarrow's own reads (no GPU) count files
        if any(unit == "pages" or label == f"hwdecomp-{PYARROW_NO_GPU}" for label, unit in found):
            break
        time.sleep(0.5)
    return found


def run(args) -> int:
    """Run the demo; returns the exit status."""
    import dask.dataframe as dd
    import pandas as pd
    from distributed import Client, LocalCluster, futures_of, wait
    from tqdm import tqdm

    from .. import hwdecomp
    from ..engine.plugin import HwdecompPlugin
    from ..report import PYARROW_NO_GPU

    tmp = None
    path = args.path
    if path is None:
        tmp = tempfile.TemporaryDirectory(prefix="hwdecomp-demo-")
        path = str(make_sample(Path(tmp.name), args.rows, args.files, args.codec))
    options = {"backend": args.backend}
    try:
        with LocalCluster(
            n_workers=args.workers, threads_per_worker=args.threads, processes=True, dashboard_address=None
        ) as cluster, Client(cluster) as client:
            client.register_plugin(HwdecompPlugin(**options))
            routes = client.run(lambda dask_worker: dask_worker.extensions["hwdecomp"].backends)
            df = dd.read_parquet(path, engine=hwdecomp, hwdecomp_options=options)
            t0 = time.perf_counter()
            df = df.persist()
            futures = futures_of(df)
            with tqdm(total=len(futures), desc="reading", unit="partition") as bar:
                for f in futures:
                    wait(f)
                    bar.update()
            elapsed = time.perf_counter() - t0
            rows = len(df)
            arrow_bytes = int(df.memory_usage(deep=True).sum().compute())
            metrics = _wait_metrics(client)
            same = None
            if not args.no_check:
                ours = df.compute()
                ref = dd.read_parquet(path, engine="pyarrow").compute()
                try:
                    pd.testing.assert_frame_equal(ours, ref)
                    same = True
                except AssertionError:
                    same = False
    finally:
        if tmp is not None:
            tmp.cleanup()
    compressed = sum(v for (label, unit), v in metrics.items() if unit == "compressed-bytes")
    uncompressed = sum(v for (label, unit), v in metrics.items() if unit == "bytes")
    print()
    print(f"dataset            {path if args.path else 'sample lineitem (' + args.codec + ')'}")
    print(f"cluster            LocalCluster {args.workers} workers x {args.threads} threads")
    print(f"rows               {rows:,}")
    print(f"pandas bytes       {arrow_bytes / 1e6:,.1f} MB")
    print(f"pages              {compressed / 1e6:,.1f} MB compressed -> {uncompressed / 1e6:,.1f} MB")
    by = {}
    for (label, unit), value in sorted(metrics.items()):
        parts = label.split("-")
        if unit == "pages" and len(parts) == 3:
            by.setdefault(parts[2], {})[parts[1]] = int(value)
        elif unit == "bytes" and len(parts) == 3 and parts[1] == PYARROW_NO_GPU:
            by.setdefault(parts[2], {})[parts[1]] = None  # pyarrow does not count pages
    for codec, backends in by.items():
        print(f"backend            {codec}: " + ", ".join(
            f"{b} ({'pages not counted' if n is None else f'{n} pages'})" for b, n in backends.items()))
    if not by:
        print("backend            (no compressed pages)")
    first = next(iter(routes.values()))
    print("routing            " + ", ".join(f"{k}->{v[0]}" for k, v in first.items()))
    print(f"time               {elapsed:.2f} s")
    print(f"throughput         {arrow_bytes / elapsed / 1e9:.2f} GB/s of pandas data")
    if same is not None:
        print(f"equals pyarrow     {'yes' if same else 'NO'}")
    return 0 if same in (None, True) else 1
