"""The nvCOMP backend against the CPU backend on generated pages (GPU machine)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from dask_hwdecomp.decompress.cpu import CpuBackend
from dask_hwdecomp.errors import CorruptPageError
from dask_hwdecomp.format.codecs import Algo
from pagegen import make_batch

pytestmark = pytest.mark.gpu

GPU_ALGOS = (Algo.SNAPPY, Algo.DEFLATE, Algo.LZ4, Algo.ZSTD)


def _sizes(n, seed):
    rng = np.random.default_rng(seed)
    pick = rng.choice([1, 3, 17, 100, 1000, 4096, 30_000, 65_536, 100_000, 262_144], size=n)
    return [int(x) for x in pick]


def _run(backend, jobs, src, dst_len):
    src_buf = backend.host_buffer(len(src))
    dst_buf = backend.host_buffer(dst_len)
    try:
        src_buf.view[:] = src
        backend.decompress(jobs, src_buf.view, dst_buf.view)
        return bytes(dst_buf.view)
    finally:
        src_buf.close()
        dst_buf.close()


def _check(out, jobs, expected):
    bad = [j.location for j, data in zip(jobs, expected) if out[j.dst_offset : j.dst_offset + j.dst_size] != data]
    assert not bad, f"{len(bad)} wrong pages, first {bad[0]}"


@pytest.mark.parametrize("algo", GPU_ALGOS, ids=lambda a: a.value)
def test_every_algorithm_matches_cpu(nvcomp_backend, algo):
    jobs, src, dst_len, expected = make_batch([algo], _sizes(3000, 1), seed=hash(algo.value) % 1000)
    out = _run(nvcomp_backend, jobs, src, dst_len)
    _check(out, jobs, expected)
    with CpuBackend(4) as cpu:
        ref = bytearray(dst_len)
        cpu.decompress(jobs, memoryview(bytes(src)), memoryview(ref))
    for j in jobs:
        assert out[j.dst_offset : j.dst_offset + j.dst_size] == ref[j.dst_offset : j.dst_offset + j.dst_size]


def test_mixed_algorithms_in_one_call(nvcomp_backend):
    jobs, src, dst_len, expected = make_batch(GPU_ALGOS, _sizes(4000, 2), seed=2)
    _check(_run(nvcomp_backend, jobs, src, dst_len), jobs, expected)


def test_unaligned_deflate_inputs(nvcomp_backend):
    jobs, src, dst_len, expected = make_batch([Algo.DEFLATE], [5000 + i for i in range(64)], seed=3)
    assert {j.src_offset % 4 for j in jobs} == {0, 1, 2, 3}
    _check(_run(nvcomp_backend, jobs, src, dst_len), jobs, expected)


def test_large_pages(nvcomp_backend):
    jobs, src, dst_len, expected = make_batch(GPU_ALGOS, [8 << 20] * 4 + [(4 << 20) + 3] * 4, seed=4)
    _check(_run(nvcomp_backend, jobs, src, dst_len), jobs, expected)


def _garbage(algo, job, src, rng):
    """Overwrite ``job``'s input with garbage that passes the host checks."""
    n = job.src_size
    noise = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
    if algo is Algo.SNAPPY:
        pre = bytearray()
        v = job.dst_size
        while v >= 0x80:
            pre.append(v & 0x7F | 0x80)
            v >>= 7
        pre.append(v)
        body = bytes(pre) + noise[len(pre):]
    elif algo is Algo.ZSTD:
        # magic, FHD (single segment, 4-byte FCS), FCS, one last compressed block
        fcs = job.dst_size.to_bytes(4, "little")
        bsize = min(n - 12, 100_000)
        head = (0xFD2FB528).to_bytes(4, "little") + bytes([0xA0]) + fcs
        bh = (bsize << 3 | 2 << 1 | 1).to_bytes(3, "little")
        body = (head + bh + noise)[: 12 + bsize]
        job.src_size = len(body)
    else:
        body = noise
    src[job.src_offset : job.src_offset + len(body)] = body


@pytest.mark.parametrize("algo", GPU_ALGOS, ids=lambda a: a.value)
def test_context_survives_corrupt_pages(nvcomp_backend, algo):
    rng = np.random.default_rng(7)
    jobs, src, dst_len, expected = make_batch([algo], [60_000] * 50, seed=5)
    broken = jobs[10:40:3]
    for job in broken:
        _garbage(algo, job, src, rng)
    with pytest.raises(CorruptPageError) as err:
        _run(nvcomp_backend, jobs, src, dst_len)
    assert err.value.location == broken[0].location
    # the same process, the same backend: the next batch is fine
    jobs, src, dst_len, expected = make_batch(GPU_ALGOS, _sizes(500, 6), seed=6)
    _check(_run(nvcomp_backend, jobs, src, dst_len), jobs, expected)


def test_concurrent_threads_share_the_batcher(nvcomp_backend):
    work = [make_batch(GPU_ALGOS, _sizes(300, 20 + t), seed=20 + t) for t in range(8)]
    before = nvcomp_backend.stats()
    errors = []
    start = threading.Barrier(8)

    def run(t):
        jobs, src, dst_len, expected = work[t]
        start.wait()
        for _ in range(3):
            try:
                _check(_run(nvcomp_backend, jobs, src, dst_len), jobs, expected)
            except BaseException as exc:  # collected and re-raised in the test thread
                errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    after = nvcomp_backend.stats()
    parts = after["parts"] - before["parts"]
    batches = after["batches"] - before["batches"]
    assert parts == 24
    assert 1 <= batches <= parts
    print(f"24 calls from 8 threads ran as {batches} batches")
