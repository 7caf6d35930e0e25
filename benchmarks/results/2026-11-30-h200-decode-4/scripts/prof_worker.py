"""One process reading the 16 lineitem snappy files one at a time, as one worker thread does a task:
wall and CPU per file and per stage for decode gpu / cpu and pyarrow, and a cProfile of the GPU-decoded read."""
import cProfile, io, pstats, sys, time, warnings
import pyarrow.parquet as pq
import dask_hwdecomp
from dask_hwdecomp.bench.data import generate
from dask.dataframe.io.parquet.arrow import ArrowDatasetEngine

def to_pandas(t):
    return ArrowDatasetEngine._arrow_table_to_pandas(t, None)

name = sys.argv[1] if len(sys.argv) > 1 else "lineitem"
ds = generate(f"/tmp/bdata/{name}", name, 400 << 20, 16, codecs=("snappy",))
files = sorted((ds.dirs["snappy"]).glob("*.parquet"))
warnings.simplefilter("ignore")

def run(kind, profile=False):
    rep = dask_hwdecomp.ReadReport()
    w0, c0 = time.perf_counter(), time.process_time()
    pr = cProfile.Profile() if profile else None
    if pr: pr.enable()
    read_s = conv_s = 0.0
    for f in files:
        t0 = time.perf_counter()
        if kind == "pyarrow":
            t = pq.read_table(f)
        else:
            t = dask_hwdecomp.read_table(str(f), backend="auto", decode=kind, report=rep)
        t1 = time.perf_counter()
        df = to_pandas(t)
        read_s += t1 - t0; conv_s += time.perf_counter() - t1
        del t, df
    if pr: pr.disable()
    w, c = time.perf_counter() - w0, time.process_time() - c0
    print(f"{name} {kind}: wall {w*1000:.0f} ms, CPU {c*1000:.0f} ms for 16 files; read {read_s*1000:.0f} ms, to_pandas {conv_s*1000:.0f} ms; stages {({k: round(v*1000) for k, v in rep.stages.items()})}", flush=True)
    if pr:
        s = io.StringIO(); st = pstats.Stats(pr, stream=s); st.sort_stats("tottime").print_stats(35); print(s.getvalue()[:9000])
        s = io.StringIO(); st = pstats.Stats(pr, stream=s); st.sort_stats("cumulative").print_stats(45); print(s.getvalue()[:11000])

for kind in ("gpu", "cpu", "pyarrow"):
    run(kind)  # warm
for rep in range(2):
    for kind in ("gpu", "cpu", "pyarrow"):
        run(kind)
run("gpu", profile=True)
