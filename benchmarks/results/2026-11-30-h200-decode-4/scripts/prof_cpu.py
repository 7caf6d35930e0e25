"""One 4x4 LocalCluster reading a dataset's snappy files: per read wall, worker-process CPU and GPU-service CPU."""
import json, os, subprocess, sys, time
import dask.dataframe as dd
from distributed import Client, LocalCluster, wait
from dask_hwdecomp import hwdecomp
from dask_hwdecomp.bench.data import generate

TICK = os.sysconf("SC_CLK_TCK")

def cpu_of(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / TICK
    except OSError:
        return 0.0

def service_pid():
    out = subprocess.run([sys.executable, "-m", "dask_hwdecomp", "service", "status", "--json"], capture_output=True, text=True).stdout
    rows = json.loads(out or "[]")
    return rows[0].get("service_pid") if rows else None

if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else "lineitem"
    ds = generate(f"/tmp/bdata/{name}", name, 400 << 20, 16, codecs=("snappy",))
    path = str(ds.dirs["snappy"] / "*.parquet")
    with LocalCluster(n_workers=4, threads_per_worker=4, processes=True, dashboard_address=None) as cl, Client(cl) as c:
        pids = list(c.run(os.getpid).values())
        for engine, decode in (("hw", "auto"), ("hw", "cpu"), ("pyarrow", None)):
            for rep in range(4):
                svc = service_pid()
                w0 = sum(cpu_of(p) for p in pids); s0 = cpu_of(svc) if svc else 0.0; t = time.perf_counter()
                if engine == "hw":
                    df = dd.read_parquet(path, engine=hwdecomp, hwdecomp_options={"decode": decode}).persist()
                else:
                    df = dd.read_parquet(path, engine="pyarrow").persist()
                wait(df); dt = time.perf_counter() - t
                svc2 = service_pid()
                w = sum(cpu_of(p) for p in pids) - w0; s = (cpu_of(svc2) - s0) if svc2 and svc2 == svc else float("nan")
                print(f"{name} {engine} decode={decode} rep {rep}: {dt*1000:.0f} ms = {0.4/dt:.2f} GB/s; worker CPU {w:.2f} s, service CPU {s:.2f} s", flush=True)
                del df
