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
from dask_hwdecomp.gpudecode.tables import CHUNK, PAGE, OutKind, place_outputs

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


# The loops merge_plans, place_members and place_outputs ran before they
# were vectorised: the references their results must equal.

def _reference_place_outputs(chunks: np.ndarray) -> int:
    def align(n):
        return (n + 63) // 64 * 64

    end = 0
    for c in chunks:
        rows, kind = int(c["num_rows"]), int(c["kind"])
        if int(c["max_def"]) > 0:
            c["out_valid"] = end
            end = align(end + (rows + 7) // 8)
        else:
            c["out_valid"] = -1
        c["out_values"] = end
        values = (rows + 7) // 8 if kind == OutKind.BOOL else (rows + 1 if kind == OutKind.BYTES else rows) * int(
            c["width"])
        end = align(end + values)
        if kind == OutKind.BYTES:
            c["out_data"] = end
            end = align(end + int(c["data_bytes"]))
        else:
            c["out_data"] = -1
    return end


def _reference_merge(plans):
    chunks_out, pages_out, data_base = [], [], []
    page_at = chunk_at = data_at = rows_at = dict_at = 0
    for p in plans:
        data_base.append(data_at)
        c, g = np.array(p.chunks, CHUNK), np.array(p.pages, PAGE)
        has_dict = c["dict_page"] >= 0
        c["dict_page"][has_dict] += page_at
        c["first_page"] += page_at
        c["row_base"] += rows_at
        c["dict_base"] += dict_at
        g["chunk"] += chunk_at
        g["offset"] += data_at
        g["row_start"] += rows_at
        chunks_out.append(c)
        pages_out.append(g)
        rows_at += int(p.chunks["num_rows"].sum())
        d = p.chunks["dict_page"][p.chunks["dict_page"] >= 0]
        dict_at += int(p.pages["num_values"][d].astype(np.int64).sum())
        data_at += -(-int(p.data_bytes) // DATA_ALIGN) * DATA_ALIGN
        chunk_at += len(c)
        page_at += len(g)
    return np.concatenate(chunks_out), np.concatenate(pages_out), data_at, data_base


def _random_plan(rng) -> PlanRecords:
    n = int(rng.integers(0, 30))
    pages_per = rng.integers(1, 5, n)
    has_dict = rng.random(n) < 0.5
    counts = pages_per + has_dict
    first = np.cumsum(counts) - counts
    chunks = np.zeros(n, CHUNK)
    chunks["kind"] = rng.choice([int(k) for k in OutKind], n)
    chunks["width"] = rng.choice([1, 2, 4, 8, 16], n)
    chunks["max_def"] = rng.integers(0, 2, n)
    chunks["num_rows"] = rng.integers(0, 5000, n)
    chunks["row_base"] = np.cumsum(chunks["num_rows"]) - chunks["num_rows"]
    chunks["dict_page"] = np.where(has_dict, first, -1)
    chunks["first_page"] = first + has_dict
    chunks["num_pages"] = pages_per
    chunks["data_bytes"] = np.where(chunks["kind"] == int(OutKind.BYTES), rng.integers(0, 10**6, n), 0)
    pages = np.zeros(int(counts.sum()), PAGE)
    pages["chunk"] = np.repeat(np.arange(n), counts)
    pages["num_values"] = rng.integers(0, 300, len(pages))
    pages["offset"] = rng.integers(0, 10**5, len(pages))
    pages["row_start"] = rng.integers(0, 10**4, len(pages))
    entries = np.where(has_dict, pages["num_values"][np.minimum(first, max(len(pages) - 1, 0))] if n else 0, 0)
    chunks["dict_base"] = np.cumsum(entries) - entries
    return PlanRecords(np.zeros((0, 3), np.int64), chunks, pages, int(rng.integers(0, 10**6)))


@pytest.mark.parametrize("seed", range(8))
def test_vectorised_merge_and_placement_equal_the_loops_they_replaced(seed):
    rng = np.random.default_rng(seed)
    plans = [_random_plan(rng) for _ in range(int(rng.integers(1, 7)))]
    if seed == 0:
        plans += [_records(d) for d in _files()]
    merged = merge_plans(plans)
    chunks, pages, data_bytes, data_base = _reference_merge(plans)
    assert (merged.chunks == chunks).all() and (merged.pages == pages).all()
    assert merged.data_bytes == data_bytes and merged.data_base.tolist() == data_base
    measured = merged.chunks.copy()
    base = place_members(merged, measured)
    for i in range(len(plans)):
        alone = merged.member_chunks(i, merged.chunks)
        size = _reference_place_outputs(alone)
        mine = merged.member_chunks(i, measured)
        assert base[i + 1] - base[i] == size
        for name in ("out_valid", "out_values", "out_data"):
            assert (mine[name] == np.where(alone[name] >= 0, alone[name] + base[i], -1)).all(), name
        again = merged.member_chunks(i, merged.chunks)
        assert place_outputs(again) == size and (again == alone).all()


def test_a_dictionary_page_outside_its_plan_is_refused():
    plan = _records(_files()[0])
    chunks = plan.chunks.copy()
    chunks["dict_page"][chunks["dict_page"] >= 0] = len(plan.pages)
    with pytest.raises(ValueError, match="dictionary page lies outside its plan"):
        merge_plans([PlanRecords(plan.ranges, chunks, plan.pages, plan.data_bytes), plan])
