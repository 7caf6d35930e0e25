"""Kernel time of one merged decode of 16 files (what the service runs when every task of a read arrives at once)."""
import time, collections, sys
import numpy as np
from dask_hwdecomp.bench.data import generate
from dask_hwdecomp.gpudecode.plan import plan_file
from dask_hwdecomp.gpudecode.cuda_jit import cuda
from dask_hwdecomp.gpudecode import runner
from dask_hwdecomp.gpudecode.merge import PlanRecords, merge_plans, place_members
from numba.cuda.dispatcher import CUDADispatcher

for name in sys.argv[1:] or ["lineitem", "entropy"]:
    ds = generate(f"/tmp/pm_{name}", name, 400 << 20, 16, codecs=("snappy",))
    paths = sorted(ds.dirs["uncompressed"].glob("*.parquet"))
    plans, hosts = [], []
    for p in paths:
        data = p.read_bytes(); plan = plan_file(data)
        plans.append(PlanRecords(plan.ranges, plan.chunks, plan.pages, plan.data_bytes)); hosts.append(plan.gather(data))
    merged = merge_plans(plans)
    host = np.zeros(merged.data_bytes, np.uint8)
    for h, b in zip(hosts, merged.data_base.tolist()):
        host[b : b + len(h)] = h
    d = cuda.to_device(host)
    s = cuda.stream()
    for rep in range(4):
        t0 = time.perf_counter()
        m = runner.measure(d, merged.chunks, merged.pages, stream=s)
        placed = m.chunks.copy(); base = place_members(merged, placed)
        out = cuda.device_array(int(base[-1]), np.uint8, stream=s)
        runner.write(m.state, placed, out, stream=s); s.synchronize()
        dt = time.perf_counter() - t0
        m.state.close()
        print(f"{name}: {len(plans)} files merged, {len(merged.pages)} pages, in {merged.data_bytes/1e6:.0f} MB, out {base[-1]/1e6:.0f} MB: measure+place+write {dt*1000:.1f} ms = {base[-1]/1e9/dt:.1f} GB/s", flush=True)
    times = collections.defaultdict(float)
    real = CUDADispatcher.__getitem__
    def getitem(self, cfg):
        launch = real(self, cfg)
        def run(*args):
            cuda.synchronize(); t0 = time.perf_counter(); r = launch(*args); cuda.synchronize()
            times[self.py_func.__name__] += time.perf_counter() - t0
            return r
        return run
    CUDADispatcher.__getitem__ = getitem
    m = runner.measure(d, merged.chunks, merged.pages); placed = m.chunks.copy(); base = place_members(merged, placed)
    runner.write(m.state, placed, cuda.device_array(int(base[-1]), np.uint8)); cuda.synchronize(); m.state.close()
    CUDADispatcher.__getitem__ = real
    for k, v in sorted(times.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {v*1000:9.2f} ms  {k}")
    sizes = np.sort(merged.pages["size"])[::-1][:5]
    print("  largest pages (bytes):", sizes.tolist(), flush=True)
