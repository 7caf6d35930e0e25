"""Where a decode's time goes in the service's decoder under concurrency: wall, thread CPU, launches."""
import os, sys, threading, time, collections
import numpy as np
from dask_hwdecomp.bench.data import generate
from dask_hwdecomp.gpudecode.plan import plan_file
from dask_hwdecomp.gpudecode.hosted import HostedDecoder
from dask_hwdecomp.gpudecode.tables import place_outputs
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
    m = plan.chunks.copy()
    jobs.append((pinned, plan))
hd = HostedDecoder(streams=int(os.environ.get("STREAMS", "4")))
t = time.perf_counter(); hd.warm_up(); print("warm_up", round(time.perf_counter() - t, 2), flush=True)
outs = {}
stat = collections.defaultdict(float)
lock = threading.Lock()
launches = collections.Counter()
launch_cpu = [0.0]
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
def one(k, pinned, plan):
    c0, w0 = time.thread_time(), time.perf_counter()
    p = hd.measure(memoryview(pinned), plan.ranges, plan.chunks, plan.pages, plan.data_bytes)
    c1, w1 = time.thread_time(), time.perf_counter()
    chunks = p.chunks.copy(); n = place_outputs(chunks)
    out = outs.get((k, n))
    if out is None:
        out = outs[(k, n)] = cuda.pinned_array(max(n, 1), np.uint8)
    c2, w2 = time.thread_time(), time.perf_counter()
    hd.write(p, chunks, memoryview(out)[:n]); p.close()
    c3, w3 = time.thread_time(), time.perf_counter()
    with lock:
        stat["measure_cpu"] += c1 - c0; stat["measure_wall"] += w1 - w0
        stat["write_cpu"] += c3 - c2; stat["write_wall"] += w3 - w2; stat["n"] += 1; stat["bytes"] += n
for threads in [int(x) for x in os.environ.get("THREADS", "1,4,16").split(",")]:
    stat.clear(); launches.clear(); launch_cpu[0] = 0.0
    def worker(k):
        for i in range(4):
            pinned, plan = jobs[(k + i) % len(jobs)]
            one(k, pinned, plan)
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    t = time.perf_counter(); [x.start() for x in ts]; [x.join() for x in ts]; dt = time.perf_counter() - t
    n = stat["n"]
    print(f"threads {threads}: {n:.0f} decodes in {dt*1000:.0f} ms = {dt/n*1000:.1f} ms/decode, {stat['bytes']/1e9/dt:.2f} GB/s; per decode:"
          f" measure wall {stat['measure_wall']/n*1000:.1f} cpu {stat['measure_cpu']/n*1000:.1f},"
          f" write wall {stat['write_wall']/n*1000:.1f} cpu {stat['write_cpu']/n*1000:.1f};"
          f" launches {sum(launches.values())/n:.0f}/decode, launch cpu {launch_cpu[0]/n*1000:.2f} ms/decode", flush=True)
print("launch counts (last):", dict(launches.most_common(40)))
