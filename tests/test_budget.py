"""The one ``batch_bytes`` rule, and the three places that cut work by it (CI, no GPU).

A partition's pieces are cut into batches, a GPU backend cuts a batch's
jobs into parts, and its batcher merges parts into one call: all by
:func:`dask_hwdecomp.budget.split_by_budget`'s rule.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem
from hypothesis import given
from hypothesis import strategies as st

from dask_hwdecomp.budget import split_by_budget, take_within_budget
from dask_hwdecomp.decompress.hardware import create_with
from dask_hwdecomp.jobs import Algo
from dask_hwdecomp.options import Options
from dask_hwdecomp.readpath.batch import iter_batches
from dask_hwdecomp.readpath.plan import Piece, plan_piece
from dask_hwdecomp.report import ReadReport
from dask_hwdecomp.routing.router import Router

from pagegen import assert_outputs, make_batch, run_batch, run_concurrently
from standin_hwengine import StandinHwEngine, hold_first_call

ENGINE_ALGOS = (Algo.SNAPPY, Algo.DEFLATE, Algo.LZ4)


@given(st.lists(st.integers(0, 100)), st.integers(0, 150))
def test_split_keeps_order_and_fills_each_group_greedily(sizes, budget):
    groups = split_by_budget(list(enumerate(sizes)), lambda item: item[1], budget)
    assert [item for g in groups for item in g] == list(enumerate(sizes))
    for g in groups:
        assert g and (len(g) == 1 or sum(s for _, s in g) <= budget)
    for g, after in zip(groups, groups[1:]):  # a group ends only where the next item does not fit
        assert sum(s for _, s in g) + after[0][1] > budget
    assert take_within_budget(sizes, budget) == (len(groups[0]) if groups else 0)


def test_split_examples():
    assert split_by_budget([], len, 10) == []
    assert split_by_budget([5, 5, 5], int, 10) == [[5, 5], [5]]
    assert split_by_budget([20, 1, 0, 9, 1], int, 10) == [[20], [1, 0, 9], [1]]  # too big: a group alone
    assert split_by_budget([0, 20], int, 10) == [[0], [20]]  # a group holds one item past the budget, no more


def test_pieces_go_in_batches_within_batch_bytes(tmp_path):
    fs = LocalFileSystem()
    table = pa.table({"x": list(range(5000)), "s": [f"v{i % 97}" for i in range(5000)]})
    paths = []
    for k in range(4):
        paths.append(str(tmp_path / f"part.{k}.parquet"))
        pq.write_table(table, paths[-1], compression="snappy")
    plans = [plan_piece(fs, Piece(p), None) for p in paths]
    size = plans[0].estimated_bytes
    assert all(p.estimated_bytes == size for p in plans)
    options = Options(backend="cpu", batch_bytes=size * 5 // 2)  # two files a batch
    report = ReadReport()
    seen = []
    for batch in iter_batches(fs, plans, Router(options), options, report):
        with batch:
            seen.append([image.plan.piece.path for image in batch.images])
            for image in batch.images:
                assert pq.read_table(pa.BufferReader(image.buffer)).equals(pq.read_table(image.plan.piece.path))
    assert seen == [paths[:2], paths[2:]]
    assert report.batches == 2 and report.files == 4


def test_gpu_parts_and_calls_stay_within_batch_bytes():
    # One caller's 12 pages of 3000 bytes, a 10000-byte budget: parts of 3
    # pages, and no two parts fit in one call.
    engine = StandinHwEngine(mask=7, max_length=4 << 20)
    backend = create_with(engine, Options(streams=1, batch_latency_ms=1.0, batch_bytes=10_000))
    try:
        jobs, src, dst_len, expected = make_batch(ENGINE_ALGOS, [3000] * 12, seed=3)
        assert_outputs(run_batch(backend, jobs, src, dst_len), jobs, expected)
        stats = backend.stats()
    finally:
        backend.close()
    assert stats["parts"] == 4
    assert [len(call) for call in engine.calls] == [3, 3, 3, 3]


def test_batcher_merges_waiting_parts_up_to_batch_bytes():
    # 8 callers, one part of 30 pages of 3000 bytes each; a budget of 3
    # parts. The first call takes what is queued when it starts (held until
    # every other part is queued); the rest go 3 parts a call.
    engine = StandinHwEngine(mask=7, max_length=4 << 20)
    backend = create_with(engine, Options(streams=1, batch_latency_ms=1.0, batch_bytes=3 * 30 * 3000))
    try:
        hold_first_call(engine, backend, callers=8, pages_per_caller=30)
        run_concurrently(backend, [make_batch(ENGINE_ALGOS, [3000] * 30, seed=40 + t) for t in range(8)])
    finally:
        backend.close()
    parts_per_call = [len(call) // 30 for call in engine.calls]
    first, rest = parts_per_call[0], 8 - parts_per_call[0]
    assert 1 <= first <= 3
    assert parts_per_call[1:] == [3] * (rest // 3) + ([rest % 3] if rest % 3 else [])
