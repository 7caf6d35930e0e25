"""The GPU decode planner: column classification, the compiled page walk and its records."""

from __future__ import annotations

import datetime
import decimal
import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dask_hwdecomp.errors import PageLocation
from dask_hwdecomp.format.footer import parse_footer
from dask_hwdecomp.format.pages import chunk_range, scan_chunk
from dask_hwdecomp.format.structs import DataPageHeader, DataPageHeaderV2, DictionaryPageHeader, PageHeader
from dask_hwdecomp.gpudecode.plan import plan_file
from dask_hwdecomp.gpudecode.tables import CHUNK, PAGE, Encoding, OutKind, PageKind
from dask_hwdecomp.gpudecode.types import CpuReason, GpuColumn, classify_column, classify_columns

N = 300


def _write(table: pa.Table, **kwargs) -> bytes:
    sink = io.BytesIO()
    kwargs.setdefault("compression", "none")
    pq.write_table(table, sink, **kwargs)
    return sink.getvalue()


def _flat_table(n: int = N) -> pa.Table:
    rng = np.random.default_rng(0)
    ints = rng.integers(-100, 100, n)
    mask = ints % 3 == 0
    return pa.table({
        "i8": pa.array(ints, pa.int8(), mask=mask),
        "u16": pa.array(np.abs(ints), pa.uint16()),
        "i32": pa.array(ints, pa.int32(), mask=mask),
        "i64": pa.array(ints * 1_000_000_007, pa.int64()),
        "u64": pa.array(np.abs(ints), pa.uint64(), mask=mask),
        "f32": pa.array(ints / 3, pa.float32(), mask=mask),
        "f64": pa.array(ints / 7, pa.float64()),
        "b": pa.array(ints > 0, pa.bool_(), mask=mask),
        "s": pa.array([f"v{i % 17}" for i in ints], pa.string(), mask=mask),
        "ls": pa.array([f"w{i}" for i in ints], pa.large_string()),
        "bin": pa.array([bytes([i % 256]) * (i % 5) for i in ints], pa.binary(), mask=mask),
        "fsb": pa.array([bytes([i % 256]) * 3 for i in ints], pa.binary(3), mask=mask),
        "d32": pa.array(ints.astype("datetime64[D]").astype(object), pa.date32(), mask=mask),
        "ts": pa.array(ints * 1000, pa.timestamp("us", tz="Europe/Paris"), mask=mask),
        "tns": pa.array(ints, pa.timestamp("ns")),
        "t64": pa.array(np.abs(ints), pa.time64("us")),
        "dec": pa.array([decimal.Decimal(int(i)).scaleb(-2) for i in ints], pa.decimal128(7, 2), mask=mask),
        "h": pa.array(ints.astype(np.float16), pa.float16(), mask=mask),
    })


# --- the reference: format.pages.scan_chunk over the same file -------------------------


def _reference_pages(buf: bytes, rg: int, leaf: int) -> list:
    footer = parse_footer(buf, len(buf), "mem")
    chunk = footer.column_chunks(rg)[leaf]
    where = PageLocation("mem", rg, str(leaf))
    rng = chunk_range(chunk, footer.footer_offset, where)
    view = memoryview(buf)[rng.start : rng.start + rng.length]
    rows = footer.row_groups[rg].get_value(3)
    pages = scan_chunk(view, rng, where, max_page_bytes=1 << 30, num_rows=rows)
    return [(rng.start, p) for p in pages]


def _check_against_reference(buf: bytes, plan) -> None:
    md = pq.ParquetFile(io.BytesIO(buf)).metadata
    leaf_of = {md.schema.column(i).path: i for i in range(md.num_columns)}
    data = plan.gather(buf)
    assert data.shape[0] == plan.data_bytes
    assert plan.chunks.dtype == CHUNK and plan.pages.dtype == PAGE
    row_base = 0
    dict_base = 0
    for c, (rec, info) in enumerate(zip(plan.chunks, plan.columns)):
        ref = _reference_pages(buf, info.row_group, leaf_of[info.name])
        assert rec["row_base"] == row_base
        assert rec["dict_base"] == dict_base
        assert rec["num_rows"] == md.row_group(info.row_group).num_rows
        mine = []
        if rec["dict_page"] >= 0:
            assert rec["first_page"] == rec["dict_page"] + 1
            mine.append(plan.pages[rec["dict_page"]])
            dict_base += int(plan.pages[rec["dict_page"]]["num_values"])
        mine.extend(plan.pages[rec["first_page"] : rec["first_page"] + rec["num_pages"]])
        assert len(mine) == len(ref)
        row = int(rec["row_base"])
        for page, (start, p) in zip(mine, ref):
            assert page["chunk"] == c
            # the body in ``data`` is the body in the file
            body = bytes(buf[start + p.body_start : start + p.body_start + p.uncompressed_size])
            assert bytes(data[page["offset"] : page["offset"] + page["size"]]) == body
            assert page["size"] == p.uncompressed_size
            if p.page_type == 2:
                sub = p.header.get_value(PageHeader.dictionary_page_header)
                assert page["kind"] == PageKind.DICTIONARY
                assert page["num_values"] == sub.get_value(DictionaryPageHeader.num_values)
                assert page["def_bytes"] == -1
            elif p.page_type == 0:
                sub = p.header.get_value(PageHeader.data_page_header)
                assert page["kind"] == PageKind.DATA_V1
                assert page["encoding"] == sub.get_value(2)
                assert page["num_values"] == sub.get_value(DataPageHeader.num_values)
                assert page["def_bytes"] == -1
                assert page["row_start"] == row
                row += int(page["num_values"])
            else:
                sub = p.header.get_value(PageHeader.data_page_header_v2)
                assert page["kind"] == PageKind.DATA_V2
                assert page["encoding"] == sub.get_value(DataPageHeaderV2.encoding)
                assert page["num_values"] == sub.get_value(DataPageHeaderV2.num_values)
                assert page["def_bytes"] == sub.get_value(DataPageHeaderV2.definition_levels_byte_length)
                assert page["row_start"] == row
                row += sub.get_value(DataPageHeaderV2.num_rows)
        assert row == rec["row_base"] + rec["num_rows"]
        row_base += int(rec["num_rows"])
    # the ranges tile ``data`` in order
    assert int(plan.ranges[:, 1].sum()) == plan.data_bytes
    assert list(plan.ranges[:, 2]) == list(np.cumsum(plan.ranges[:, 1]) - plan.ranges[:, 1])


@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("dictionary", [True, False])
def test_plan_matches_the_reference_scan(version, dictionary):
    table = _flat_table()
    buf = _write(table, data_page_version=version, use_dictionary=dictionary, data_page_size=256,
                 write_batch_size=32, row_group_size=128)
    plan = plan_file(buf)
    assert plan.fallbacks == ({},)
    assert set(plan.gpu_columns[0]) == set(table.column_names)
    assert len(plan.chunks) == 3 * table.num_columns
    assert (plan.chunks["num_pages"] > 1).any()  # tiny pages
    _check_against_reference(buf, plan)


@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize(
    "columns,encoding",
    [
        (["i32", "i64", "i8", "u16", "ts"], "DELTA_BINARY_PACKED"),
        (["s", "bin", "ls"], "DELTA_LENGTH_BYTE_ARRAY"),
        (["s", "bin"], "DELTA_BYTE_ARRAY"),
        (["f32", "f64", "i32", "i64", "fsb"], "BYTE_STREAM_SPLIT"),
        (["b"], "RLE"),
    ],
)
def test_every_encoding_is_planned(version, columns, encoding):
    table = _flat_table().select(columns)
    buf = _write(table, data_page_version=version, use_dictionary=False, column_encoding=encoding,
                 data_page_size=256, write_batch_size=32)
    plan = plan_file(buf)
    assert plan.fallbacks == ({},)
    data_pages = plan.pages[plan.pages["kind"] != PageKind.DICTIONARY]
    assert set(data_pages["encoding"]) == {Encoding[encoding]}
    _check_against_reference(buf, plan)


def test_required_columns_several_row_groups_and_selection():
    table = _flat_table()
    schema = pa.schema([f.with_nullable(False) for f in table.schema])
    table = pa.table({n: table[n].fill_null(table[n].drop_null()[0]) for n in table.column_names}, schema=schema)
    buf = _write(table, row_group_size=70, data_page_size=128, write_batch_size=16)
    plan = plan_file(buf, columns=["i32", "s", "b"], row_groups=[3, 1])
    assert [(c.row_group, c.name) for c in plan.columns] == [
        (3, "i32"), (3, "b"), (3, "s"), (1, "i32"), (1, "b"), (1, "s")]  # file order
    assert (plan.chunks["max_def"] == 0).all()
    assert plan.columns[0].location == PageLocation("<memory>", 3, "i32")
    _check_against_reference(buf, plan)


def test_empty_file_and_empty_selection():
    buf = _write(_flat_table(0))
    plan = plan_file(buf)
    assert plan.data_bytes == 0 and len(plan.pages) == 0
    _check_against_reference(buf, plan)
    plan = plan_file(_write(_flat_table()), columns=[])
    assert len(plan.chunks) == 0 and plan.ranges.shape == (0, 3)


# --- classification --------------------------------------------------------------------


def _classes(table: pa.Table, **kwargs) -> dict:
    pf = pq.ParquetFile(io.BytesIO(_write(table, **kwargs)))
    return {c.name: c for c in classify_columns(pf.schema, pf.schema_arrow)}


def test_classification_of_the_flat_types():
    got = _classes(_flat_table())
    expect = {
        "i8": (OutKind.NARROW, 1), "u16": (OutKind.NARROW, 2), "i32": (OutKind.COPY, 4),
        "i64": (OutKind.COPY, 8), "u64": (OutKind.COPY, 8), "f32": (OutKind.COPY, 4),
        "f64": (OutKind.COPY, 8), "b": (OutKind.BOOL, 0), "s": (OutKind.BYTES, 4),
        "ls": (OutKind.BYTES, 8), "bin": (OutKind.BYTES, 4), "fsb": (OutKind.COPY, 3),
        "d32": (OutKind.COPY, 4), "ts": (OutKind.COPY, 8), "tns": (OutKind.COPY, 8),
        "t64": (OutKind.COPY, 8), "dec": (OutKind.DECIMAL, 16), "h": (OutKind.COPY, 2),
    }
    for name, (kind, width) in expect.items():
        col = got[name]
        assert isinstance(col, GpuColumn), (name, col)
        assert (col.kind, col.width) == (kind, width), name
    assert got["ts"].arrow_type == pa.timestamp("us", tz="Europe/Paris")
    assert got["fsb"].type_length == 3
    assert got["dec"].type_length > 0


@pytest.mark.parametrize(
    "array,reason",
    [
        (pa.array([[1], None]), "nested column"),
        (pa.array([{"x": 1}, None]), "nested column"),
        (pa.array(["a", "b"], pa.string_view()), "string_view"),
        (pa.array([1, 2], pa.duration("s")), "duration"),
        (pa.array([decimal.Decimal(1)] * 2, pa.decimal256(40, 0)), "decimal256"),
    ],
)
def test_columns_left_to_pyarrow(array, reason):
    got = list(_classes(pa.table({"x": array})).values())
    assert all(isinstance(c, CpuReason) for c in got)
    assert reason in got[0].reason


def test_int96_and_dictionary_reads_go_to_pyarrow():
    ts = pa.array([datetime.datetime(2020, 1, 1)] * 3, pa.timestamp("ns"))
    got = _classes(pa.table({"t": ts}), use_deprecated_int96_timestamps=True)
    assert got["t"] == CpuReason("t", "INT96 timestamps")
    buf = _write(pa.table({"s": ["a", "b", "a"], "i": [1, 2, 3]}))
    plan = plan_file(buf, read_dictionary=["s"])
    assert plan.fallbacks == ({"s": "dictionary type (read_dictionary)"},)
    assert list(plan.gpu_columns[0]) == ["i"]


def _column(array: pa.Array, **kwargs):
    return pq.ParquetFile(io.BytesIO(_write(pa.table({"x": array}), **kwargs))).schema.column(0)


def test_units_must_agree():
    # The Arrow type pyarrow reads decides; where it is not the stored unit
    # (an ARROW:schema asking for seconds, say) pyarrow converts: not the GPU.
    ms = _column(pa.array([1, 2], pa.timestamp("ms", tz="UTC")))
    assert classify_column(ms, pa.field("x", pa.timestamp("ms", tz="Asia/Tokyo"))).kind == OutKind.COPY
    got = classify_column(ms, pa.field("x", pa.timestamp("s", tz="UTC")))
    assert got == CpuReason("x", "timestamp[s] stored as milliseconds: pyarrow converts units")
    assert isinstance(classify_column(ms, pa.field("x", pa.timestamp("us"))), CpuReason)
    t32 = _column(pa.array([1, 2], pa.time32("ms")))
    assert classify_column(t32, pa.field("x", pa.time32("ms"))).kind == OutKind.COPY
    assert "converts units" in classify_column(t32, pa.field("x", pa.time32("s"))).reason
    date = _column(pa.array([1, 2], pa.date32()))
    assert "date64" in classify_column(date, pa.field("x", pa.date64())).reason
    got = _classes(pa.table({"t": pa.array([1, 2], pa.timestamp("ns"))}), coerce_timestamps="us",
                   allow_truncated_timestamps=True, store_schema=False)
    assert isinstance(got["t"], GpuColumn) and got["t"].arrow_type == pa.timestamp("us")


def test_integer_annotations_must_agree():
    i8 = _column(pa.array([1, 2], pa.int8()))
    assert classify_column(i8, pa.field("x", pa.int8())).kind == OutKind.NARROW
    assert isinstance(classify_column(i8, pa.field("x", pa.uint8())), CpuReason)
    assert isinstance(classify_column(i8, pa.field("x", pa.int32())), CpuReason)
    u64 = _column(pa.array([1, 2], pa.uint64()))
    assert classify_column(u64, pa.field("x", pa.uint64())).kind == OutKind.COPY
    assert isinstance(classify_column(u64, pa.field("x", pa.int64())), CpuReason)
    dec = _column(pa.array([decimal.Decimal(1)] * 2, pa.decimal128(9, 0)), store_decimal_as_integer=True)
    assert dec.physical_type == "INT32"
    assert classify_column(dec, pa.field("x", pa.decimal128(9, 0))).kind == OutKind.DECIMAL
    assert isinstance(classify_column(dec, pa.field("x", pa.decimal128(9, 1))), CpuReason)
    assert isinstance(classify_column(dec, pa.field("x", pa.decimal256(9, 0))), CpuReason)
