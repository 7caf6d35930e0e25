"""Generated decompression batches: pages of every bitstream, real codecs.

Shared by the stand-in engine tests (CI) and the GPU tests: a batch is a
source buffer holding compressed pages separated by filler (like page
headers), the jobs, and the expected output of each job.
"""

from __future__ import annotations

import cramjam
import numpy as np

from dask_hwdecomp.errors import PageLocation
from dask_hwdecomp.format.codecs import preamble_of
from dask_hwdecomp.jobs import Algo, Job

__all__ = ["compress", "payload", "make_batch"]

_CODEC = {Algo.SNAPPY: 1, Algo.DEFLATE: 2, Algo.LZ4: 7, Algo.ZSTD: 6}


def compress(algo: Algo, data: bytes) -> bytes:
    """``data`` as one bitstream of ``algo``."""
    if algo is Algo.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if algo is Algo.DEFLATE:
        return bytes(cramjam.deflate.compress(data))
    if algo is Algo.LZ4:
        return bytes(cramjam.lz4.compress_block(data, store_size=False))
    if algo is Algo.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(algo)


def payload(n: int, rng: np.random.Generator) -> bytes:
    """``n`` bytes that compress about 2-4x (small integers, some runs)."""
    vals = rng.integers(0, 40, size=(n + 3) // 4, dtype=np.int32)
    vals[:: 7] = 0
    return vals.tobytes()[:n]


def make_batch(algos, sizes, seed: int = 0, file: str = "generated.parquet"):
    """A batch of one page per (algo, size) pair, cycling through ``algos``.

    Returns
    -------
    jobs : list of Job
    src : bytearray
    dst_len : int
    expected : list of bytes
        Output of each job, in ``jobs`` order.
    """
    rng = np.random.default_rng(seed)
    src = bytearray()
    jobs, expected = [], []
    dpos = 0
    for k, size in enumerate(sizes):
        algo = algos[k % len(algos)]
        data = payload(size, rng)
        body = compress(algo, data)
        src += bytes(int(rng.integers(1, 40)))  # a "page header": leaves inputs unaligned
        dpos += int(rng.integers(1, 40))
        loc = PageLocation(file, k // 100, f"col{k % 100}", k)
        jobs.append(Job(algo, len(src), len(body), dpos, size, _CODEC[algo], loc, preamble=preamble_of(algo, body)))
        expected.append(data)
        src += body
        dpos += size
    return jobs, src, dpos + 16, expected


def make_part(seed: int):
    """A batcher's part of two Snappy pages (1,000 and 2,000 bytes) over buffers of its own."""
    from dask_hwdecomp.gpu.staging import Part

    jobs, src, dst_len, _ = make_batch((Algo.SNAPPY,), [1000, 2000], seed=seed)
    return Part(jobs, memoryview(src), memoryview(bytearray(dst_len)))


def run_batch(backend, jobs, src, dst_len) -> bytes:
    """Decompress one generated batch through ``backend``'s own host buffers."""
    with backend.host_buffer(len(src)) as s, backend.host_buffer(dst_len) as d:
        s.view[:] = src
        backend.decompress(jobs, s.view, d.view)
        return bytes(d.view)


def assert_outputs(out, jobs, expected) -> None:
    """Every job's output equals what was compressed."""
    bad = [j.location for j, data in zip(jobs, expected) if out[j.dst_offset : j.dst_offset + j.dst_size] != data]
    assert not bad, f"{len(bad)} wrong pages, first {bad[0]}"


def run_concurrently(backend, batches, rounds: int = 1) -> None:
    """Run each batch from its own thread (started together), ``rounds`` times; check outputs."""
    import threading

    errors = []
    start = threading.Barrier(len(batches))

    def work(batch):
        jobs, src, dst_len, expected = batch
        start.wait()
        for _ in range(rounds):
            try:
                assert_outputs(run_batch(backend, jobs, src, dst_len), jobs, expected)
            except BaseException as exc:  # re-raised in the test's thread
                errors.append(exc)

    threads = [threading.Thread(target=work, args=(b,)) for b in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
