"""Several reads' decode plans decoded as one batch: each gets exactly what it would alone.

The records' arithmetic runs on numpy; the merged decodes run the real
kernels (numba's CUDA simulator without a GPU).
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dask_hwdecomp.gpudecode.assemble import assemble
from dask_hwdecomp.gpudecode.checks import check_plan
from dask_hwdecomp.gpudecode.hosted import DecodeRequest, HostedDecoder
from dask_hwdecomp.gpudecode.merge import DATA_ALIGN, PlanRecords, merge_plans, place_members
from dask_hwdecomp.gpudecode.plan import plan_file
from dask_hwdecomp.gpudecode.tables import place_outputs

from helpers import uploaded_in_file


def _file(seed: int, n: int, row_groups: int = 1, **kw) -> bytes:
    rng = np.random.default_rng(seed)
    table = pa.table({
        "i64": pa.array(rng.integers(-50, 50, n), mask=rng.random(n) < 0.2),
        "s": pa.array([f"s{seed}-{i % (3 + seed)}" for i in range(n)]),
        "b": pa.array(rng.random(n) < 0.5, mask=rng.random(n) < 0.1),
    })
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="none", data_page_size=512, row_group_size=-(-n // row_groups), **kw)
    return sink.getvalue()


def _records(data: bytes) -> PlanRecords:
    plan = plan_file(data)
    return PlanRecords(plan.ranges, plan.chunks, plan.pages, plan.data_bytes)


def _files() -> list[bytes]:
    # Strings are slow in the simulator: one file of two row groups, the others of one.
    return [_file(1, 40), _file(2, 7, row_groups=2, use_dictionary=False, data_page_version="2.0"), _file(3, 70)]


def test_merged_records_pass_the_checks_and_stay_in_their_members_spaces():
    plans = [_records(d) for d in _files()]
    merged = merge_plans(plans)
    data_base = merged.data_base.tolist()
    assert data_base[0] == 0 and all(b % DATA_ALIGN == 0 for b in data_base)
    ranges = np.concatenate([p.ranges + [0, 0, b] for p, b in zip(plans, data_base)])
    check_plan(ranges, merged.chunks, merged.pages, merged.data_bytes, 1 << 40)
    rows = entries = 0
    for i, p in enumerate(plans):
        chunks = merged.member_chunks(i, merged.chunks)
        pages = merged.member_pages(i, merged.pages)
        assert (chunks["row_base"] - rows == p.chunks["row_base"]).all()
        assert (chunks["dict_base"] - entries == p.chunks["dict_base"]).all()
        assert (pages["offset"] - data_base[i] == p.pages["offset"]).all()
        assert (pages["chunk"] - merged.chunk_base[i] == p.pages["chunk"]).all()
        assert (chunks["first_page"] - merged.page_base[i] == p.chunks["first_page"]).all()
        assert (pages["offset"] + pages["size"] <= data_base[i] + p.data_bytes).all()
        rows += int(p.chunks["num_rows"].sum())
        has_dict = p.chunks["dict_page"] >= 0
        entries += int(p.pages["num_values"][p.chunks["dict_page"][has_dict]].sum())
    assert entries > 0  # the dictionary-entry space was shifted


def test_each_member_is_placed_as_it_would_be_alone():
    plans = [_records(d) for d in _files()]
    merged = merge_plans(plans)
    measured = merged.chunks.copy()
    measured["data_bytes"] = np.arange(len(measured)) * 13
    measured["null_count"] = 1
    base = place_members(merged, measured)
    for i in range(len(plans)):
        alone = merged.member_chunks(i, measured)
        size = place_outputs(alone)
        mine = merged.member_chunks(i, measured)
        assert base[i + 1] - base[i] == size and base[i] % 64 == 0
        for name in ("out_valid", "out_values", "out_data"):
            want = np.where(alone[name] >= 0, alone[name] + base[i], -1)
            assert (mine[name] == want).all(), name


def _columns(pending, plan_data: bytes):
    out = np.empty(pending.nbytes, np.uint8)
    pending.copy_to(memoryview(out))
    plan = plan_file(plan_data)
    return assemble(out, out, pending.chunks, plan)[0]


@pytest.fixture(scope="module")
def decoder():
    d = HostedDecoder(runners=1, copy_streams=1)
    yield d
    d.close()


def test_plans_decoded_together_each_equal_pyarrow(decoder):
    files = _files()
    requests = [DecodeRequest(memoryview(d), _records(d)) for d in files]
    results = decoder.decode_together(requests, decoder._cuda.stream())
    try:
        for data, pending in zip(files, results):
            assert not pending.failed
            got = _columns(pending, data)
            want = pq.read_table(io.BytesIO(data))
            for name in want.column_names:
                assert got[name].equals(want.column(name)), name
    finally:
        for p in results:
            p.close()
    # One output for all: freed with the last member.
    assert results[0].output is None and decoder.stats()["decode_runs"] >= 1


def test_a_corrupt_member_fails_alone_and_the_others_decode(decoder):
    files = [_files()[i] for i in (1, 0, 2)]
    bad = bytearray(files[1])
    plan = plan_file(bytes(bad))
    # A dictionary-encoded chunk's first data page: its bit width byte set to 200.
    chunk = int(np.flatnonzero(plan.chunks["dict_page"] >= 0)[0])
    page = int(plan.chunks["first_page"][chunk])
    at = uploaded_in_file(plan, int(plan.pages["offset"][page]))
    if plan.chunks["max_def"][chunk]:
        at += 4 + int.from_bytes(bad[at : at + 4], "little")
    bad[at] = 200
    files[1] = bytes(bad)
    requests = [DecodeRequest(memoryview(d), _records(d)) for d in files]
    results = decoder.decode_together(requests, decoder._cuda.stream())
    try:
        assert [p.failed for p in results] == [False, True, False]
        assert results[1].output is None and results[1].pages["error"][page] != 0
        for i in (0, 2):
            got = _columns(results[i], files[i])
            want = pq.read_table(io.BytesIO(files[i]))
            assert all(got[n].equals(want.column(n)) for n in want.column_names)
    finally:
        for p in results:
            p.close()
