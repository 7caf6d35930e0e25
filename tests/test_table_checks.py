"""The compiled host checks over a job table find exactly the jobs the reference ``check_job`` rejects."""

from __future__ import annotations

import random

import cramjam
import numpy as np
import pytest

from dask_hwdecomp.decompress.table_checks import find_suspects
from dask_hwdecomp.decompress.validate import check_job, zstd_frames
from dask_hwdecomp.errors import CorruptPageError, PageLocation
from dask_hwdecomp.format.codecs import preamble_of
from dask_hwdecomp.jobs import Algo, Job, JobTable

ALL = frozenset(Algo)


def _pages(rng: random.Random, count: int):
    """Compressed pages of every bitstream, as (algo, body, raw size)."""
    out = []
    for _ in range(count):
        raw = bytes(rng.choice(b"abcdefgh") for _ in range(rng.randint(1, 3000)))
        algo = rng.choice([Algo.SNAPPY, Algo.ZSTD, Algo.LZ4, Algo.DEFLATE])
        if algo is Algo.SNAPPY:
            body = bytes(cramjam.snappy.compress_raw(raw))
        elif algo is Algo.ZSTD:
            level = rng.choice([1, 3])
            body = bytes(cramjam.zstd.compress(raw, level=level))
            if rng.random() < 0.3:  # several frames, some skippable
                body += b"\x50\x2a\x4d\x18" + (3).to_bytes(4, "little") + b"xyz"
        elif algo is Algo.LZ4:
            body = bytes(cramjam.lz4.compress_block(raw, store_size=False))
        else:
            body = bytes(cramjam.gzip.compress(raw))[10:-8]
        out.append((algo, body, len(raw)))
    return out


def _mutate(rng: random.Random, body: bytearray) -> None:
    for _ in range(rng.randint(1, 3)):
        if not body:
            return
        k = rng.randrange(min(len(body), 24)) if rng.random() < 0.7 else rng.randrange(len(body))
        body[k] = rng.randrange(256)


def _batch(seed: int, count: int = 200):
    rng = random.Random(seed)
    src = bytearray()
    jobs = []
    dst = 0
    for i, (algo, body, size) in enumerate(_pages(rng, count)):
        body = bytearray(body)
        pre = preamble_of(algo, body) if algo is Algo.SNAPPY else 0
        roll = rng.random()
        if roll < 0.3:
            _mutate(rng, body)
        elif roll < 0.4:
            size += rng.choice([-1, 1, 1000])
        elif roll < 0.45:
            pre += 1
        elif roll < 0.5:
            body = body[: rng.randrange(len(body) + 1)]
        at = len(src)
        src += body
        src_size = len(body) if rng.random() > 0.02 else len(body) + 7  # past the source, now and then
        jobs.append(Job(algo, at, src_size, dst, max(size, 0), 0, PageLocation("f", 0, "c", i), None, pre))
        dst += max(size, 0)
    return jobs, memoryview(bytes(src)), dst


def _rejected(jobs, src, dst_len, limit, algorithms=ALL):
    out = set()
    for k, job in enumerate(jobs):
        try:
            if job.algo not in algorithms:
                raise CorruptPageError("not ours", job.location)
            check_job(job, len(src), dst_len, src, limit)
        except CorruptPageError:
            out.add(k)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_the_table_checks_find_exactly_the_jobs_the_reference_rejects(seed):
    jobs, src, dst_len = _batch(seed)
    limit = 2500 if seed % 3 == 0 else 1 << 30
    algorithms = ALL if seed % 2 else frozenset({Algo.SNAPPY, Algo.ZSTD, Algo.DEFLATE})
    found = find_suspects(JobTable.from_jobs(jobs), src, len(src), dst_len, limit, algorithms)
    want = _rejected(jobs, src, dst_len, limit, algorithms)
    assert want, "the mutations must produce rejected jobs"
    assert set(found.rows.tolist()) == want


def test_zstd_jobs_with_a_stored_content_checksum_are_named():
    raws = [b"hello zstd " * (k + 1) for k in range(6)]
    src = bytearray()
    jobs = []
    dst = 0
    for k, raw in enumerate(raws):
        body = bytes(cramjam.zstd.compress(raw))
        if k % 2:  # set the checksum flag and append four bytes
            body = body[:4] + bytes([body[4] | 0x04]) + body[5:] + b"\0\0\0\0"
        jobs.append(Job(Algo.ZSTD, len(src), len(body), dst, len(raw), 0, None))
        src += body
        dst += len(raw)
    found = find_suspects(JobTable.from_jobs(jobs), memoryview(bytes(src)), len(src), dst, 1 << 30, ALL)
    assert found.rows.tolist() == []
    summed = []
    for k, job in enumerate(jobs):
        frames = []
        zstd_frames(bytes(src[job.src_offset : job.src_offset + job.src_size]), job, frames)
        if any(c is not None for _, c in frames):
            summed.append(k)
    assert found.zstd_summed.tolist() == summed == [1, 3, 5]


def test_a_table_round_trips_its_jobs_and_keeps_their_origin():
    jobs, _, _ = _batch(1, 20)
    table = JobTable.from_jobs(jobs)
    assert table.jobs() == jobs
    part = table.take(np.array([3, 7, 11]))
    assert [part.job(i) for i in range(3)] == [jobs[3], jobs[7], jobs[11]]
    assert part.index.tolist() == [3, 7, 11]
    wire = JobTable.from_bytes(table.to_bytes(), len(table))
    assert wire.job(5).location == PageLocation(page=5)
    assert np.array_equal(wire.rows, table.rows)
