"""The service's decoder (merging runners) under concurrent clients: decodes/s, CPU a decode, merged runs, launches."""
import os, threading, time, collections
import numpy as np
from dask_hwdecomp.bench.data import generate
from dask_hwdecomp.gpudecode.plan import plan_file
from dask_hwdecomp.gpudecode.hosted import HostedDecoder, DecodeRequest
from dask_hwdecomp.gpudecode.merge import PlanRecords
from dask_hwdecomp.gpu.device import Device

ds = generate("/tmp/pdata", "lineitem", 400 << 20, 16, codecs=("snappy",))
files = sorted(ds.dirs["uncompressed"].glob("*.parquet"))[:8]
dev = Device(0); dev.activate()
from numba import cuda
from numba.cuda.dispatcher import CUDADispatcher
jobs = []
for f in files:
    raw = np.frombuffer(f.read_bytes(), np.uint8)
    pinned = cuda.pinned_array(raw.shape, np.uint8); pinned[:] = raw
    plan = plan_file(pinned)
    jobs.append((pinned, plan))
hd = HostedDecoder(runners=int(os.environ.get("RUNNERS", "2")))
t = time.perf_counter(); hd.warm_up(); print("warm_up", round(time.perf_counter() - t, 2), flush=True)
lock = threading.Lock()
launches = collections.Counter(); launch_cpu = [0.0]
real = CUDADispatcher.__getitem__
def getitem(self, cfg):
    launch = real(self, cfg)
    def run(*args):
        t0 = time.thread_time(); r = launch(*args); dt = time.thread_time() - t0
        with lock:
            launches[self.py_func.__name__] += 1; launch_cpu[0] += dt
        return r
    return run
CUDADispatcher.__getitem__ = getitem
outs = {}
stat = collections.defaultdict(float)
def one(k, pinned, plan):
    w0 = time.perf_counter()
    p = hd.decode(DecodeRequest(memoryview(pinned), PlanRecords(plan.ranges, plan.chunks, plan.pages, plan.data_bytes)))
    w1 = time.perf_counter()
    out = outs.get((k, p.nbytes))
    if out is None:
        out = outs[(k, p.nbytes)] = cuda.pinned_array(max(p.nbytes, 1), np.uint8)
    w2 = time.perf_counter()
    p.copy_to(memoryview(out)[: p.nbytes]); p.close()
    w3 = time.perf_counter()
    with lock:
        stat["decode_wall"] += w1 - w0; stat["copy_wall"] += w3 - w2; stat["n"] += 1; stat["bytes"] += p.nbytes
proc = lambda: time.process_time()
for threads in [int(x) for x in os.environ.get("THREADS", "1,4,16").split(",")]:
    # a first pass allocates each client's pinned outputs
    for passno in (0, 1):
        stat.clear(); launches.clear(); launch_cpu[0] = 0.0
        s0 = hd.stats()
        def worker(k):
            for i in range(4):
                pinned, plan = jobs[(k + i) % len(jobs)]
                one(k, pinned, plan)
        ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
        c0 = proc(); t = time.perf_counter(); [x.start() for x in ts]; [x.join() for x in ts]; dt = time.perf_counter() - t; cpu = proc() - c0
    s1 = hd.stats()
    n = stat["n"]; runs = s1["decode_runs"] - s0["decode_runs"]
    print(f"threads {threads}: {n:.0f} decodes in {dt*1000:.0f} ms = {n/dt:.1f} decodes/s, {stat['bytes']/1e9/dt:.2f} GB/s of Arrow;"
          f" {runs} merged runs ({n/max(runs,1):.1f} a run); process CPU {cpu/n*1000:.1f} ms/decode;"
          f" decode wall {stat['decode_wall']/n*1000:.1f} ms, copy wall {stat['copy_wall']/n*1000:.1f} ms;"
          f" launches {sum(launches.values())/n:.1f}/decode, launch cpu {launch_cpu[0]/n*1000:.2f} ms/decode", flush=True)
hd.close()
