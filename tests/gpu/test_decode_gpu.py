"""``decode="gpu"`` on the GPU: matrix, corpus, random flat tables, corrupt pages, dask.

pyarrow is the oracle for every table. The report says, per column, where
it was decoded: every flat column of a type the decoder claims must have
been decoded on the GPU, the rest by pyarrow with a reason.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dask_hwdecomp
from dask_hwdecomp.errors import CorruptPageError
from dask_hwdecomp.gpudecode.plan import plan_file

from helpers import assert_tables_equal, corpus_root, uploaded_in_file

pytestmark = pytest.mark.gpu

# Matrix columns pyarrow writes in a form the GPU does not decode (nested, or
# a type pyarrow converts on reading).
_NOT_CLAIMED = ("decimal256", "list", "struct", "map", "dictionary", "large_list", "nested")


def _where(report) -> dict:
    out: dict = {}
    for (column, where, why), _stats in report.columns.items():
        out.setdefault(column, set()).add((where, why))
    return out


def _read(path, **kw):
    report = dask_hwdecomp.ReadReport()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dask_hwdecomp.HwdecompFallbackWarning)
        table = dask_hwdecomp.read_table(path, report=report, **kw)
    return table, report


@pytest.mark.parametrize("backend", ["nvcomp", "auto"])
def test_matrix_decode_gpu(nvcomp_available, matrix_files, backend):
    for f in matrix_files:
        got, report = _read(f.path, backend=backend, decode="gpu")
        assert_tables_equal(got, pq.read_table(f.path))
        where = _where(report)
        gpu = {c for c, w in where.items() if ("gpu", "") in w}
        claimed = {c for c in got.column_names if not c.startswith(_NOT_CLAIMED)}
        assert claimed <= gpu, (f.id, sorted(claimed - gpu), {c: where[c] for c in claimed - gpu})


def _corpus_files():
    data = corpus_root() / "data"
    return sorted(data.glob("*.parquet")) if data.is_dir() else []


@pytest.mark.parametrize("path", _corpus_files(), ids=lambda p: p.name)
def test_corpus_decode_gpu(nvcomp_available, path):
    try:
        expected = pq.read_table(path)
    except Exception as exc:  # pyarrow is the oracle: what it cannot read is out of scope
        pytest.skip(f"pyarrow cannot read {path.name}: {type(exc).__name__}")
    got, _ = _read(path, backend="auto", decode="gpu")
    assert_tables_equal(got, expected)


_TYPES = {
    "i8": pa.int8(), "u16": pa.uint16(), "i32": pa.int32(), "u32": pa.uint32(), "i64": pa.int64(),
    "u64": pa.uint64(), "f32": pa.float32(), "f64": pa.float64(), "bool": pa.bool_(), "date": pa.date32(),
    "ts": pa.timestamp("us", tz="UTC"), "dec": pa.decimal128(18, 3), "str": pa.string(),
    "lstr": pa.large_string(), "bin": pa.binary(), "fsb": pa.binary(5),
}
_ENCODINGS = {
    "i8": ["PLAIN", "DELTA_BINARY_PACKED"], "u16": ["PLAIN", "DELTA_BINARY_PACKED"],
    "i32": ["PLAIN", "DELTA_BINARY_PACKED", "BYTE_STREAM_SPLIT"], "u32": ["PLAIN", "DELTA_BINARY_PACKED"],
    "i64": ["PLAIN", "DELTA_BINARY_PACKED", "BYTE_STREAM_SPLIT"], "u64": ["PLAIN", "DELTA_BINARY_PACKED"],
    "f32": ["PLAIN", "BYTE_STREAM_SPLIT"], "f64": ["PLAIN", "BYTE_STREAM_SPLIT"], "bool": ["PLAIN", "RLE"],
    "date": ["PLAIN", "DELTA_BINARY_PACKED"], "ts": ["PLAIN", "DELTA_BINARY_PACKED"], "dec": ["PLAIN"],
    "str": ["PLAIN", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY"],
    "lstr": ["PLAIN", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY"],
    "bin": ["PLAIN", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY"], "fsb": ["PLAIN", "BYTE_STREAM_SPLIT"],
}


def _values(name, typ, n, rng):
    if name == "bool":
        return pa.array(rng.random(n) < 0.5)
    if name in ("str", "lstr", "bin"):
        words = ["", "a", "bb", "prefix-shared-", "prefix-shared-x", "ünïcode", "z" * 40]
        vals = [words[i % len(words)] + str(int(x)) for i, x in enumerate(rng.integers(0, 50, n))]
        return pa.array(vals if name != "bin" else [v.encode() for v in vals], type=typ)
    if name == "fsb":
        return pa.array([bytes(rng.integers(0, 256, 5, dtype=np.uint8)) for _ in range(n)], type=typ)
    if name == "dec":
        from decimal import Decimal
        return pa.array([Decimal(int(x)) / 1000 for x in rng.integers(-10**15, 10**15, n)], type=typ)
    if name == "f32" or name == "f64":
        return pa.array(rng.standard_normal(n), type=typ)
    if name == "date":
        return pa.array(rng.integers(-20000, 20000, n).astype(np.int32), type=pa.int32()).cast(typ)
    if name == "ts":
        return pa.array(rng.integers(-2**62, 2**62, n), type=pa.int64()).cast(typ)
    dtype = np.dtype(typ.to_pandas_dtype())
    info = np.iinfo(dtype)
    return pa.array(rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True), type=typ)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(st.sampled_from(sorted(_TYPES)), min_size=1, max_size=5, unique=True),
    rows=st.integers(0, 3000),
    null_ratio=st.sampled_from([0.0, 0.05, 0.5, 1.0]),
    page_size=st.sampled_from([64, 1024, 1 << 20]),
    dictionary=st.booleans(),
    version=st.sampled_from(["1.0", "2.0"]),
    encoding_pick=st.integers(0, 2),
    codec=st.sampled_from(["snappy", "zstd", "none"]),
    seed=st.integers(0, 2**31),
)
def test_random_flat_tables_decode_gpu(nvcomp_available, names, rows, null_ratio, page_size, dictionary, version,
                                       encoding_pick, codec, seed):
    rng = np.random.default_rng(seed)
    cols = {}
    for name in names:
        arr = _values(name, _TYPES[name], rows, rng)
        if null_ratio:
            arr = pa.compute.if_else(pa.array(rng.random(rows) < null_ratio), pa.nulls(rows, arr.type), arr)
        cols[name] = arr
    table = pa.table(cols)
    encodings = {n: _ENCODINGS[n][encoding_pick % len(_ENCODINGS[n])] for n in names}
    kw = {}
    if not dictionary:
        kw["column_encoding"] = encodings
    sink = io.BytesIO()
    pq.write_table(table, sink, compression=codec, data_page_size=page_size, data_page_version=version,
                   use_dictionary=dictionary, row_group_size=max(1, rows // 2 + 1), write_batch_size=64, **kw)
    data = sink.getvalue()
    path = _tmp_file(data)
    got, report = _read(path, backend="auto", decode="gpu")
    assert_tables_equal(got, pq.read_table(io.BytesIO(data)))
    where = _where(report)
    assert all(("gpu", "") in where[c] for c in names if c in where and rows), where


def _tmp_file(data: bytes) -> str:
    import tempfile

    f = tempfile.NamedTemporaryFile(suffix=".parquet", delete=False)
    f.write(data)
    f.close()
    return f.name


def _corrupt_cases():
    """(name, table, write options, edit(data, plan) -> None): pages that must fail by name."""
    n = 500
    ints = pa.table({"x": pa.array(np.arange(n, dtype=np.int64), mask=np.arange(n) % 7 == 0)})
    dict_ints = pa.table({"x": pa.array(np.arange(n, dtype=np.int64) % 5)})
    strs = pa.table({"x": pa.array([f"s{i}" for i in range(n)])})

    def page_of(plan):
        return int(plan.chunks["first_page"][0])

    def bad_levels(data, plan):  # the level run header claims a huge bit-packed run
        at = uploaded_in_file(plan, int(plan.pages["offset"][page_of(plan)]))
        data[at + 4] = 0xFF
        data[at + 5] = 0xFF
        data[at + 6] = 0x7F

    def bad_index(data, plan):  # every dictionary index 31 (5 entries)
        at = uploaded_in_file(plan, int(plan.pages["offset"][page_of(plan)]))
        lv = int.from_bytes(data[at : at + 4], "little")
        body = at + 4 + lv
        data[body] = 5  # bit width 5
        end = uploaded_in_file(plan, int(plan.pages["offset"][page_of(plan)] + plan.pages["size"][page_of(plan)]) - 1)
        data[body + 1] = (16 << 1)  # an RLE run of 16 ...
        data[body + 2] = 31  # ... of index 31
        assert end > body

    def bad_length(data, plan):  # the first string's length past the page
        at = uploaded_in_file(plan, int(plan.pages["offset"][page_of(plan)]))
        lv = int.from_bytes(data[at : at + 4], "little")
        data[at + 4 + lv : at + 8 + lv] = (1 << 30).to_bytes(4, "little")

    def overflow_length(data, plan):  # a negative string length
        at = uploaded_in_file(plan, int(plan.pages["offset"][page_of(plan)]))
        lv = int.from_bytes(data[at : at + 4], "little")
        data[at + 4 + lv : at + 8 + lv] = (0xFFFFFFF0).to_bytes(4, "little")

    return [
        ("levels", ints, dict(use_dictionary=False), bad_levels),
        ("dictionary index", dict_ints, dict(use_dictionary=True), bad_index),
        ("string length", strs, dict(use_dictionary=False), bad_length),
        ("negative length", strs, dict(use_dictionary=False), overflow_length),
    ]


@pytest.mark.parametrize("case", _corrupt_cases(), ids=lambda c: c[0])
def test_corrupt_pages_are_named_and_the_gpu_goes_on(nvcomp_available, tmp_path, case):
    _, table, kw, edit = case
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="none", **kw)
    data = bytearray(sink.getvalue())
    plan = plan_file(bytes(data))
    assert len(plan.chunks) == 1, plan.fallbacks
    edit(data, plan)
    path = tmp_path / "bad.parquet"
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptPageError) as info:
        dask_hwdecomp.read_table(str(path), backend="auto", decode="gpu")
    where = info.value.location
    assert where.file == str(path) and where.row_group == 0 and where.column == "x" and where.page is not None
    # The service and its context go on: the next read decodes on the GPU.
    good = tmp_path / "good.parquet"
    pq.write_table(table, good, compression="snappy", **kw)
    got, report = _read(str(good), backend="auto", decode="gpu")
    assert_tables_equal(got, pq.read_table(good))
    assert ("gpu", "") in _where(report)["x"]


def test_dask_frames_decode_gpu(nvcomp_available, tmp_path, matrix_source):
    import dask
    import dask.dataframe as dd
    import pandas as pd

    flat = matrix_source.select([c for c in matrix_source.column_names if not c.startswith(_NOT_CLAIMED)])
    for i in range(3):
        pq.write_table(flat.slice(i * 80, 80), tmp_path / f"p{i}.parquet", compression="snappy", row_group_size=40)
    with dask.config.set(scheduler="threads"):
        for kw in ({}, {"columns": ["int32_none", "string_some"]}, {"filters": [("int32_none", ">", 0)]},
                   {"index": "int64_none"}):
            got = dd.read_parquet(str(tmp_path), engine=dask_hwdecomp.hwdecomp,
                                  hwdecomp_options={"decode": "gpu"}, **kw).compute()
            expected = dd.read_parquet(str(tmp_path), engine="pyarrow", **kw).compute()
            pd.testing.assert_frame_equal(got, expected)


def _decoder_stats() -> dict:
    from dask_hwdecomp.service.launch import node_stats
    from dask_hwdecomp.service.rundir import service_dir

    found = [s for s in node_stats(service_dir()) if "kept_runs" in s]
    assert len(found) == 1, found
    return found[0]


def test_the_decoder_reads_pages_kept_on_the_gpu(nvcomp_available, tmp_path):
    rng = np.random.default_rng(8)
    n = 200_000
    table = pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "x": pa.array(rng.random(n), mask=rng.random(n) < 0.1),
        "s": pa.array([f"v{i % 977}" for i in range(n)]),
    })
    path = tmp_path / "kept.parquet"
    pq.write_table(table, path, compression="snappy", row_group_size=50_000)
    _read(path, backend="nvcomp", decode="gpu")  # the service's decoder started
    before = _decoder_stats()
    got, report = _read(path, backend="nvcomp", decode="gpu")
    after = _decoder_stats()
    assert_tables_equal(got, table)
    assert {w for (_, w, _) in report.columns} == {"gpu"}
    assert after["kept_used"] - before["kept_used"] == after["kept_runs"] - before["kept_runs"] > 0, (before, after)
    kept = after["decode_bytes_kept"] - before["decode_bytes_kept"]
    read = after["decode_bytes_in"] - before["decode_bytes_in"]
    assert 0.5 * read < kept <= read, (kept, read)
    assert after["kept_waiting"] == 0
