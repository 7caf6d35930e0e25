"""Where a merged decode run's wall time goes: 16 client threads on the HostedDecoder, each phase timed (wall and thread CPU)."""
import collections, os, threading, time, sys
import numpy as np
from dask_hwdecomp.bench.data import generate
from dask_hwdecomp.gpudecode.plan import plan_file
from dask_hwdecomp.gpudecode import hosted, runner
from dask_hwdecomp.gpudecode.hosted import HostedDecoder, DecodeRequest
from dask_hwdecomp.gpudecode.merge import PlanRecords
from dask_hwdecomp.gpu.device import Device

name = sys.argv[1] if len(sys.argv) > 1 else "lineitem"
if os.environ.get("SWITCH"):
    sys.setswitchinterval(float(os.environ["SWITCH"]))
ds = generate(f"/tmp/pdata-{name}", name, 400 << 20, 16, codecs=("snappy",))
files = sorted(ds.dirs["uncompressed"].glob("*.parquet"))
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
hd.warm_up()
lock = threading.Lock()
wall = collections.defaultdict(float); cpu = collections.defaultdict(float); calls = collections.Counter()

def timed(label, fn):
    def run(*a, **k):
        w0, c0 = time.perf_counter(), time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            with lock:
                wall[label] += time.perf_counter() - w0; cpu[label] += time.thread_time() - c0; calls[label] += 1
    return run

hosted.merge_plans = timed("merge_plans", hosted.merge_plans)
hosted.place_members = timed("place_members", hosted.place_members)
runner.measure = timed("runner.measure", runner.measure)
runner.write = timed("runner.write", runner.write)
if hasattr(HostedDecoder, "_upload"):
    HostedDecoder._upload = timed("upload", HostedDecoder._upload)
HostedDecoder._measure_and_write = timed("measure_and_write", HostedDecoder._measure_and_write)
HostedDecoder._run = timed("run", HostedDecoder._run)
real_get = CUDADispatcher.__getitem__
def getitem(self, cfg):
    launch = real_get(self, cfg)
    return timed("kernel launches", launch)
CUDADispatcher.__getitem__ = getitem
from numba.cuda.cudadrv import devicearray
devicearray.DeviceNDArray.copy_to_host = timed("copy_to_host", devicearray.DeviceNDArray.copy_to_host)
devicearray.DeviceNDArray.copy_to_device = timed("copy_to_device", devicearray.DeviceNDArray.copy_to_device)
cuda.to_device = timed("to_device", cuda.to_device)
runner.cuda.to_device = cuda.to_device

def client(k, out):
    for i in range(4):
        pinned, plan = jobs[(k + i) % len(jobs)]
        p = hd.decode(DecodeRequest(memoryview(pinned), PlanRecords(plan.ranges, plan.chunks, plan.pages, plan.data_bytes)))
        buf = out.get(p.nbytes)
        if buf is None:
            buf = out[p.nbytes] = cuda.pinned_array(max(p.nbytes, 1), np.uint8)
        p.copy_to(memoryview(buf)[: p.nbytes]); p.close()

from dask_hwdecomp.gpudecode import device_pool
device_pool.PooledDeviceMemory._attempt_allocation = timed("cuMemAlloc", device_pool.PooledDeviceMemory._attempt_allocation)
from numba.cuda.cudadrv import driver as _drv
_real_free = device_pool.driver.cuMemFree
outs = [dict() for _ in range(16)]  # each client's pinned outputs, allocated in the first pass and reused
for passno in range(3):
    wall.clear(); cpu.clear(); calls.clear()
    s0 = hd.stats()
    ts = [threading.Thread(target=client, args=(k, outs[k])) for k in range(int(os.environ.get("CLIENTS", "16")))]
    t = time.perf_counter(); [x.start() for x in ts]; [x.join() for x in ts]; dt = time.perf_counter() - t
    s1 = hd.stats(); runs = s1["decode_runs"] - s0["decode_runs"]; n = s1["decodes"] - s0["decodes"]
    print(f"{name} pass {passno}: {n} decodes in {dt*1000:.0f} ms, {runs} runs ({n/max(runs,1):.1f} plans a run); queue {1000*(s1['decode_queue_s']-s0['decode_queue_s'])/n:.1f} ms a decode, run {1000*(s1['decode_run_s']-s0['decode_run_s'])/runs:.1f} ms a run", flush=True)
    for label in sorted(wall, key=lambda l: -wall[l]):
        print(f"   {label:20s} calls/run {calls[label]/runs:6.1f}  wall/run {1000*wall[label]/runs:7.2f} ms  thread CPU/run {1000*cpu[label]/runs:7.2f} ms", flush=True)
hd.close()
