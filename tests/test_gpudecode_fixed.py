"""The GPU decoder on fixed-width and boolean columns, against pyarrow.

The kernels run in-process: on a GPU where there is one, else under numba's
CUDA simulator (``conftest`` chooses), so each case is a few hundred rows.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import os
import sys
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dask_hwdecomp.gpudecode.assemble import assemble
from dask_hwdecomp.gpudecode.plan import DecodePlan, plan_file
from dask_hwdecomp.gpudecode.runner import DecodeState, decode_host, measure
from dask_hwdecomp.gpudecode.tables import Encoding, PageError, PageKind

ROWS = 40


@pytest.fixture(autouse=True, scope="module")
def _quick_barriers():
    """Under the simulator: a shorter switch interval still (each barrier costs one).

    The package fits the simulator when it imports numba-cuda
    (:mod:`dask_hwdecomp.gpu.simulator`); this module's many small
    kernels run faster with a shorter interval yet.
    """
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        yield
        return
    before = sys.getswitchinterval()
    sys.setswitchinterval(2e-5)
    yield
    sys.setswitchinterval(before)


# name -> (type, values for row i); FLBA-backed types are float16 and fixed_size_binary.
_COLUMNS = {
    "i32": (pa.int32(), lambda i: (i * 7919 % 2001) - 1000),
    "i64": (pa.int64(), lambda i: (i * 104729) * (-1) ** i << 20),
    "f32": (pa.float32(), lambda i: i * 0.25 - 3.0),
    "f64": (pa.float64(), lambda i: i * 1.5e10 - 7.0),
    "b": (pa.bool_(), lambda i: i % 3 == 0),
    "flba": (pa.binary(3), lambda i: bytes([i % 256, (i * 7) % 256, 255 - i % 256])),
    "i8": (pa.int8(), lambda i: (i % 256) - 128),
    "u8": (pa.uint8(), lambda i: (i * 13) % 256),
    "i16": (pa.int16(), lambda i: (i * 331) % 65536 - 32768),
    "u16": (pa.uint16(), lambda i: (i * 653) % 65536),
    "u32": (pa.uint32(), lambda i: (i * 2654435761) % (1 << 32)),
    "u64": (pa.uint64(), lambda i: (i * 11400714819323198485) % (1 << 64)),
    "f16": (pa.float16(), lambda i: np.float16(i / 8 - 4)),
    "date": (pa.date32(), lambda i: datetime.date(2000, 1, 1) + datetime.timedelta(days=i * 37)),
    "t32": (pa.time32("ms"), lambda i: i * 1000 + 7),
    "t64": (pa.time64("us"), lambda i: i * 1000003),
    "ts": (pa.timestamp("ns"), lambda i: i * 10**15 + 3),
    "tsz": (pa.timestamp("ms", tz="UTC"), lambda i: i * 10**9),
    "dec9": (pa.decimal128(7, 2), lambda i: Decimal(i * 1237 - 60000) / 100),
    "dec18": (pa.decimal128(15, 3), lambda i: Decimal((i * 10**11 + 7) * (-1) ** i) / 1000),
    "dec38": (pa.decimal128(25, 4), lambda i: Decimal((i * 10**20 + 13) * (-1) ** (i // 2)) / 10000),
}
# BYTE_STREAM_SPLIT applies to these physical types (not BOOLEAN); booleans get RLE.
_BSS_TYPES = ("INT32", "INT64", "FLOAT", "DOUBLE", "FIXED_LEN_BYTE_ARRAY")


def _table(nulls: str, rows: int = ROWS) -> pa.Table:
    arrays, fields = [], []
    for name, (t, f) in _COLUMNS.items():
        if nulls == "all":
            values = [None] * rows
        elif nulls == "some":
            values = [None if (i * 5) % 7 < 2 else f(i) for i in range(rows)]
        else:
            values = [f(i) for i in range(rows)]
        arrays.append(pa.array(values, t))
        fields.append(pa.field(name, t, nullable=nulls != "required"))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _write(table: pa.Table, encoding: str, version: str, **kw) -> bytes:
    sink = io.BytesIO()
    opts = dict(compression="none", data_page_version=version, data_page_size=64, write_batch_size=9,
                row_group_size=25, store_decimal_as_integer=version == "1.0")
    if encoding == "dict":
        opts["use_dictionary"] = True
    else:
        opts["use_dictionary"] = False
    if encoding == "bss":
        physical = {f.name: f.physical_type for f in pq.ParquetFile(_probe(table)).schema}
        opts["column_encoding"] = {
            name: "BYTE_STREAM_SPLIT" if physical[name] in _BSS_TYPES else "RLE" for name in table.column_names
        }
    opts.update(kw)
    pq.write_table(table, sink, **opts)
    return sink.getvalue()


def _probe(table: pa.Table) -> io.BytesIO:
    sink = io.BytesIO()
    pq.write_table(table.slice(0, 1), sink, store_decimal_as_integer=True)
    sink.seek(0)
    return sink


def _plan(buf: bytes) -> tuple[DecodePlan, np.ndarray]:
    """The plan of the whole file (every column on the GPU) and its ``data`` buffer."""
    plan = plan_file(buf)
    assert not any(plan.fallbacks), plan.fallbacks
    return plan, plan.gather(buf)


def _data_pages(plan: DecodePlan) -> np.ndarray:
    return plan.pages[plan.pages["kind"] != int(PageKind.DICTIONARY)]


def _check_equal(buf: bytes) -> None:
    plan, data = _plan(buf)
    decoded = decode_host(data, plan.chunks, plan.pages)
    assert decoded.pages["error"].tolist() == [0] * len(plan.pages)
    (got,) = assemble(decoded.out, decoded.out, decoded.chunks, plan)
    expected = pq.read_table(pa.BufferReader(buf))
    assert list(got) == expected.column_names
    for name in expected.column_names:
        assert got[name].equals(expected.column(name)), (name, got[name], expected.column(name))
        assert got[name].null_count == expected.column(name).null_count


@pytest.mark.parametrize("nulls", ["required", "none", "some", "all"])
@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("encoding", ["plain", "dict", "bss"])
def test_fixed_columns_equal_pyarrow(encoding, version, nulls):
    buf = _write(_table(nulls), encoding, version)
    used = {int(e) for e in _data_pages(_plan(buf)[0])["encoding"]}
    if encoding == "dict" and nulls != "all":
        assert used & {int(Encoding.RLE_DICTIONARY), int(Encoding.PLAIN_DICTIONARY)}
    if encoding == "bss" and nulls != "all":
        assert int(Encoding.BYTE_STREAM_SPLIT) in used and int(Encoding.RLE) in used
    _check_equal(buf)


def test_tiny_pages_start_mid_byte_of_the_bitmap():
    buf = _write(_table("some"), "plain", "1.0")
    plan, _ = _plan(buf)
    chunks, data = plan.chunks, _data_pages(plan)
    assert len(data) > len(chunks) and ((data["row_start"] - chunks["row_base"][data["chunk"]]) % 8 != 0).any()
    _check_equal(buf)


def test_a_page_whose_threads_each_count_over_255_values_equals_pyarrow():
    # Each thread of a page's block counts its segment's non-null values:
    # under the simulator's 8 threads, a page of 4,000 rows (2% null) gives
    # segments of about 490, past what a uint8 count holds.
    rng = np.random.default_rng(5)
    n = 4000
    table = pa.table({"d": pa.array(rng.integers(0, 9, n).astype(np.int32), mask=rng.random(n) < 0.02)})
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="none", use_dictionary=True)
    plan, _ = _plan(sink.getvalue())
    assert len(_data_pages(plan)) == 1
    _check_equal(sink.getvalue())


def test_measure_leaves_the_records_alone_and_state_closes():
    buf = _write(_table("some", rows=20), "dict", "2.0", row_group_size=100)
    plan, data = _plan(buf)
    chunks, pages = plan.chunks, plan.pages
    before = (chunks.copy(), pages.copy())
    from dask_hwdecomp.gpu.cuda_jit import cuda

    stream = cuda.stream()
    m = measure(data, chunks, pages, stream=stream)
    with m.state as state:
        assert isinstance(state, DecodeState) and state.valid is not None
        assert m.chunks["null_count"].sum() > 0 and m.pages["nonnull"].sum() > 0
    assert state.closed and state.valid is None and state.pages_d is None
    assert (chunks == before[0]).all() and (pages == before[1]).all()


# --- hostile pages --------------------------------------------------------------


def _single(name: str, nulls: str, encoding: str, version: str = "1.0", rows: int = 40) -> bytes:
    t, f = _COLUMNS[name]
    values = [None if nulls == "some" and i % 3 == 0 else f(i) for i in range(rows)]
    table = pa.Table.from_arrays([pa.array(values, t)], schema=pa.schema([pa.field(name, t, nulls != "required")]))
    return _write(table, encoding, version, data_page_size=1 << 20, row_group_size=1000)


def _first_data_page(pages) -> int:
    return int(np.flatnonzero(pages["kind"] != int(PageKind.DICTIONARY))[0])


def _hostile(buf: bytes, edit) -> np.ndarray:
    """Decode ``buf`` after ``edit(data, chunks, pages)``: each page's error, no exception."""
    plan, data = _plan(buf)
    chunks, pages = plan.chunks.copy(), plan.pages.copy()
    edit(data, chunks, pages)
    return decode_host(data, chunks, pages).pages["error"]


def test_levels_length_past_the_page():
    buf = _single("i32", "some", "plain")

    def edit(data, chunks, pages):
        p = _first_data_page(pages)
        data[pages[p]["offset"] : pages[p]["offset"] + 4] = np.frombuffer(np.uint32(1 << 30).tobytes(), np.uint8)

    assert _hostile(buf, edit)[0] == PageError.LEVELS


def test_levels_run_claiming_2_to_the_31_values():
    buf = _single("i32", "some", "plain")

    def edit(data, chunks, pages):
        off = int(pages[_first_data_page(pages)]["offset"]) + 4
        # bit-packed run of 2^28 groups: ULEB128 of (2^28 << 1) | 1
        data[off : off + 5] = [0x81, 0x80, 0x80, 0x80, 0x02]

    assert _hostile(buf, edit)[0] == PageError.LEVELS


def test_v2_levels_longer_than_the_page():
    buf = _single("i64", "some", "plain", "2.0")

    def edit(data, chunks, pages):
        pages[_first_data_page(pages)]["def_bytes"] = 1 << 20

    assert _hostile(buf, edit)[0] == PageError.LEVELS


def test_dictionary_index_out_of_range():
    buf = _single("f64", "some", "dict")

    def edit(data, chunks, pages):
        pages[int(chunks[0]["dict_page"])]["num_values"] = 1

    errors = _hostile(buf, edit)
    assert errors[_first_data_page(_plan(buf)[0].pages)] == PageError.DICT_INDEX


def test_dictionary_page_past_the_data():
    buf = _single("dec18", "required", "dict")

    def edit(data, chunks, pages):
        pages[int(chunks[0]["dict_page"])]["offset"] = len(data) - 8

    assert _hostile(buf, edit)[_first_data_page(_plan(buf)[0].pages)] == PageError.VALUES


def test_dictionary_page_missing():
    buf = _single("i32", "required", "dict")

    def edit(data, chunks, pages):
        chunks[0]["dict_page"] = -1

    assert PageError.DICT_INDEX in _hostile(buf, edit).tolist()


def test_bit_width_of_200():
    buf = _single("i64", "required", "dict")

    def edit(data, chunks, pages):
        data[pages[_first_data_page(pages)]["offset"]] = 200

    assert _hostile(buf, edit)[_first_data_page(_plan(buf)[0].pages)] == PageError.BIT_WIDTH


def test_dictionary_indices_cut_short():
    buf = _single("i32", "required", "dict")

    def edit(data, chunks, pages):
        pages[_first_data_page(pages)]["size"] = 3  # the bit width, a run header, one byte of indices

    assert _hostile(buf, edit)[_first_data_page(_plan(buf)[0].pages)] == PageError.VALUES


@pytest.mark.parametrize("name,encoding", [("i64", "plain"), ("flba", "bss"), ("b", "plain"), ("dec38", "plain")])
def test_values_shorter_than_the_page_needs(name, encoding):
    buf = _single(name, "required", encoding)

    def edit(data, chunks, pages):
        pages[_first_data_page(pages)]["size"] -= 2

    assert _hostile(buf, edit)[_first_data_page(_plan(buf)[0].pages)] == PageError.VALUES


def test_rle_boolean_length_past_the_page():
    buf = _single("b", "some", "bss", "2.0")

    def edit(data, chunks, pages):
        p = _first_data_page(pages)
        assert pages[p]["encoding"] == Encoding.RLE
        start = int(pages[p]["offset"] + pages[p]["def_bytes"])
        data[start : start + 4] = [0xFF, 0xFF, 0, 0]

    assert _hostile(buf, edit)[0] == PageError.VALUES


def test_page_rows_past_the_chunk():
    buf = _single("i32", "required", "plain")

    def edit(data, chunks, pages):
        pages[_first_data_page(pages)]["num_values"] += 5

    assert _hostile(buf, edit)[0] == PageError.COUNT


def test_body_past_the_data():
    buf = _single("u16", "required", "plain")

    def edit(data, chunks, pages):
        pages[_first_data_page(pages)]["offset"] = len(data) - 3

    assert _hostile(buf, edit)[0] == PageError.VALUES


@pytest.mark.parametrize("encoding", [Encoding.DELTA_BYTE_ARRAY, Encoding.BIT_PACKED, Encoding.DELTA_BINARY_PACKED])
def test_encoding_not_for_the_kind(encoding):
    buf = _single("f32", "some", "plain")

    def edit(data, chunks, pages):
        pages[_first_data_page(pages)]["encoding"] = encoding

    assert _hostile(buf, edit)[0] == PageError.ENCODING


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_dictionary_fallback_to_plain_within_a_chunk(version):
    table = _table("some", rows=60).select(["i64", "f32", "dec38", "u16"])
    buf = _write(table, "dict", version, dictionary_pagesize_limit=64, row_group_size=1000)
    used = {int(e) for e in _data_pages(_plan(buf)[0])["encoding"]}
    assert int(Encoding.PLAIN) in used and used & {int(Encoding.RLE_DICTIONARY), int(Encoding.PLAIN_DICTIONARY)}
    _check_equal(buf)


def test_delta_byte_array_of_fixed_len_byte_array_is_left_to_the_byte_array_kernels():
    buf = _single("flba", "required", "plain")

    def edit(data, chunks, pages):
        pages[_first_data_page(pages)]["encoding"] = Encoding.DELTA_BYTE_ARRAY

    assert _hostile(buf, edit)[0] not in (PageError.OK, PageError.ENCODING)  # PLAIN bytes are no DELTA header


@pytest.mark.parametrize("levels,refused", [(b"\x03\x00", False), (b"\x02\x00", False), (b"\x05\x00", True),
                                            (b"\x07\x00", True), (b"\x23\x40", True), (b"\x03\x01", True)])
def test_a_bit_packed_level_run_claiming_more_bytes_than_its_levels_hold_is_refused_as_pyarrow_refuses(
        tmp_path, levels, refused):
    # One null in a v2 page: its definition levels are 2 bytes. A bit-packed
    # run of 2 or more groups (0x05, 0x07, 0x23) has one byte where it
    # declares 2 or more; pyarrow refuses the page although the one level it
    # needs is there (a mutated corpus file's case, found on the GPU).
    from dask_hwdecomp.format.structs import PageType

    from rewrite import rewrite_pages

    src, dst = tmp_path / "src.parquet", tmp_path / "dst.parquet"
    pq.write_table(pa.table({"v": pa.array([None], pa.float32())}), src, compression="none",
                   data_page_version="2.0", use_dictionary=False)

    def transform(p):
        if p.page.page_type != PageType.DATA_PAGE_V2:
            return p.header, p.body
        assert p.page.levels_size == len(levels)
        return p.header, levels + p.values

    rewrite_pages(src, dst, transform)
    buf = dst.read_bytes()
    with pytest.raises(Exception) if refused else contextlib.nullcontext():
        pq.read_table(pa.BufferReader(buf))
    plan, data = _plan(buf)
    errors = decode_host(data, plan.chunks, plan.pages).pages["error"]
    assert bool(errors.any()) == refused, errors
