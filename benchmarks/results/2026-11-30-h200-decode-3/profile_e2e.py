"""One 4x4 LocalCluster reading a dataset's snappy files with decode='auto' then 'cpu': each read's wall, and the GPU service's counters and seconds it took (deltas of `hwdecomp service status`)."""
import json, os, subprocess, sys, time
import dask
import dask.dataframe as dd
from distributed import Client, LocalCluster, wait
from dask_hwdecomp import hwdecomp
from dask_hwdecomp.bench.data import generate

def status():
    out = subprocess.run([sys.executable, "-m", "dask_hwdecomp", "service", "status", "--json"], capture_output=True, text=True).stdout
    rows = json.loads(out or "[]")
    return rows[0] if rows else {}

if __name__ == "__main__":
    name = sys.argv[1] if len(sys.argv) > 1 else "lineitem"
    ds = generate(f"/tmp/bdata/{name}", name, 400 << 20, 16, codecs=("snappy",))
    path = str(ds.dirs["snappy"] / "*.parquet")
    with LocalCluster(n_workers=4, threads_per_worker=4, processes=True, dashboard_address=None) as cl, Client(cl) as c:
        for decode in ("auto", "cpu"):
            for rep in range(4):
                flag = os.environ.get("SAMPLE_FLAG")
                if flag and decode == "auto" and rep >= 1:
                    open(flag, "w").close()
                s0 = status(); t = time.perf_counter()
                df = dd.read_parquet(path, engine=hwdecomp, hwdecomp_options={"decode": decode}).persist()
                wait(df); dt = time.perf_counter() - t
                if flag and os.path.exists(flag):
                    os.remove(flag)
                s1 = status()
                d = {k: round(s1.get(k, 0) - s0.get(k, 0), 4) for k in ("decodes", "decode_runs", "decode_queue_s", "decode_run_s", "decode_copy_s", "all_host_registrations", "all_host_register_s", "gpu_calls") if isinstance(s1.get(k, 0), (int, float))}
                print(f"{name} decode={decode} rep {rep}: {dt*1000:.0f} ms = {0.4/dt:.2f} GB/s; service: {d}", flush=True)
                del df
