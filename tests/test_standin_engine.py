"""The ``hardware`` backend against a stand-in of the engine contract (no GPU).

Every test here runs the real backend code (params construction, staging,
the batcher, size checks, routing of oversized pages, error paths) with the
driver call replaced by ``standin_engine.StandinEngine``, which implements the
documented contract of ``cuMemBatchDecompressAsync`` on host memory.
"""

from __future__ import annotations


import numpy as np
import pytest

from dask_hwdecomp.decompress.cpu import CpuBackend
from dask_hwdecomp.decompress.hardware import ALGO_BIT, create_with, usable_length
from dask_hwdecomp.decompress.routing import Router
from dask_hwdecomp.errors import CorruptPageError
from dask_hwdecomp.format.codecs import Algo
from dask_hwdecomp.gpu.check import CudaError
from dask_hwdecomp.options import Options
from dask_hwdecomp.report import ReadReport
from pagegen import assert_outputs, make_batch, run_batch, run_concurrently
from standin_engine import StandinEngine

ENGINE_ALGOS = (Algo.SNAPPY, Algo.DEFLATE, Algo.LZ4)
OPTS = Options(streams=2, batch_latency_ms=1.0, batch_bytes=8 << 20)


@pytest.fixture
def engine():
    return StandinEngine(mask=7, max_length=4 << 20)


@pytest.fixture
def backend(engine):
    b = create_with(engine, OPTS)
    yield b
    b.close()


def test_standin_engine_decompresses_every_algorithm(backend, engine):
    sizes = [1, 7, 100, 4096, 65536, 300_000, 1 << 20] * 6
    jobs, src, dst_len, expected = make_batch(ENGINE_ALGOS, sizes, seed=1)
    out = run_batch(backend, jobs, src, dst_len)
    assert_outputs(out, jobs, expected)
    assert backend.algorithms == frozenset(ENGINE_ALGOS)


def test_standin_engine_params_records_follow_the_contract(backend, engine):
    jobs, src, dst_len, expected = make_batch(ENGINE_ALGOS, [5000] * 9, seed=2)
    run_batch(backend, jobs, src, dst_len)
    params = np.concatenate(engine.calls)
    assert params.dtype.itemsize == 64
    assert sorted(params["src_num_bytes"].tolist()) == sorted(j.src_size for j in jobs)
    assert sorted(params["dst_num_bytes"].tolist()) == sorted(j.dst_size for j in jobs)
    assert set(params["algo"].tolist()) == {ALGO_BIT[a] for a in ENGINE_ALGOS}
    for call in engine.calls:  # one u32 result slot per page, distinct
        act = call["dst_act_bytes"]
        assert len(set(act.tolist())) == len(act)
        assert np.all(np.diff(np.sort(act)) == 4)


def test_standin_engine_size_mismatch_names_the_page(backend):
    jobs, src, dst_len, _ = make_batch(ENGINE_ALGOS, [1000, 2000, 3000], seed=3)
    bad = jobs[1]
    bad.dst_size -= 1  # the header declares one byte less than the stream holds
    with pytest.raises(CorruptPageError) as err:
        run_batch(backend, jobs, src, dst_len)
    assert err.value.location == bad.location
    assert "generated.parquet" in str(err.value) and "page 1" in str(err.value)


def test_standin_engine_corrupt_input_is_reported_not_crashed(backend):
    jobs, src, dst_len, expected = make_batch([Algo.LZ4], [4000, 4000], seed=4)
    j = jobs[0]
    src[j.src_offset : j.src_offset + j.src_size] = bytes(range(256)) * (j.src_size // 256) + bytes(j.src_size % 256)
    with pytest.raises(CorruptPageError) as err:
        run_batch(backend, jobs, src, dst_len)
    assert err.value.location == j.location


def test_standin_engine_mask_limits_algorithms():
    b = create_with(StandinEngine(mask=2, max_length=1 << 20), OPTS)
    try:
        assert b.algorithms == frozenset({Algo.SNAPPY})
        assert b.max_job_bytes == usable_length(1 << 20)
        jobs, src, dst_len, _ = make_batch([Algo.DEFLATE], [100])
        with pytest.raises(CorruptPageError):
            run_batch(b, jobs, src, dst_len)
    finally:
        b.close()


def test_standin_engine_raises_not_supported_past_max_length(engine):
    engine.max_length = 1 << 16
    b = create_with(engine, OPTS)
    try:
        b._launcher.max_input_bytes = 1 << 30  # skip the host check: reach the driver
        jobs, src, dst_len, _ = make_batch([Algo.SNAPPY], [1 << 17])
        with pytest.raises(CudaError) as err:
            run_batch(b, jobs, src, dst_len)
        assert err.value.code == 801
    finally:
        b.close()


def test_standin_engine_rejects_unknown_algorithm_bit(engine):
    params = np.zeros(1, dtype=engine.params_dtype)
    params["algo"] = 8
    with pytest.raises(CudaError, match="NOT_SUPPORTED"):
        engine.batch_decompress(params, engine.new_stream())


def _router(options, table):
    # A Router over given backends (the registry only knows the real engine).
    router = Router.__new__(Router)
    router.options = options
    router._candidates = table
    return router


def test_standin_engine_oversized_pages_fall_through_and_protect_outputs():
    small = StandinEngine(mask=7, max_length=64 << 10)
    hw = create_with(small, OPTS)
    other = create_with(StandinEngine(mask=7, max_length=8 << 20), OPTS)
    cpu = CpuBackend(2)
    try:
        table = {a: [hw, other, cpu] for a in ENGINE_ALGOS}
        router = _router(OPTS, table)
        # Small and big pages interleaved: the big ones go to the second
        # gap-writing backend, whose runs must not clobber the first's outputs.
        sizes = [4000, 200_000, 3000, 150_000, 2000, 100] * 5
        jobs, src, dst_len, expected = make_batch(ENGINE_ALGOS, sizes, seed=5)
        dst = bytearray(dst_len)
        report = ReadReport()
        router.run(jobs, memoryview(bytes(src)), memoryview(dst), report)
        assert_outputs(bytes(dst), jobs, expected)
        names = {name for name, _ in report.by_backend}
        assert names == {"hardware"}
        assert max(call["dst_num_bytes"].max() for call in small.calls) <= hw.max_job_bytes
    finally:
        hw.close()
        other.close()
        cpu.close()


def test_standin_engine_batcher_serves_concurrent_callers(backend, engine):
    run_concurrently(backend, [make_batch(ENGINE_ALGOS, [3000 + 17 * t] * 30, seed=10 + t) for t in range(8)])
    stats = backend.stats()
    assert stats["parts"] == 8 and 1 <= stats["batches"] <= 8


def test_standin_engine_pools_do_not_grow(backend, engine):
    jobs, src, dst_len, expected = make_batch(ENGINE_ALGOS, [20_000] * 12, seed=6)
    for _ in range(5):
        run_batch(backend, jobs, src, dst_len)
    before = backend.stats()
    device_before = engine.device_allocations
    for _ in range(200):
        run_batch(backend, jobs, src, dst_len)
    after = backend.stats()
    assert after["pinned_allocations"] == before["pinned_allocations"]
    assert after["pinned_held_bytes"] == before["pinned_held_bytes"]
    assert engine.device_allocations == device_before
