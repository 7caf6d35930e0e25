"""Assembling pyarrow arrays over the GPU decoder's host output (on the CPU, outputs built by hand)."""

from __future__ import annotations

import decimal
import gc
import io
import weakref

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dask_hwdecomp.errors import HwdecompError, PageLocation
from dask_hwdecomp.gpudecode.assemble import assemble
from dask_hwdecomp.gpudecode.plan import ChunkColumn, DecodePlan, plan_batch, plan_file
from dask_hwdecomp.gpudecode.tables import CHUNK, PAGE, OutKind, Physical, place_outputs
from dask_hwdecomp.gpudecode.types import GpuColumn

from helpers import tables_equal


class Owner:
    """Stands for the shared-memory block the output lies in."""

    def __init__(self, size: int):
        self.memory = np.zeros(size, np.uint8)


def _plan(columns: list[tuple[str, pa.DataType, OutKind, int, int]], rows: list[int]) -> DecodePlan:
    """A one-image plan: each column (name, type, kind, width, max_def) in every row group of ``rows``."""
    gpu = {name: GpuColumn(name, kind, width, Physical.INT32, 0, max_def, t)
           for name, t, kind, width, max_def in columns}
    chunks = np.zeros(len(columns) * len(rows), CHUNK)
    infos = []
    k = 0
    for rg, n in enumerate(rows):
        for name, t, kind, width, max_def in columns:
            chunks[k]["kind"], chunks[k]["width"], chunks[k]["max_def"], chunks[k]["num_rows"] = kind, width, max_def, n
            infos.append(ChunkColumn(0, rg, name, t, PageLocation("f", rg, name)))
            k += 1
    return DecodePlan(chunks, np.zeros(0, PAGE), np.zeros((0, 3), np.int64), 0, tuple(infos), (gpu,), ({},))


def _put(mem: np.ndarray, at: int, data: bytes) -> None:
    mem[at : at + len(data)] = np.frombuffer(data, np.uint8)


def test_every_kind_by_hand():
    cols = [
        ("i8", pa.int8(), OutKind.NARROW, 1, 1),
        ("u16", pa.uint16(), OutKind.NARROW, 2, 0),
        ("ts", pa.timestamp("ms", tz="Asia/Tokyo"), OutKind.COPY, 8, 1),
        ("fsb", pa.binary(3), OutKind.COPY, 3, 0),
        ("dec", pa.decimal128(5, 2), OutKind.DECIMAL, 16, 1),
        ("b", pa.bool_(), OutKind.BOOL, 0, 1),
        ("s", pa.string(), OutKind.BYTES, 4, 1),
        ("lb", pa.large_binary(), OutKind.BYTES, 8, 0),
    ]
    plan = _plan(cols, [3])
    chunks = plan.chunks.copy()
    chunks["null_count"] = [1, 0, 0, 0, 1, 1, 1, 0]
    chunks["data_bytes"] = [0, 0, 0, 0, 0, 0, 5, 4]
    size = place_outputs(chunks)
    owner = Owner(size)
    mem = owner.memory
    c = {name: chunks[i] for i, (name, *_rest) in enumerate(cols)}
    valid_101 = bytes([0b101])
    _put(mem, c["i8"]["out_valid"], valid_101)
    _put(mem, c["i8"]["out_values"], bytes([1, 0, 0xFF]))
    _put(mem, c["u16"]["out_values"], np.array([1, 65535, 7], "<u2").tobytes())
    _put(mem, c["ts"]["out_values"], np.array([0, -1, 86_400_000], "<i8").tobytes())
    _put(mem, c["fsb"]["out_values"], b"abcdefghi")
    _put(mem, c["dec"]["out_valid"], bytes([0b011]))
    _put(mem, c["dec"]["out_values"], (-5).to_bytes(16, "little", signed=True) + (12345).to_bytes(16, "little")
         + bytes(16))
    _put(mem, c["b"]["out_valid"], bytes([0b110]))
    _put(mem, c["b"]["out_values"], bytes([0b100]))
    _put(mem, c["s"]["out_valid"], valid_101)
    _put(mem, c["s"]["out_values"], np.array([0, 2, 2, 5], "<i4").tobytes())
    _put(mem, c["s"]["out_data"], b"abcde")
    _put(mem, c["lb"]["out_values"], np.array([0, 0, 1, 4], "<i8").tobytes())
    _put(mem, c["lb"]["out_data"], b"\x00xyz")
    (got,) = assemble(mem, owner, chunks, plan)
    expect = {
        "i8": pa.array([1, None, -1], pa.int8()),
        "u16": pa.array([1, 65535, 7], pa.uint16()),
        "ts": pa.array([0, -1, 86_400_000], pa.timestamp("ms", tz="Asia/Tokyo")),
        "fsb": pa.array([b"abc", b"def", b"ghi"], pa.binary(3)),
        "dec": pa.array([decimal.Decimal("-0.05"), decimal.Decimal("123.45"), None], pa.decimal128(5, 2)),
        "b": pa.array([None, False, True]),
        "s": pa.array(["ab", None, "cde"]),
        "lb": pa.array([b"", b"\x00", b"xyz"], pa.large_binary()),
    }
    assert list(got) == [name for name, *_rest in cols]
    for name, arr in got.items():
        assert arr.num_chunks == 1
        chunk = arr.chunk(0)
        chunk.validate(full=True)
        assert chunk.equals(expect[name]), name
        assert chunk.type == expect[name].type
        assert chunk.null_count == expect[name].null_count
        if chunk.null_count == 0:
            assert chunk.buffers()[0] is None
    # no copy: the values are the output's bytes
    assert got["u16"].chunk(0).buffers()[1].address == mem.ctypes.data + int(c["u16"]["out_values"])
    mem[c["u16"]["out_values"]] = 9
    assert got["u16"].chunk(0)[0].as_py() == 9


def test_buffers_keep_the_owner_alive_exactly_as_long_as_an_array():
    plan = _plan([("x", pa.int32(), OutKind.COPY, 4, 1), ("s", pa.string(), OutKind.BYTES, 4, 1)], [4, 2])
    chunks = plan.chunks.copy()
    chunks["null_count"] = [1, 0, 0, 1]
    chunks["data_bytes"] = [0, 3, 0, 0]
    owner = Owner(place_outputs(chunks))
    c = chunks
    _put(owner.memory, c[0]["out_valid"], bytes([0b1110]))
    _put(owner.memory, c[1]["out_values"], np.array([0, 1, 1, 2, 3], "<i4").tobytes())
    _put(owner.memory, c[1]["out_data"], b"abc")
    _put(owner.memory, c[3]["out_valid"], bytes([0b01]))
    _put(owner.memory, c[3]["out_values"], np.array([0, 0, 0], "<i4").tobytes())
    alive = weakref.ref(owner)
    (got,) = assemble(memoryview(owner.memory), owner, chunks, plan)
    del owner
    gc.collect()
    assert got["x"].num_chunks == 2 and got["x"].to_pylist() == [None, 0, 0, 0, 0, 0]
    assert got["s"].to_pylist() == ["a", "", "b", "c", "", None]
    table = pa.table(got)
    del got
    gc.collect()
    assert alive() is not None  # the table holds the arrays
    last = table.column("s").chunk(1).slice(1)
    del table
    gc.collect()
    assert alive() is not None  # a slice of one array still holds it
    del last
    gc.collect()
    assert alive() is None


def test_records_outside_the_output_are_refused():
    plan = _plan([("x", pa.int64(), OutKind.COPY, 8, 0)], [10])
    chunks = plan.chunks.copy()
    place_outputs(chunks)
    owner = Owner(10 * 8 - 1)  # one byte short of the values
    with pytest.raises(ValueError, match="outside"):
        assemble(owner.memory, owner, chunks, plan)
    with pytest.raises(ValueError, match="chunk records"):
        assemble(owner.memory, owner, chunks[:0], plan)


def _reference_output(buf: bytes, plan: DecodePlan, chunks: np.ndarray):
    """The output the GPU would write, from pyarrow's own arrays of each chunk."""
    pf = pq.ParquetFile(io.BytesIO(buf))
    refs = []
    for rec, info in zip(chunks, plan.columns):
        arr = pf.read_row_group(info.row_group, columns=[info.name]).column(0).combine_chunks()
        rec["null_count"] = arr.null_count
        if rec["kind"] == OutKind.BYTES:
            offsets = np.frombuffer(arr.buffers()[1], np.int32 if rec["width"] == 4 else np.int64)
            rec["data_bytes"] = int(offsets[len(arr)]) if len(arr) else 0
        refs.append(arr)
    owner = Owner(place_outputs(chunks))
    for rec, arr in zip(chunks, refs):
        assert arr.offset == 0
        bufs = arr.buffers()
        rows = len(arr)
        if arr.null_count:
            _put(owner.memory, rec["out_valid"], bufs[0].to_pybytes()[: (rows + 7) // 8])
        kind = int(rec["kind"])
        if kind == OutKind.BOOL:
            _put(owner.memory, rec["out_values"], bufs[1].to_pybytes()[: (rows + 7) // 8])
        elif kind == OutKind.BYTES:
            _put(owner.memory, rec["out_values"], bufs[1].to_pybytes()[: (rows + 1) * int(rec["width"])])
            _put(owner.memory, rec["out_data"], bufs[2].to_pybytes()[: int(rec["data_bytes"])] if bufs[2] else b"")
        else:
            _put(owner.memory, rec["out_values"], bufs[1].to_pybytes()[: rows * int(rec["width"])])
    return owner


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_planned_files_assemble_to_pyarrows_table(version):
    n = 250
    rng = np.random.default_rng(3)
    ints = rng.integers(-1000, 1000, n)
    mask = ints % 4 == 0
    table = pa.table({
        "i8": pa.array(ints % 100, pa.int8(), mask=mask),
        "u32": pa.array(np.abs(ints), pa.uint32()),
        "f64": pa.array(ints / 3, mask=mask),
        "b": pa.array(ints > 0, mask=mask),
        "s": pa.array([str(i) for i in ints], mask=mask),
        "ls": pa.array([str(i) * 3 for i in ints], pa.large_string()),
        "dec": pa.array([decimal.Decimal(int(i)).scaleb(-3) for i in ints], pa.decimal128(9, 3), mask=mask),
        "ts": pa.array(ints, pa.timestamp("ns", tz="UTC"), mask=mask),
        "h": pa.array(ints.astype(np.float16), pa.float16()),
        "fsb": pa.array([bytes([abs(i) % 256]) * 2 for i in ints], pa.binary(2), mask=mask),
        "nested": pa.array([[int(i)] for i in ints]),
    })
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="none", row_group_size=100, data_page_version=version)
    buf = sink.getvalue()
    plan = plan_file(buf)
    assert plan.fallbacks == ({"nested": "nested column"},)
    chunks = plan.chunks.copy()
    owner = _reference_output(buf, plan, chunks)
    (got,) = assemble(owner.memory, owner, chunks, plan)
    expect = pq.read_table(io.BytesIO(buf))
    assert list(got) == [name for name in table.column_names if name != "nested"]
    for name, arr in got.items():
        assert arr.num_chunks == 3
        for chunk in arr.chunks:
            chunk.validate(full=True)
        assert arr.type == expect.schema.field(name).type
        assert arr.equals(expect.column(name)), name


def test_corpus_images_plan_and_assemble_to_pyarrows_columns(corpus):
    """Every readable parquet-testing file, decompressed into images in batches, planned and assembled.

    The output is built from pyarrow's own arrays of each planned chunk, so
    this checks what the planner decides per column (the Arrow type, the
    output kind and width, the row space), not the kernels.
    """
    from fsspec.implementations.local import LocalFileSystem

    from dask_hwdecomp.options import Options
    from dask_hwdecomp.readpath.batch import decompress_batch
    from dask_hwdecomp.readpath.plan import Piece, plan_piece
    from dask_hwdecomp.report import ReadReport
    from dask_hwdecomp.routing.router import Router

    fs = LocalFileSystem()
    options = Options(backend="cpu")
    plans = []
    refused = {"incorrect_map_schema.parquet", "large_string_map.brotli.parquet"}  # by pyarrow (test_corpus)
    for path in sorted((corpus / "data").glob("*.parquet")):
        if path.name in refused:
            continue
        try:
            plan = plan_piece(fs, Piece(str(path)), None)
        except HwdecompError:  # files this reader refuses have their own tests
            continue
        if plan.unsupported is None:
            plans.append(plan)
    assert len(plans) > 50
    gpu_columns = 0
    for at in range(0, len(plans), 16):
        with decompress_batch(fs, plans[at : at + 16], Router(options), options, ReadReport()) as batch:
            plan = plan_batch(batch.images)
            chunks = plan.chunks.copy()
            starts = chunks["row_base"]
            assert np.array_equal(starts, np.cumsum(chunks["num_rows"]) - chunks["num_rows"])
            pages = plan.pages
            assert (pages["offset"] + pages["size"] <= plan.data_bytes).all()
            # each image's output from pyarrow's arrays of the image's chunks
            for i, image in enumerate(batch.images):
                mine = [k for k, c in enumerate(plan.columns) if c.image == i]
                columns = tuple(ChunkColumn(0, c.row_group, c.name, c.arrow_type, c.location)
                                for c in (plan.columns[k] for k in mine))
                sub = DecodePlan(chunks[mine], pages[:0], plan.ranges[:0], 0, columns, (plan.gpu_columns[i],),
                                 (plan.fallbacks[i],))
                sub_chunks = sub.chunks.copy()
                owner = _reference_output(image.buffer, sub, sub_chunks)
                (got,) = assemble(owner.memory, owner, sub_chunks, sub)
                want = pq.read_table(pa.BufferReader(image.buffer))
                for name, arr in got.items():
                    diff = tables_equal(pa.table({name: arr}), pa.table({name: want.column(name)}))
                    assert diff is None, (image.plan.piece.path, name, diff)
                    gpu_columns += 1
    assert gpu_columns > 100
