"""16 concurrent read_table tasks (one file each) on a 4x4 LocalCluster: per task wall and ReadReport stages."""
import os, sys, time
import numpy as np
from distributed import Client, LocalCluster, wait
from dask_hwdecomp.bench.data import generate

def task(path, decode):
    import dask_hwdecomp
    rep = dask_hwdecomp.ReadReport()
    t0 = time.perf_counter(); c0 = time.thread_time()
    dask_hwdecomp.read_table(path, backend="auto", decode=decode, report=rep)
    return time.perf_counter() - t0, time.thread_time() - c0, dict(rep.stages)

if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else "lineitem"
    ds = generate(f"/tmp/bdata/{name}", name, 400 << 20, 16, codecs=("snappy",))
    files = sorted(str(p) for p in ds.dirs["snappy"].glob("*.parquet"))
    with LocalCluster(n_workers=4, threads_per_worker=4, processes=True, dashboard_address=None) as cl, Client(cl) as c:
        for decode in ("gpu", "cpu"):
            for rep in range(4):
                t = time.perf_counter()
                futs = [c.submit(task, f, decode, pure=False) for f in files]
                res = c.gather(futs); dt = time.perf_counter() - t
                if rep == 0:
                    continue
                walls = np.array([r[0] for r in res]) * 1000; cpus = np.array([r[1] for r in res]) * 1000
                stages = {k: round(1000 * np.mean([r[2][k] for r in res]), 1) for k in res[0][2]}
                print(f"{name} decode={decode} rep {rep}: all {dt*1000:.0f} ms; task wall mean {walls.mean():.0f} (min {walls.min():.0f}, max {walls.max():.0f}) ms, thread CPU mean {cpus.mean():.0f} ms; stages mean ms {stages}", flush=True)
