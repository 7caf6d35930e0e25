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
from dask_hwdecomp.gpudecode.plan import plan_batch, plan_file
from dask_hwdecomp.gpudecode.tables import CHUNK, PAGE, Encoding, OutKind, PageKind
from dask_hwdecomp.gpudecode.types import CpuReason, GpuColumn, classify_column, classify_columns

from helpers import with_chunk_field

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


# --- a batch's images in one host buffer -----------------------------------------------


def test_plan_batch_over_images_in_one_host_buffer():
    from dask_hwdecomp.readpath.batch import Image
    from dask_hwdecomp.readpath.plan import Piece, PiecePlan

    table = _flat_table()
    one = _write(table.select(["i32", "s"]), row_group_size=100, data_page_size=128, write_batch_size=16)
    two = _write(table.select(["s", "b", "f64"]), row_group_size=150, use_dictionary=False)
    host = np.zeros(64 + len(one) + 64 + len(two), np.uint8)
    host[64 : 64 + len(one)] = np.frombuffer(one, np.uint8)
    at = 128 + len(one)
    host[at : at + len(two)] = np.frombuffer(two, np.uint8)
    whole = pa.py_buffer(host)
    images = [
        Image(PiecePlan(Piece("one.parquet"), None), whole.slice(64, len(one)), [4, 7, 9]),
        Image(PiecePlan(Piece("two.parquet"), None), whole.slice(at, len(two)), [0, 1]),
    ]
    plan = plan_batch(images, ["s", "b", "i32"], within=memoryview(host))
    assert plan.fallbacks == ({}, {})
    assert [(c.image, c.row_group, c.name) for c in plan.columns] == [
        (0, 0, "i32"), (0, 0, "s"), (0, 1, "i32"), (0, 1, "s"), (0, 2, "i32"), (0, 2, "s"),
        (1, 0, "s"), (1, 0, "b"), (1, 1, "s"), (1, 1, "b")]
    assert plan.columns[4].page_location(2) == PageLocation("one.parquet", 9, "i32", 2)
    assert plan.columns[-1].location == PageLocation("two.parquet", 1, "b")
    assert set(plan.gpu_columns[1]) == {"s", "b"}
    # the ranges point into the host buffer: ``data`` is each file's planned chunks
    data = plan.gather(host)
    alone = [plan_file(one, ["s", "i32"]), plan_file(two, ["s", "b"])]
    expect = np.concatenate([p.gather(buf) for p, buf in zip(alone, (one, two))])
    assert np.array_equal(data, expect)
    assert plan.ranges[0, 0] > 64 and plan.ranges[-1, 0] > at
    # the records continue across images: rows, dictionary entries, pages
    assert np.array_equal(plan.chunks["row_base"], np.cumsum(plan.chunks["num_rows"]) - plan.chunks["num_rows"])
    n0 = len(alone[0].pages)
    assert np.array_equal(plan.pages["offset"][n0:], alone[1].pages["offset"] + alone[0].data_bytes)
    assert np.array_equal(plan.pages["row_start"][n0:], alone[1].pages["row_start"] + 2 * table.num_rows)
    # by default, offsets are from the lowest image
    assert np.array_equal(plan_batch(images, ["s", "b", "i32"]).ranges[:, 0], plan.ranges[:, 0] - 64)


# --- hostile headers: the chunk goes to pyarrow with a reason, never an exception ------


def _check_invariants(plan) -> None:
    """What the kernels rely on, for every chunk the plan keeps."""
    for c, rec in enumerate(plan.chunks):
        lo, n = int(rec["first_page"]), int(rec["num_pages"])
        data_pages = plan.pages[lo : lo + n]
        assert (data_pages["chunk"] == c).all()
        assert (data_pages["kind"] != PageKind.DICTIONARY).all()
        assert int(data_pages["num_values"].sum()) == rec["num_rows"]
        starts = rec["row_base"] + np.cumsum(data_pages["num_values"]) - data_pages["num_values"]
        assert np.array_equal(data_pages["row_start"], starts)
        if rec["dict_page"] >= 0:
            assert rec["dict_page"] == lo - 1 and plan.pages[lo - 1]["kind"] == PageKind.DICTIONARY
    assert ((plan.pages["offset"] >= 0) & (plan.pages["offset"] + plan.pages["size"] <= plan.data_bytes)).all()
    assert (plan.pages["def_bytes"] <= plan.pages["size"]).all()


def _rewrite(tmp_path, buf: bytes, transform) -> bytes:
    from rewrite import rewrite_pages

    src, dst = tmp_path / "src.parquet", tmp_path / "dst.parquet"
    src.write_bytes(buf)
    rewrite_pages(src, dst, transform)
    return dst.read_bytes()


def _edit(field: int, sub_field: int, value, *, ttype=None, only_first_data_page: bool = True):
    from dask_hwdecomp.format.thrift import T

    def transform(p):
        h = p.header
        # the first page of column 0, row group 1 (the files have no dictionary pages)
        if h.get(field) is None or (only_first_data_page and p.page.ordinal) or p.column != 0 or p.row_group != 1:
            return h, p.body
        if sub_field == 0:
            h[field] = (ttype or T.I32, value)
        else:
            sub = h.get_value(field).copy()
            sub[sub_field] = (ttype or T.I32, value)
            h[field] = (T.STRUCT, sub)
        return h, p.body

    return transform


@pytest.mark.parametrize(
    "version,field,sub_field,value,reason",
    [
        ("1.0", 5, 3, 4, "definition levels of encoding BIT_PACKED"),
        ("2.0", 8, 6, 1, "v2 page with 1 repetition level bytes"),
        ("2.0", 8, 5, 1 << 20, "definition level bytes"),
        ("2.0", 8, 3, 7, "v2 page num_rows 7 differs"),
        ("1.0", 5, 2, Encoding.DELTA_BYTE_ARRAY, "values of encoding DELTA_BYTE_ARRAY"),
        ("1.0", 5, 2, 99, "values of encoding 99"),
        ("1.0", 5, 2, -1, "negative or mistyped"),
        ("1.0", 5, 4, -1, "negative or mistyped"),
        ("2.0", 8, 4, Encoding.RLE_DICTIONARY, "without a dictionary page"),
        ("1.0", 5, 1, 3, "data pages hold"),
        ("1.0", 2, 0, 5, "uncompressed sizes differ"),
        ("1.0", 1, 0, 1, "page of type 1"),
        ("1.0", 1, 0, 2, "page header lacks"),
    ],
)
def test_hostile_page_headers_leave_the_column_to_pyarrow(tmp_path, version, field, sub_field, value, reason):
    table = _flat_table().select(["i32", "f64"])
    buf = _write(table, data_page_version=version, use_dictionary=False, row_group_size=100,
                 data_page_size=128, write_batch_size=16)
    bad = _rewrite(tmp_path, buf, _edit(field, sub_field, value))
    plan = plan_file(bad, path="bad.parquet")
    assert plan.fallbacks[0]["i32"].startswith("row group 1")
    assert reason in plan.fallbacks[0]["i32"]
    if reason in _MISCOUNTS:
        _assert_read_whole(plan, "i32")
    else:
        assert list(plan.fallbacks[0]) == ["i32"], plan.fallbacks
        assert {c.name for c in plan.columns} == {"f64"}
    _check_invariants(plan)
    _check_against_reference(bad, plan)  # the kept column's pages are exactly the file's


# Reasons that say a chunk's values do not add up to its row group's rows.
_MISCOUNTS = ("v2 page num_rows 7 differs", "data pages hold", "column chunk holds 7 values for 100 rows")


def _assert_read_whole(plan, miscounted: str) -> None:
    """No column of the file is decoded on the GPU: pyarrow reads it whole, and says why."""
    assert not plan.columns and not len(plan.chunks)
    others = {n: why for n, why in plan.fallbacks[0].items() if n != miscounted}
    assert others and all(why.startswith(f"pyarrow reads this file whole: its column {miscounted!r}")
                          for why in others.values()), plan.fallbacks


def test_a_v1_page_without_its_repetition_level_encoding_is_left_to_pyarrow(tmp_path):
    # parquet.thrift requires the field and pyarrow refuses the page without
    # it, though the GPU decoder of a flat column never reads it: it must not
    # return rows for a file pyarrow refuses.
    from dask_hwdecomp.format.thrift import T

    table = _flat_table().select(["i32", "f64"])
    buf = _write(table, data_page_version="1.0", use_dictionary=False, row_group_size=100,
                 data_page_size=128, write_batch_size=16)

    def drop_field(p):
        h = p.header
        if p.column == 0 and p.row_group == 1 and p.page.ordinal == 0:
            sub = h.get_value(PageHeader.data_page_header).copy()
            del sub[4]
            h[PageHeader.data_page_header] = (T.STRUCT, sub)
        return h, p.body

    bad = _rewrite(tmp_path, buf, drop_field)
    with pytest.raises(OSError, match="thrift"):
        pq.read_table(pa.BufferReader(bad))
    plan = plan_file(bad, path="bad.parquet")
    assert list(plan.fallbacks[0]) == ["i32"], plan.fallbacks
    assert "page header lacks a required field" in plan.fallbacks[0]["i32"]
    _check_invariants(plan)


def test_dictionary_page_edits(tmp_path):
    from dask_hwdecomp.format.thrift import T

    table = _flat_table().select(["s", "f64"])
    buf = _write(table, row_group_size=100, data_page_size=128, write_batch_size=16)

    def dict_encoding(p):
        h = p.header
        if p.column == 0 and p.row_group == 2 and h.get(PageHeader.dictionary_page_header) is not None:
            sub = h.get_value(PageHeader.dictionary_page_header).copy()
            sub[2] = (sub.get(2)[0], Encoding.DELTA_BINARY_PACKED)
            h[PageHeader.dictionary_page_header] = (T.STRUCT, sub)
        return h, p.body

    plan = plan_file(_rewrite(tmp_path, buf, dict_encoding))
    assert plan.fallbacks[0] == {"s": "row group 2, page 0: dictionary page of encoding DELTA_BINARY_PACKED"}
    _check_invariants(plan)


def test_corrupt_header_bytes_never_raise_nor_plan_wrong_records():
    table = _flat_table().select(["i32", "s", "b", "dec"])
    rng = np.random.default_rng(1)
    for version in ("1.0", "2.0"):
        buf = _write(table, data_page_version=version, row_group_size=150, data_page_size=128,
                     write_batch_size=16)
        headers = []
        for rg in range(2):
            for leaf in range(4):
                for start, p in _reference_pages(buf, rg, leaf):
                    headers.extend(range(start + p.header_start, start + p.body_start))
        clean = plan_file(buf)
        assert clean.fallbacks == ({},)
        for _ in range(150):
            bad = bytearray(buf)
            for at in rng.choice(headers, size=int(rng.integers(1, 4)), replace=False):
                bad[at] = int(rng.integers(0, 256))
            plan = plan_file(bytes(bad))
            _check_invariants(plan)
            # a chunk kept on the GPU is the clean one, page for page
            for rec, info in zip(plan.chunks, plan.columns):
                same = [k for k, c in enumerate(clean.columns) if (c.row_group, c.name) == (info.row_group, info.name)]
                assert clean.chunks[same[0]]["num_pages"] == rec["num_pages"]
                assert clean.chunks[same[0]]["num_rows"] == rec["num_rows"]


def test_leaves_match_fields_by_position_not_name():
    table = pa.table([
        pa.array([{"x": 1, "y": "a"}, None]),  # two leaves, "s.x" and "s.y"
        pa.array([1, 2], pa.int32()),
        pa.array([[1], []]),
        pa.array([3, 4], pa.int64()),
        pa.array([{"k": 1}, None], pa.map_(pa.string(), pa.int8())),
        pa.array([5.0, 6.0]),
    ], names=["s", "s.x", "l", "a.b", "m", "z"])
    pf = pq.ParquetFile(io.BytesIO(_write(table)))
    got = [(c.name, isinstance(c, GpuColumn)) for c in classify_columns(pf.schema, pf.schema_arrow)]
    assert got == [("s", False), ("s", False), ("s.x", True), ("l", False), ("a.b", True), ("m", False),
                   ("m", False), ("z", True)]
    plan = plan_file(_write(table), columns=["s.x", "a.b", "m", "z"])
    assert plan.fallbacks == ({"m": "nested column"},)
    assert list(plan.gpu_columns[0]) == ["s.x", "a.b", "z"]
    dup = pa.table([pa.array([1]), pa.array([2])], names=["a", "a"])
    pf = pq.ParquetFile(io.BytesIO(_write(dup)))
    assert classify_columns(pf.schema, pf.schema_arrow) == [CpuReason("a", "duplicate column name")] * 2


def test_delta_on_a_double_column_is_not_decoded(tmp_path):
    table = _flat_table().select(["f64", "i32"])
    buf = _write(table, use_dictionary=False, row_group_size=100)
    bad = _rewrite(tmp_path, buf, _edit(5, 2, Encoding.DELTA_BINARY_PACKED))
    plan = plan_file(bad)
    assert plan.fallbacks[0] == {"f64": "row group 1, page 0: data page values of encoding DELTA_BINARY_PACKED "
                                        "(not decoded on the GPU for this type)"}


def test_nested_columns_are_selected_by_field_name_or_leaf_path():
    table = pa.table({"l": pa.array([[1], []]), "i": pa.array([1, 2])})
    for name in ("l", "l.list.element"):
        plan = plan_file(_write(table), columns=[name, "i"])
        assert plan.fallbacks == ({"l": "nested column"},)
        assert list(plan.gpu_columns[0]) == ["i"]


@pytest.mark.parametrize(
    "field,value,reason",
    [
        (9, 2, "outside the file's data area"),  # data_page_offset
        (9, 1 << 40, "outside the file's data area"),
        (7, 1 << 40, "outside the file's data area"),  # total_compressed_size
        (7, 20, "page header does not decode"),
        (7, 300, "page runs past its column chunk"),
        (5, 7, "column chunk holds 7 values for 100 rows"),  # num_values
    ],
)
def test_hostile_chunk_metadata_leaves_the_column_to_pyarrow(field, value, reason):
    table = _flat_table().select(["i32", "f64"])
    buf = _write(table, use_dictionary=False, row_group_size=100)
    bad = with_chunk_field(buf, 2, 0, field, value)
    plan = plan_file(bad)
    assert plan.fallbacks[0]["i32"].startswith("row group 2")
    assert reason in plan.fallbacks[0]["i32"]
    if reason in _MISCOUNTS:
        _assert_read_whole(plan, "i32")
    else:
        assert list(plan.fallbacks[0]) == ["i32"]
    _check_invariants(plan)
    _check_against_reference(bad, plan)


def test_page_locations_name_the_page_as_the_file_holds_it():
    table = _flat_table().select(["s", "f64"])
    buf = _write(table, row_group_size=100, data_page_size=64, write_batch_size=8, use_dictionary=["s"])
    plan = plan_file(buf, row_groups=[2, 0], path="f.parquet")
    md = pq.ParquetFile(io.BytesIO(buf)).metadata
    leaf_of = {md.schema.column(i).path: i for i in range(md.num_columns)}
    seen = 0
    for p in range(len(plan.pages)):
        where = plan.page_location(p)
        info = plan.columns[int(plan.pages[p]["chunk"])]
        assert (where.file, where.row_group, where.column) == ("f.parquet", info.row_group, info.name)
        ref = _reference_pages(buf, info.row_group, leaf_of[info.name])
        start, page = ref[where.page]
        assert plan.pages[p]["size"] == page.uncompressed_size
        assert plan.pages[p]["kind"] == {2: PageKind.DICTIONARY, 0: PageKind.DATA_V1}[page.page_type]
        seen += where.page == len(ref) - 1
    assert seen == len(plan.chunks)
    assert plan.page_location(1) == PageLocation("f.parquet", 2, "s", 1)


def test_a_footer_pyarrow_cannot_open_plans_no_column():
    # pyarrow's decode of such an image raises its own error; the GPU takes none of it.
    buf = io.BytesIO()
    pq.write_table(pa.table({"a": [1, 2, 3]}), buf, compression="none")
    data = bytearray(buf.getvalue())
    stored = pq.ParquetFile(pa.py_buffer(bytes(data))).metadata.metadata[b"ARROW:schema"]
    data[data.find(stored) + 5] = ord("!")
    with pytest.raises(pa.ArrowInvalid):
        pq.ParquetFile(pa.py_buffer(bytes(data)))
    plan = plan_file(np.frombuffer(bytes(data), np.uint8))
    assert len(plan.chunks) == 0 and plan.gpu_columns == ({},) and plan.fallbacks == ({},)


def test_a_chunk_whose_type_is_not_its_columns_is_left_to_pyarrow(tmp_path):
    # A footer whose ColumnMetaData says DOUBLE for a FLOAT column: pyarrow
    # refuses the chunk, and so must the read; the GPU must not decode it.
    from dask_hwdecomp.format.structs import ColumnChunk, ColumnMetaData, FileMetaData, RowGroup
    from dask_hwdecomp.format.thrift import T

    from fuzzing import _with_footer, file_map

    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"f": pa.array([1.5, 2.5], pa.float32()), "i": [1, 2]}), path, compression="none")
    fm = file_map(path)
    meta = fm.footer.copy()
    group = meta.get_value(FileMetaData.row_groups)[1][0].copy()
    cols = [c.copy() for c in group.get_value(RowGroup.columns)[1]]
    md = cols[0].get_value(ColumnChunk.meta_data).copy()
    md[ColumnMetaData.type] = (T.I32, 5)  # DOUBLE
    cols[0][ColumnChunk.meta_data] = (T.STRUCT, md)
    group[RowGroup.columns] = (T.LIST, (T.STRUCT, cols))
    meta[FileMetaData.row_groups] = (T.LIST, (T.STRUCT, [group]))
    data = _with_footer(fm, meta)
    with pytest.raises(OSError, match="does not match"):
        pq.read_table(pa.py_buffer(data))
    plan = plan_file(np.frombuffer(data, np.uint8))
    assert "f" not in plan.gpu_columns[0] and "i" in plan.gpu_columns[0]
    assert "column chunk of type DOUBLE, the schema's is FLOAT" in plan.fallbacks[0]["f"]
