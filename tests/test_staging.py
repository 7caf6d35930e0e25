"""The arena plan of a GPU batch: every copy in and out, replayed on host memory (CI, no GPU)."""

from __future__ import annotations

import numpy as np

from dask_hwdecomp.gpu.staging import MAX_GAP, Copy, Part, place
from dask_hwdecomp.jobs import Algo, Job

from pagegen import make_batch


def _replay(parts, input_align):
    """Run the plan's copies on a host "arena": inputs in, each output written where the plan puts it, outputs out."""
    plan = place(parts, input_align, lambda algo: algo.value)
    arena = np.zeros(plan.nbytes, np.uint8)
    for c in plan.h2d:
        assert isinstance(c, Copy)
        src = np.frombuffer(parts[c.part].src, np.uint8)
        arena[c.arena_offset : c.arena_offset + c.nbytes] = src[c.host_offset : c.host_offset + c.nbytes]
    for k, job in enumerate(plan.jobs):
        s = int(plan.src_dev[k])
        # Every job finds its input where the plan says; its "output" is its input's first bytes, marked.
        part = parts[int(plan.part_of[k])]
        assert bytes(arena[s : s + job.src_size]) == bytes(part.src[job.src_offset : job.src_offset + job.src_size])
        d = int(plan.dst_dev[k])
        arena[d : d + job.dst_size] = (np.arange(job.dst_size) + k) % 251
    for c in plan.d2h:
        dst = np.frombuffer(parts[c.part].dst, np.uint8)
        dst[c.host_offset : c.host_offset + c.nbytes] = arena[c.arena_offset : c.arena_offset + c.nbytes]
    return plan


def test_copies_bring_every_input_in_and_every_output_back_to_its_part():
    parts = []
    for seed in (1, 2):
        jobs, src, dst_len, _ = make_batch((Algo.SNAPPY, Algo.DEFLATE, Algo.LZ4), [3000 + 91 * k for k in range(9)],
                                           seed=seed)
        parts.append(Part(jobs, memoryview(src), memoryview(bytearray(dst_len))))
    plan = _replay(parts, lambda algo: 4 if algo is Algo.DEFLATE else 1)
    for k, job in enumerate(plan.jobs):
        out = bytes(parts[int(plan.part_of[k])].dst[job.dst_offset : job.dst_offset + job.dst_size])
        assert out == bytes(((np.arange(job.dst_size) + k) % 251).astype(np.uint8))
    # Inputs of one part that lie close together share a copy.
    assert len(plan.h2d) < len(plan.jobs)


def test_outputs_far_apart_or_across_a_protected_range_come_back_in_separate_copies():
    src = bytearray(range(256)) * 4
    far = 2 * MAX_GAP
    jobs = [Job(Algo.SNAPPY, 0, 10, 0, 100, 1, None), Job(Algo.SNAPPY, 10, 10, 200, 100, 1, None),
            Job(Algo.SNAPPY, 20, 10, 400, 100, 1, None), Job(Algo.SNAPPY, 30, 10, far, 100, 1, None)]
    dst = bytearray(far + 100)
    before = bytes(dst[300:400])
    parts = [Part(jobs, memoryview(src), memoryview(dst), protect=[(300, 400)])]
    plan = _replay(parts, lambda algo: 1)
    assert [(c.host_offset, c.nbytes) for c in plan.d2h] == [(0, 300), (400, 100), (far, 100)]
    assert bytes(dst[300:400]) == before
    assert [(c.part, c.host_offset, c.nbytes) for c in plan.h2d] == [(0, 0, 40)]


def test_a_launcher_is_asked_only_about_the_bitstreams_of_the_call():
    """nvCOMP's launcher knows alignments for its own bitstreams only (GZIP and BROTLI are the CPU's)."""
    known = {Algo.SNAPPY: 1, Algo.ZSTD: 1}
    jobs = [Job(Algo.ZSTD, 0, 10, 0, 100, 1, None), Job(Algo.SNAPPY, 10, 10, 100, 100, 1, None)]
    plan = place([Part(jobs, memoryview(bytearray(100)), memoryview(bytearray(300)))],
                 lambda algo: known[algo], lambda algo: {Algo.SNAPPY: 0, Algo.ZSTD: 3}[algo])
    assert [job.algo for job in plan.jobs] == [Algo.SNAPPY, Algo.ZSTD]
