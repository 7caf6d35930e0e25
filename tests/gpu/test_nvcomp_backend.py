"""The nvCOMP backend against the CPU backend on generated pages (GPU machine).

``nvcomp_backend`` is the registry's backend: nvCOMP runs in the node's GPU
service, and the corrupt-page tests show a lost service costs one error.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from dask_hwdecomp.decompress.cpu import CpuBackend
from dask_hwdecomp.errors import CorruptPageError
from dask_hwdecomp.jobs import Algo

from corruption import MODES, corrupt
from pagegen import assert_outputs, make_batch, run_batch, run_concurrently

pytestmark = pytest.mark.gpu

GPU_ALGOS = (Algo.SNAPPY, Algo.DEFLATE, Algo.LZ4, Algo.ZSTD)


def _sizes(n, seed):
    rng = np.random.default_rng(seed)
    pick = rng.choice([1, 3, 17, 100, 1000, 4096, 30_000, 65_536, 100_000, 262_144], size=n)
    return [int(x) for x in pick]


@pytest.mark.parametrize("algo", GPU_ALGOS, ids=lambda a: a.value)
def test_every_algorithm_matches_cpu(nvcomp_backend, algo):
    jobs, src, dst_len, expected = make_batch([algo], _sizes(3000, 1), seed=hash(algo.value) % 1000)
    out = run_batch(nvcomp_backend, jobs, src, dst_len)
    assert_outputs(out, jobs, expected)
    with CpuBackend(4) as cpu:
        ref = bytearray(dst_len)
        cpu.decompress(jobs, memoryview(bytes(src)), memoryview(ref))
    for j in jobs:
        assert out[j.dst_offset : j.dst_offset + j.dst_size] == ref[j.dst_offset : j.dst_offset + j.dst_size]


def test_mixed_algorithms_in_one_call(nvcomp_backend):
    jobs, src, dst_len, expected = make_batch(GPU_ALGOS, _sizes(4000, 2), seed=2)
    assert_outputs(run_batch(nvcomp_backend, jobs, src, dst_len), jobs, expected)


def test_unaligned_deflate_inputs(nvcomp_backend):
    jobs, src, dst_len, expected = make_batch([Algo.DEFLATE], [5000 + i for i in range(64)], seed=3)
    assert {j.src_offset % 4 for j in jobs} == {0, 1, 2, 3}
    assert_outputs(run_batch(nvcomp_backend, jobs, src, dst_len), jobs, expected)


def test_large_pages(nvcomp_backend):
    jobs, src, dst_len, expected = make_batch(GPU_ALGOS, [8 << 20] * 4 + [(4 << 20) + 3] * 4, seed=4)
    assert_outputs(run_batch(nvcomp_backend, jobs, src, dst_len), jobs, expected)


# Measured on the H200 with nvCOMP 6.0.0.12 (scripts/gpu_corrupt_probe.py):
# Deflate and LZ4 report every corruption as a status or a wrong size.
# Snappy (noise or flipped bits after a valid preamble) and Zstd (noise inside
# a valid frame) raise CUDA_ERROR_ILLEGAL_ADDRESS, which kills the context;
# a Zstd page with flipped bits hung the GPU. The backend runs in the GPU
# service: there the service dies or is killed at the deadline, the page is
# found on the CPU and named, and the next batch gets a fresh service.


@pytest.mark.parametrize("algo,mode", [(a, m) for a in GPU_ALGOS for m in MODES],
                         ids=lambda v: getattr(v, "value", v))
def test_context_survives_corrupt_pages(nvcomp_backend, algo, mode):
    rng = np.random.default_rng(7)
    jobs, src, dst_len, expected = make_batch([algo], [60_000] * 50, seed=5)
    broken = jobs[10:40:3]
    for job in broken:
        corrupt(algo, mode, job, src, rng)
    t0 = time.monotonic()
    with pytest.raises(CorruptPageError) as err:
        run_batch(nvcomp_backend, jobs, src, dst_len)
    assert err.value.location == broken[0].location, str(err.value)
    elapsed = time.monotonic() - t0
    assert elapsed < nvcomp_backend.options.gpu_timeout_s + 60, elapsed  # a hang ends at the deadline
    print(f"{algo.value} {mode}: {elapsed:.1f} s, restarts {nvcomp_backend.restarts}: {err.value}")
    # the same process, the same backend: the next batch is fine
    jobs, src, dst_len, expected = make_batch(GPU_ALGOS, _sizes(500, 6), seed=6)
    assert_outputs(run_batch(nvcomp_backend, jobs, src, dst_len), jobs, expected)


def test_concurrent_threads_share_the_batcher(nvcomp_backend):
    work = [make_batch(GPU_ALGOS, _sizes(300, 20 + t), seed=20 + t) for t in range(8)]
    before = nvcomp_backend.stats()
    run_concurrently(nvcomp_backend, work, rounds=3)
    after = nvcomp_backend.stats()
    parts = after["parts"] - before["parts"]
    calls = after["calls"] - before["calls"]
    assert parts == 24
    assert calls < parts, "no call merged two callers' parts"
    print(f"24 parts from 8 threads ran as {calls} GPU calls")
