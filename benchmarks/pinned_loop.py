"""Pinned host memory over many GPU-decoded reads: bounded by the readers' pools, not growing read by read.

Usage::

    python benchmarks/pinned_loop.py OUT [--data DIR] [--size 3GB] [--files 32]
        [--dataset lineitem] [--codec snappy] [--cluster 4x4] [--reads 50] [--hold 1]

Reads the bench's table ``--reads`` times on a distributed LocalCluster
with ``decode="auto"``, each read persisted, then released after the next
``--hold`` reads (``--hold 0``: released at once), as a user's loop of
``persist`` and ``del`` does. After each read it asks the node's GPU
services for the host memory they hold registered (pinned) for their
clients' shared segments, and how many registrations they made so far.

The bound is the readers' pools: ``pinned_bytes`` (its default: 4 GiB or 4
``batch_bytes``, at most a quarter of the RAM) per reading process. Prints
a line a read and a verdict; writes ``OUT/pinned_loop.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path


def main(argv=None) -> int:
    from dask_hwdecomp.bench.scale import add_scale_arguments

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_scale_arguments(p)
    p.add_argument("--dataset", default="lineitem")
    p.add_argument("--codec", default="snappy")
    p.add_argument("--cluster", default="4x4")
    p.add_argument("--reads", type=int, default=50)
    p.add_argument("--hold", type=int, default=1, help="reads a result stays persisted after its own")
    args = p.parse_args(argv)

    import dask.dataframe as dd
    import pyarrow.parquet as pq
    from dask.utils import parse_bytes
    from distributed import Client, LocalCluster, wait

    from dask_hwdecomp import hwdecomp
    from dask_hwdecomp.bench.data import generate
    from dask_hwdecomp.decompress.gpu_backend import pinned_cap
    from dask_hwdecomp.options import current_options
    from dask_hwdecomp.service.launch import node_stats
    from dask_hwdecomp.service.rundir import service_dir

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    ds = generate(args.data or out / "data", args.dataset, parse_bytes(args.size), args.files, codecs=[args.codec])
    names = pq.read_schema(next(iter(sorted(Path(ds.dirs[args.codec]).glob("*.parquet"))))).names
    workers, threads = (int(x) for x in args.cluster.split("x"))
    cluster = LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True, memory_limit=0,
                           dashboard_address=None)
    client = Client(cluster)

    bound_per_reader = client.submit(lambda: pinned_cap(current_options()), pure=False).result()
    rows: list[dict] = []
    held: list = []
    try:
        for i in range(args.reads):
            t0 = time.perf_counter()
            # Each read its own keys (the held one's would be reused): the columns rotated, all read.
            k = i % len(names)
            df = dd.read_parquet(str(ds.dirs[args.codec]), engine=hwdecomp, columns=names[k:] + names[:k],
                                 hwdecomp_options={"backend": "auto", "decode": "auto"})
            persisted = client.persist(df)
            wait(persisted)
            seconds = time.perf_counter() - t0
            held.append(persisted)
            del persisted, df
            while len(held) > args.hold:
                held.pop(0)
            client.run(gc.collect)
            stats = node_stats(service_dir(None, create=False))
            pinned = sum(s.get("all_host_pinned_bytes", 0) for s in stats)
            clients = sum(s.get("clients", 0) for s in stats)
            row = {"read": i + 1, "seconds": seconds, "pinned_bytes": pinned, "clients": clients,
                   "registrations": sum(s.get("all_host_registrations", 0) for s in stats),
                   "register_s": sum(s.get("all_host_register_s", 0.0) for s in stats),
                   "bound_bytes": clients * bound_per_reader}
            rows.append(row)
            print(f"read {i + 1}: {seconds:.3f} s, pinned {pinned / 2**30:.2f} GiB of {row['bound_bytes'] / 2**30:.1f} "
                  f"({clients} clients), registrations {row['registrations']} ({row['register_s']:.2f} s)",
                  flush=True)
        held.clear()
        client.run(gc.collect)
    finally:
        client.close()
        cluster.close()
    half = rows[len(rows) // 2]
    verdict = {
        "reads": len(rows), "hold": args.hold, "dataset": args.dataset, "codec": args.codec,
        "arrow_bytes": ds.arrow_bytes, "files": ds.files, "cluster": args.cluster,
        "max_pinned_bytes": max(r["pinned_bytes"] for r in rows), "bound_bytes": max(r["bound_bytes"] for r in rows),
        "within_bound": all(r["pinned_bytes"] <= r["bound_bytes"] for r in rows),
        # steady state: what the second half of the loop registered afresh
        "registrations_second_half": rows[-1]["registrations"] - half["registrations"],
        "register_s_second_half": rows[-1]["register_s"] - half["register_s"],
    }
    (out / "pinned_loop.json").write_text(json.dumps({"verdict": verdict, "reads": rows}, indent=1))
    print("verdict: " + json.dumps(verdict))
    return 0 if verdict["within_bound"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
