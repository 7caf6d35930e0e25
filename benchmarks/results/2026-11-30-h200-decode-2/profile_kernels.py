"""Where GPU decoding time goes: kernels per launch, measure/write, one lineitem file."""
import time, sys, collections
import numpy as np
from dask_hwdecomp.bench.data import generate
from dask_hwdecomp.gpudecode.plan import plan_file
from dask_hwdecomp.gpudecode.cuda_jit import cuda
from dask_hwdecomp.gpudecode import runner, kernels_bytes_measure, kernels_bytes_write, kernels_delta, kernels_fixed, kernels_levels
from dask_hwdecomp.gpudecode.tables import place_outputs
from numba.cuda.dispatcher import CUDADispatcher

ds = generate("/tmp/pdata", "lineitem", 256 << 20, 4, codecs=("snappy",))
path = sorted((ds.dirs["uncompressed"]).glob("*.parquet"))[0]
data = path.read_bytes()
t = time.perf_counter(); plan = plan_file(data); print("plan_file", round(time.perf_counter() - t, 4), "s", len(plan.chunks), "chunks", len(plan.pages), "pages", plan.data_bytes / 1e6, "MB")
print("fallbacks", plan.fallbacks)
host = plan.gather(data)
d = cuda.to_device(host)
times = collections.defaultdict(float)
real = CUDADispatcher.__getitem__
def getitem(self, cfg):
    launch = real(self, cfg)
    def run(*args):
        cuda.synchronize(); t0 = time.perf_counter(); r = launch(*args); cuda.synchronize()
        times[self.py_func.__name__ + str(cfg[:2])] += time.perf_counter() - t0
        return r
    return run
for rep in range(3):
    s = cuda.stream()
    t0 = time.perf_counter()
    m = runner.measure(d, plan.chunks, plan.pages, stream=s)
    t1 = time.perf_counter()
    placed = m.chunks.copy(); n = place_outputs(placed)
    out = cuda.device_array(n, np.uint8, stream=s)
    t2 = time.perf_counter()
    runner.write(m.state, placed, out, stream=s); s.synchronize()
    t3 = time.perf_counter()
    m.state.close()
    print(f"rep {rep}: measure {t1-t0:.4f} s, alloc {t2-t1:.4f}, write {t3-t2:.4f}; out {n/1e6:.1f} MB -> {n/1e9/(t3-t0):.2f} GB/s")
CUDADispatcher.__getitem__ = getitem
m = runner.measure(d, plan.chunks, plan.pages); placed = m.chunks.copy(); n = place_outputs(placed)
runner.write(m.state, placed, cuda.device_array(n, np.uint8)); cuda.synchronize()
for k, v in sorted(times.items(), key=lambda kv: -kv[1]):
    print(f"  {v*1000:9.2f} ms  {k}")
kinds = collections.Counter((int(c["kind"]), int(c["physical"])) for c in plan.chunks)
encs = collections.Counter(int(p["encoding"]) for p in plan.pages)
print("kinds", kinds, "encodings", encs)
