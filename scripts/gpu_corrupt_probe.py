"""Which corruptions of which bitstream nvCOMP survives (each case in its own process)."""

from __future__ import annotations

import subprocess
import sys

CASE = r'''
import sys, numpy as np
sys.path.insert(0, "tests")
from pagegen import make_batch
from corruption import corrupt
from dask_hwdecomp.routing import registry
from dask_hwdecomp.jobs import Algo
from dask_hwdecomp.options import Options
algo, mode = Algo(sys.argv[1]), sys.argv[2]
b = registry.get_backend("nvcomp", Options(streams=1))
jobs, src, dst_len, expected = make_batch([algo], [60_000] * 50, seed=5)
rng = np.random.default_rng(7)
for job in jobs[10:40:3]:
    corrupt(algo, mode, job, src, rng)
def run(jobs, src, dst_len):
    s, d = b.host_buffer(len(src)), b.host_buffer(dst_len)
    s.view[:] = src
    try:
        b.decompress(jobs, s.view, d.view)
    finally:
        s.close(); d.close()
try:
    run(jobs, src, dst_len); first = "no error"
except Exception as e:
    first = type(e).__name__ + ": " + str(e)[:150]
jobs, src, dst_len, expected = make_batch([algo], [5000] * 20, seed=6)
try:
    run(jobs, src, dst_len); second = "next batch OK"
except Exception as e:
    second = "next batch FAILED " + type(e).__name__ + ": " + str(e)[:120]
print(first, "|", second)
'''

for algo in ("snappy", "deflate", "lz4", "zstd"):
    for mode in ("noise", "bitflip", "truncate"):
        r = subprocess.run([sys.executable, "-c", CASE, algo, mode], capture_output=True, text=True, timeout=120)
        out = (r.stdout.strip() or r.stderr.strip().splitlines()[-1:] or ["?"])
        print(f"{algo:8} {mode:9} rc={r.returncode} {out if isinstance(out, str) else out[0]}", flush=True)
