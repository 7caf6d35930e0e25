"""GPU kernels for byte arrays and the DELTA encodings, under numba's CUDA simulator, against pyarrow.

Files written by pyarrow are planned by ``plan.plan_file``, decoded by
``runner.decode_host`` (which calls these kernels) and assembled by
``assemble.assemble``; hostile pages are hand-made PAGE records through the
same runner. DELTA_BYTE_ARRAY on FIXED_LEN_BYTE_ARRAY, which the planner
does not claim yet, goes through a host stand-in of the runner's first
measure steps (levels, value indices) written here.
"""

from __future__ import annotations

import ctypes
import io
import os
import warnings
from types import SimpleNamespace

if "NUMBA_ENABLE_CUDASIM" not in os.environ:
    # Without a CUDA driver the kernels run in numba's simulator; it must
    # be chosen before numba.cuda is first imported.
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from numba import cuda

from dask_hwdecomp.format.structs import DataPageHeaderV2, PageHeader, PageType
from dask_hwdecomp.format.thrift import decode_struct
from dask_hwdecomp.gpudecode import kernels_bytes_measure, kernels_bytes_write, kernels_delta, runner
from dask_hwdecomp.gpudecode.assemble import assemble as assemble_plan
from dask_hwdecomp.gpudecode.plan import plan_file
from dask_hwdecomp.gpudecode.tables import (
    CHUNK,
    PAGE,
    Encoding,
    OutKind,
    PageError,
    PageKind,
    Physical,
    place_outputs,
)

# uint64 arithmetic wraps on purpose; the simulator runs it with numpy scalars.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
warnings.filterwarnings("ignore", "overflow encountered", RuntimeWarning)


# --------------------------------------------------------------------------
# host stand-in (FIXED_LEN_BYTE_ARRAY only): plan + the measure steps before these kernels
# --------------------------------------------------------------------------

def _uleb(b, pos):
    v = shift = 0
    while True:
        x = b[pos]
        pos += 1
        v |= (x & 0x7F) << shift
        if x < 0x80:
            return v, pos
        shift += 7


def _hybrid(b, pos, end, bw, n):
    """n values of the RLE/bit-packed hybrid at b[pos:end]."""
    out = []
    while len(out) < n:
        h, pos = _uleb(b, pos)
        if h & 1:
            groups = h >> 1
            nbytes = groups * bw
            bits = int.from_bytes(bytes(b[pos:pos + nbytes]), "little")
            pos += nbytes
            for k in range(groups * 8):
                out.append((bits >> (k * bw)) & ((1 << bw) - 1))
        else:
            nb = (bw + 7) // 8
            v = int.from_bytes(bytes(b[pos:pos + nb]), "little")
            pos += nb
            out.extend([v] * (h >> 1))
    assert pos <= end
    return out[:n]


def _kind_of(typ: pa.DataType, physical: int, type_length: int):
    if pa.types.is_large_string(typ) or pa.types.is_large_binary(typ):
        return OutKind.BYTES, 8
    if pa.types.is_string(typ) or pa.types.is_binary(typ):
        return OutKind.BYTES, 4
    if pa.types.is_decimal(typ):
        return OutKind.DECIMAL, 16
    width = typ.bit_width // 8
    if physical == Physical.INT32 and width < 4:
        return OutKind.NARROW, width
    return OutKind.COPY, width


def plan(buf: bytes, typ: pa.DataType):
    """CHUNK/PAGE records of every row group of a one-column file, plus the stand-in's per-row arrays."""
    meta = pq.ParquetFile(io.BytesIO(buf)).metadata
    col = meta.schema.column(0)
    physical = int(Physical[col.physical_type])
    max_def = col.max_definition_level
    kind, width = _kind_of(typ, physical, col.length or 0)
    chunks, pages = [], []
    valid, vindex, idx, row_page = [], [], [], []
    vstart, vend = [], []
    row_base = dict_base = 0
    for g in range(meta.num_row_groups):
        cc = meta.row_group(g).column(0)
        start = cc.dictionary_page_offset if cc.has_dictionary_page else cc.data_page_offset
        end = start + cc.total_compressed_size
        ch = dict(kind=kind, physical=physical, type_length=col.length or 0, width=width, max_def=max_def,
                  dict_page=-1, first_page=-1, num_pages=0, num_rows=meta.row_group(g).num_rows,
                  row_base=row_base, dict_base=dict_base, null_count=0, data_bytes=0)
        pos = start
        row = row_base
        dict_n = 0
        while pos < end:
            hdr, body = decode_struct(buf, pos, end)
            ptype = hdr.get_value(PageHeader.type)
            size = hdr.get_value(PageHeader.compressed_page_size)
            rec = dict(chunk=len(chunks), offset=body, size=size, row_start=row, def_bytes=-1, error=0)
            if ptype == PageType.DICTIONARY_PAGE:
                sub = hdr.get_value(PageHeader.dictionary_page_header)
                dict_n = sub.get_value(1)
                rec.update(kind=PageKind.DICTIONARY, encoding=sub.get_value(2), num_values=dict_n, nonnull=dict_n)
                ch["dict_page"] = len(pages)
                vstart.append(body)
                vend.append(body + size)
            else:
                if ptype == PageType.DATA_PAGE:
                    sub = hdr.get_value(PageHeader.data_page_header)
                    n, enc, pk = sub.get_value(1), sub.get_value(2), PageKind.DATA_V1
                else:
                    sub = hdr.get_value(PageHeader.data_page_header_v2)
                    n, enc, pk = sub.get_value(DataPageHeaderV2.num_values), sub.get_value(4), PageKind.DATA_V2
                    rec["def_bytes"] = sub.get_value(DataPageHeaderV2.definition_levels_byte_length)
                vs = body
                if max_def == 0:
                    levels = [1] * n
                elif pk == PageKind.DATA_V1:
                    ln = int.from_bytes(buf[body:body + 4], "little")
                    levels = _hybrid(buf, body + 4, body + 4 + ln, 1, n)
                    vs = body + 4 + ln
                else:
                    levels = _hybrid(buf, body, body + rec["def_bytes"], 1, n)
                    vs = body + rec["def_bytes"]
                nonnull = sum(levels)
                k = 0
                page_idx = [0] * n
                if enc in (2, 8):
                    bw = buf[vs]
                    ids = _hybrid(buf, vs + 1, body + size, bw, nonnull) if bw else [0] * nonnull
                    it = iter(ids)
                    page_idx = [next(it) if lv else 0 for lv in levels]
                for lv in levels:
                    vindex.append(k if lv else 0)
                    k += lv
                valid.extend(levels)
                row_page.extend([len(pages)] * n)
                idx.extend(page_idx)
                rec.update(kind=pk, encoding=enc, num_values=n, nonnull=nonnull)
                ch["null_count"] += n - nonnull
                if ch["first_page"] < 0:
                    ch["first_page"] = len(pages)
                ch["num_pages"] += 1
                row += n
                vstart.append(vs)
                vend.append(body + size)
            pages.append(rec)
            pos = body + size
        chunks.append(ch)
        row_base += ch["num_rows"]
        dict_base += dict_n
    crec = np.zeros(len(chunks), CHUNK)
    for i, ch in enumerate(chunks):
        for key, v in ch.items():
            crec[i][key] = v
    prec = np.zeros(len(pages), PAGE)
    for i, pg in enumerate(pages):
        for key, v in pg.items():
            prec[i][key] = v
    extra = SimpleNamespace(valid=np.array(valid, np.uint8), vindex=np.array(vindex, np.int32),
                            row_page=np.array(row_page, np.int32), idx=np.array(idx, np.int32), vstart=np.array(vstart, np.int64),
                            vend=np.array(vend, np.int64), total_dict=dict_base)
    return crec, prec, extra


def decode(buf: bytes, chunks, pages, extra, string_rows=None):
    """measure -> place -> write through the kernels here; returns (chunks, pages, out).

    ``string_rows``: rows of the per-row string scratch (default: every row).
    """
    n = max(1, len(extra.valid))
    m = n if string_rows is None else string_rows
    bytes_row, bytes_at = runner.bytes_chunk_rows(chunks)
    state = SimpleNamespace(
        data=cuda.to_device(np.frombuffer(buf, np.uint8)), chunks_d=cuda.to_device(chunks),
        pages_d=cuda.to_device(pages), valid=cuda.to_device(extra.valid), vindex=cuda.to_device(extra.vindex),
        row_page=cuda.to_device(extra.row_page),
        idx=cuda.to_device(extra.idx), vstart=cuda.to_device(extra.vstart), vend=cuda.to_device(extra.vend),
        lengths=cuda.device_array(m, np.int64), str_src=cuda.device_array(m, np.int64),
        dict_off=cuda.device_array(max(1, extra.total_dict), np.int64),
        dict_len=cuda.device_array(max(1, extra.total_dict), np.int32), has_dba=True, stream=0,
        sa=cuda.device_array(n, np.uint64), sb=cuda.device_array(n, np.uint64),
        page_bytes=cuda.device_array(len(pages), np.int64), page_base=cuda.device_array(len(pages), np.int64),
        bytes_row=cuda.to_device(bytes_row), bytes_at=cuda.to_device(bytes_at), bytes_rows=int(bytes_at[-1]))
    kernels_bytes_measure.measure_bytes(state)
    kernels_delta.measure_delta(state)
    chunks = state.chunks_d.copy_to_host()
    pages = state.pages_d.copy_to_host()
    if pages["error"].any():
        return chunks, pages, None
    size = place_outputs(chunks)
    state.chunks_d = cuda.to_device(chunks)
    out = cuda.to_device(np.zeros(size, np.uint8))
    kernels_bytes_write.write_bytes(state, out)
    kernels_delta.write_delta(state, out)
    return chunks, state.pages_d.copy_to_host(), out.copy_to_host()


def assemble(chunks, out: np.ndarray, typ: pa.DataType) -> pa.ChunkedArray:
    arrays = []
    for c in chunks:
        rows = int(c["num_rows"])
        validity = None
        if c["max_def"]:
            validity = pa.py_buffer(out[c["out_valid"]:c["out_valid"] + (rows + 7) // 8].tobytes())
        vals = out[c["out_values"]:].tobytes()
        bufs = [validity, pa.py_buffer(vals[:rows * int(c["width"]) + (int(c["width"]) if c["kind"] == OutKind.BYTES
                                                                          else 0)])]
        if c["kind"] == OutKind.BYTES:
            bufs.append(pa.py_buffer(out[c["out_data"]:c["out_data"] + c["data_bytes"]].tobytes()))
        arrays.append(pa.Array.from_buffers(typ, rows, bufs, null_count=int(c["null_count"])))
    return pa.chunked_array(arrays, typ)


def _validity(chunks, valid, out):
    """The stand-in's validity bitmaps (gd-core's kernel writes them in the runner)."""
    for c in chunks:
        if c["max_def"]:
            rb, rows = int(c["row_base"]), int(c["num_rows"])
            bits = np.packbits(valid[rb:rb + rows].astype(bool), bitorder="little")
            out[c["out_valid"]:c["out_valid"] + len(bits)] = bits


def _check_encodings(pages, write):
    """The data pages carry the encoding the case means to test."""
    data_encodings = set(pages["encoding"][pages["kind"] != PageKind.DICTIONARY].tolist())
    if "column_encoding" in write:
        assert data_encodings == {int(Encoding[write["column_encoding"]["x"]])}
    elif write.get("use_dictionary"):
        assert data_encodings <= {int(Encoding.RLE_DICTIONARY), int(Encoding.PLAIN_DICTIONARY)}


def roundtrip(table: pa.Table, **write):
    """Write ``table``, plan, decode with the runner, assemble; equal to pyarrow's read."""
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="none", **write)
    buf = sink.getvalue()
    plan = plan_file(buf)
    assert "x" in plan.gpu_columns[0], plan.fallbacks
    _check_encodings(plan.pages, write)
    dec = runner.decode_host(plan.gather(buf), plan.chunks, plan.pages)
    assert not dec.pages["error"].any(), dec.pages["error"]
    got = assemble_plan(dec.out, dec.out, dec.chunks, plan)[0]["x"]
    want = pq.read_table(io.BytesIO(buf)).column(0)
    assert got.type == want.type
    assert got.to_pylist() == want.to_pylist()
    got.validate(full=True)
    return dec.chunks, dec.pages


def roundtrip_standin(table: pa.Table, **write):
    """:func:`roundtrip` through the host stand-in (columns the planner leaves to pyarrow)."""
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="none", **write)
    buf = sink.getvalue()
    typ = table.schema.field(0).type
    chunks, pages, extra = plan(buf, typ)
    _check_encodings(pages, write)
    chunks, pages, out = decode(buf, chunks, pages, extra)
    assert not pages["error"].any(), pages["error"]
    _validity(chunks, extra.valid, out)
    got = assemble(chunks, out, typ)
    want = pq.read_table(io.BytesIO(buf)).column(0)
    assert got.type == want.type
    assert got.to_pylist() == want.to_pylist()
    got.validate(full=True)
    return chunks, pages


def _nulls(values, mode, rng):
    if mode == "none":
        return values
    if mode == "all":
        return [None] * len(values)
    return [None if rng.random() < 0.3 else v for v in values]


# --------------------------------------------------------------------------
# DELTA_BINARY_PACKED integers
# --------------------------------------------------------------------------

INT_CASES = [
    (pa.int32(), -(2**31), 2**31 - 1),
    (pa.int64(), -(2**63), 2**63 - 1),
    (pa.int8(), -128, 127),
    (pa.uint8(), 0, 255),
    (pa.int16(), -(2**15), 2**15 - 1),
    (pa.uint16(), 0, 2**16 - 1),
    (pa.uint32(), 0, 2**32 - 1),
    (pa.uint64(), 0, 2**64 - 1),
]


@pytest.mark.parametrize("typ,lo,hi", INT_CASES, ids=lambda x: str(x))
@pytest.mark.parametrize("nulls,version", [("none", "1.0"), ("some", "2.0")])
def test_delta_binary_packed_ints(typ, lo, hi, nulls, version):
    """Small deltas, then the type's extremes side by side (deltas that wrap), then random values; tiny pages."""
    rng = np.random.default_rng(7)
    small = [int(v) for v in rng.integers(max(lo, -50), min(hi, 50), 200)]
    vals = small[:40] + [lo, hi, lo, hi, hi, lo]
    vals += [int(v) for v in rng.integers(lo, hi, 40, dtype=np.int64 if lo < 0 else np.uint64)] + small[40:100]
    table = pa.table({"x": pa.array(_nulls(vals, nulls, rng), typ)},
                     schema=pa.schema([pa.field("x", typ, nullable=nulls != "none")]))
    roundtrip(table, use_dictionary=False, column_encoding={"x": "DELTA_BINARY_PACKED"}, data_page_version=version,
              data_page_size=300)


@pytest.mark.parametrize("typ", [pa.int32(), pa.int64()], ids=str)
def test_delta_binary_packed_all_null(typ):
    table = pa.table({"x": pa.array([None] * 50, typ)})
    roundtrip(table, use_dictionary=False, column_encoding={"x": "DELTA_BINARY_PACKED"}, data_page_version="1.0")


@pytest.mark.parametrize("typ", [pa.decimal128(9, 2), pa.decimal128(18, 3)], ids=str)
def test_delta_binary_packed_decimals(typ):
    """Decimals stored as INT32 / INT64, sign-extended to 16 bytes."""
    from decimal import Decimal

    scale = typ.scale
    top = 10 ** typ.precision - 1
    ints = [0, 1, -1, top, -top, top, -top] + list(range(-40, 40, 3))
    vals = [None if i % 7 == 3 else Decimal(f"{v}e-{scale}") for i, v in enumerate(ints)]
    table = pa.table({"x": pa.array(vals, typ)})
    chunks, _pages = roundtrip(table, use_dictionary=False, column_encoding={"x": "DELTA_BINARY_PACKED"},
                               store_decimal_as_integer=True, data_page_size=100)
    assert chunks[0]["physical"] == (Physical.INT32 if typ.precision <= 9 else Physical.INT64)


@pytest.mark.parametrize("block,mbs", [(128, 1), (256, 2), (128, 4), (256, 8)])
def test_delta_binary_packed_block_shapes(block, mbs):
    """Block shapes pyarrow does not write: several tiles a block, miniblocks of 32 to 256 values."""
    rng = np.random.default_rng(block + mbs)
    values = [int(v) for v in rng.integers(-(2**63), 2**63 - 1, 300, dtype=np.int64)]
    values[100:140] = range(40)
    chunks, pages, out = hand_decode(*hand_page(dbp(values, block=block, mbs=mbs), 5, pa.int64(), len(values)))
    assert not pages["error"].any()
    assert assemble(chunks, out, pa.int64()).to_pylist() == values


# --------------------------------------------------------------------------
# byte arrays
# --------------------------------------------------------------------------

BYTE_TYPES = [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()]
BYTE_ENCODINGS = ["PLAIN", "DICT", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY"]


def _strings(n, rng):
    stems = ["", "a", "apple", "applesauce", "apply", "banana", "band", "bandana", "zz" * 40, "\u00e9t\u00e9"]
    out = []
    for _ in range(n):
        s = stems[int(rng.integers(len(stems)))]
        if rng.random() < 0.4:
            s += str(int(rng.integers(1000)))
        out.append(s)
    return out


def _write_args(encoding, version, page_size):
    if encoding == "DICT":
        return dict(use_dictionary=True, data_page_version=version, data_page_size=page_size)
    return dict(use_dictionary=False, column_encoding={"x": encoding}, data_page_version=version,
                data_page_size=page_size)


def _byte_table(typ, nulls, n, seed=3):
    rng = np.random.default_rng(seed)
    vals = _strings(n, rng)
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        vals = [v.encode() for v in vals]
    vals = _nulls(vals, nulls, rng)
    return pa.table({"x": pa.array(vals, typ)},
                    schema=pa.schema([pa.field("x", typ, nullable=nulls != "none")]))


@pytest.mark.parametrize("typ", BYTE_TYPES, ids=str)
@pytest.mark.parametrize("encoding", BYTE_ENCODINGS)
def test_byte_arrays(typ, encoding):
    """Some nulls, empty strings, shared prefixes, tiny pages; v1 and v2 pages alternate over the types."""
    table = _byte_table(typ, "some", 70)
    roundtrip(table, **_write_args(encoding, "1.0" if BYTE_TYPES.index(typ) % 2 else "2.0", 200))


@pytest.mark.parametrize("encoding", BYTE_ENCODINGS)
@pytest.mark.parametrize("nulls,version", [("none", "2.0"), ("all", "1.0")])
def test_byte_arrays_null_extremes(encoding, nulls, version):
    table = _byte_table(pa.string(), nulls, 60)
    roundtrip(table, **_write_args(encoding, version, 128))


@pytest.mark.parametrize("typ", [pa.binary(3), pa.decimal128(5, 1), pa.decimal128(20, 2), pa.decimal128(38, 4)],
                         ids=str)
def test_delta_byte_array_fixed_length(typ):
    """DELTA_BYTE_ARRAY on FIXED_LEN_BYTE_ARRAY: fixed_size_binary as it is, decimals sign-extended to 16 bytes."""
    from decimal import Decimal

    rng = np.random.default_rng(5)
    if pa.types.is_decimal(typ):
        top = 10 ** typ.precision - 1
        ints = [0, 1, -1, top, -top, 255, -256, 65535] + [top * int(rng.integers(-999, 999)) // 1000 for _ in range(60)]
        vals = [Decimal(f"{v}e-{typ.scale}") for v in ints]
    else:
        vals = [bytes([97 + int(rng.integers(3)), 98, 97 + int(rng.integers(3))]) for _ in range(68)]
    table = pa.table({"x": pa.array(_nulls(vals, "some", rng), typ)})
    roundtrip_standin(table, **_write_args("DELTA_BYTE_ARRAY", "2.0", 150))


@pytest.mark.parametrize("lo,hi", [(0, 4), (30, 90)], ids=["short", "long"])
def test_byte_array_copies(lo, hi):
    """Pages of short strings (a thread a string) and of long ones (a warp a string)."""
    rng = np.random.default_rng(hi)
    vals = ["".join(chr(97 + int(c)) for c in rng.integers(0, 26, int(rng.integers(lo, hi)))) for _ in range(70)]
    roundtrip(pa.table({"x": pa.array(_nulls(vals, "some", rng), pa.string())}),
              **_write_args("PLAIN", "1.0", 1 << 20))


@pytest.mark.parametrize("encoding", ["PLAIN", "DICT"])
def test_byte_array_walk_windows(encoding):
    """Pages the length walk crosses in many windows: empty values, values ending on a window's edge, values
    longer than a window (stepped over whole), a dictionary page as long as the data."""
    rng = np.random.default_rng(11)
    lens = [int(x) for x in rng.choice([0, 1, 3, 12, 60, 252, 253, 600, 2100], 70)]
    vals = [(f"{i}." + "abcdefgh" * 300)[:ln] for i, ln in enumerate(lens)]
    roundtrip(pa.table({"x": pa.array(_nulls(vals, "some", rng), pa.string())}),
              **_write_args(encoding, "2.0", 1 << 20))


def test_byte_arrays_several_row_groups():
    table = _byte_table(pa.large_string(), "some", 120)
    chunks, _pages = roundtrip(table, row_group_size=40, **_write_args("DELTA_BYTE_ARRAY", "1.0", 300))
    assert len(chunks) == 3


# --------------------------------------------------------------------------
# hostile pages: hand-made bodies -> the right PageError, no exception
# --------------------------------------------------------------------------

def _leb(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _zz(v):
    return (v << 1) ^ (v >> 63)


def dbp(values, block=128, mbs=4, total=None, widths=None):
    """A DELTA_BINARY_PACKED stream of int64 ``values`` (widths: force each miniblock's bit width)."""
    total = len(values) if total is None else total
    out = bytearray(_leb(block) + _leb(mbs) + _leb(total) + _leb(_zz(values[0] if values else 0)))
    deltas = [(b - a) & (2**64 - 1) for a, b in zip(values, values[1:])]
    deltas = [d - 2**64 if d >= 2**63 else d for d in deltas]
    vpm = block // mbs
    for s in range(0, len(deltas), block):
        blk = deltas[s:s + block]
        mind = min(blk)
        rel = [(d - mind) & (2**64 - 1) for d in blk]
        out += _leb(_zz(mind) & (2**64 - 1))
        used = (len(blk) + vpm - 1) // vpm
        bws = [max(rel[m * vpm:(m + 1) * vpm] or [0]).bit_length() if m < used else 0 for m in range(mbs)]
        if widths is not None:
            bws = list(widths)
        out += bytes(bws)
        for m in range(used):
            part = rel[m * vpm:(m + 1) * vpm] + [0] * vpm
            bits = 0
            for k in range(vpm):
                bits |= (part[k] & ((1 << bws[m]) - 1)) << (k * bws[m])
            out += bits.to_bytes(vpm * bws[m] // 8, "little")
    return bytes(out)


def _dict_ids(ids, bw=3):
    """A dictionary data page's values: bit width, then one bit-packed run of ``ids``."""
    groups = (len(ids) + 7) // 8
    bits = 0
    for k, v in enumerate(ids):
        bits |= v << (k * bw)
    return bytes([bw]) + _leb(groups << 1 | 1) + bits.to_bytes(groups * bw, "little")


def hand_page(body: bytes, encoding: int, typ: pa.DataType, rows: int, *, dict_body: bytes | None = None,
              dict_n: int = 0):
    """One required chunk of one v2 data page holding ``body`` (and a dictionary page): (data, chunks, pages)."""
    physical = (Physical.INT32 if typ == pa.int32() else Physical.INT64 if typ == pa.int64()
                else Physical.FIXED_LEN_BYTE_ARRAY if pa.types.is_fixed_size_binary(typ) else Physical.BYTE_ARRAY)
    type_length = typ.byte_width if physical == Physical.FIXED_LEN_BYTE_ARRAY else 0
    kind, width = _kind_of(typ, physical, type_length)
    buf = b"\0" * 8 + (dict_body or b"") + body + b"\0" * 8
    chunks = np.zeros(1, CHUNK)
    chunks[0] = (kind, physical, type_length, width, 0, -1, 0, 1, rows, 0, 0, -1, -1, -1, 0, 0)
    pages = np.zeros(2 if dict_body is not None else 1, PAGE)
    at = 8
    if dict_body is not None:
        pages[0] = (0, PageKind.DICTIONARY, 0, 0, at, len(dict_body), dict_n, -1, 0, 0, 0)
        chunks[0]["dict_page"], chunks[0]["first_page"] = 0, 1
        at += len(dict_body)
    pages[-1] = (0, PageKind.DATA_V2, encoding, 0, at, len(body), rows, 0, 0, 0, 0)
    return np.frombuffer(buf, np.uint8), chunks, pages


def hand_decode(data, chunks, pages):
    dec = runner.decode_host(data, chunks, pages)
    return dec.chunks, dec.pages, dec.out


def page_errors(data, chunks, pages):
    return [int(e) for e in hand_decode(data, chunks, pages)[1]["error"]]


def _plain(strings):
    return b"".join(len(s).to_bytes(4, "little") + s for s in strings)


def _dlba(strings, **kw):
    return dbp([len(s) for s in strings], **kw) + b"".join(strings)


def _dba(prefixes, suffixes):
    return dbp(prefixes) + _dlba(suffixes)


S = pa.string()
WORDS = [b"ab", b"abc", b"", b"xyz"]


def test_hand_pages_decode():
    """The hand-made pages of the hostile cases are valid before they are spoilt."""
    for enc, body in [(0, _plain(WORDS)), (6, _dlba(WORDS)), (7, _dba([0, 2, 0, 0], [b"ab", b"c", b"", b"xyz"]))]:
        chunks, pages, out = hand_decode(*hand_page(body, enc, S, 4))
        assert not pages["error"].any()
        assert assemble(chunks, out, S).to_pylist() == [w.decode() for w in WORDS]
    values = [0, 2**63 - 1, -(2**63), 5, -7] * 8
    chunks, pages, out = hand_decode(*hand_page(dbp(values), 5, pa.int64(), len(values)))
    assert assemble(chunks, out, pa.int64()).to_pylist() == values


E = PageError


@pytest.mark.parametrize("name,case,want", [
    ("plain length past the page", lambda: hand_page(_plain(WORDS)[:-1], 0, S, 4), [E.LENGTH]),
    ("plain huge length", lambda: hand_page(b"\xff\xff\xff\xff" + _plain(WORDS), 0, S, 4), [E.LENGTH]),
    ("plain values missing", lambda: hand_page(_plain(WORDS[:2]), 0, S, 4), [E.VALUES]),
    ("plain values missing after many windows", lambda: hand_page(_plain(WORDS * 90), 0, S, 361), [E.VALUES]),
    ("plain length past the page after many windows",
     lambda: hand_page(_plain(WORDS * 90 + [b"q" * 700])[:-1], 0, S, 361), [E.LENGTH]),
    ("dictionary index out of range",
     lambda: hand_page(_dict_ids([1, 4]), 8, S, 2, dict_body=_plain(WORDS), dict_n=4), [0, E.DICT_INDEX]),
    ("dictionary page length past its end",
     lambda: hand_page(_dict_ids([1, 0]), 8, S, 2, dict_body=_plain(WORDS)[:-2], dict_n=4),
     [E.LENGTH, E.DICT_INDEX]),
    ("dlba block size not a multiple of 128", lambda: hand_page(_dlba(WORDS, block=96, mbs=3), 6, S, 4), [E.DELTA]),
    ("dlba miniblock not a multiple of 32", lambda: hand_page(_dlba(WORDS, block=128, mbs=8), 6, S, 4), [E.DELTA]),
    ("dlba bit width over 32", lambda: hand_page(_dlba(WORDS, widths=[33, 0, 0, 0]), 6, S, 4), [E.BIT_WIDTH]),
    ("dlba count below the values", lambda: hand_page(_dlba(WORDS, total=3), 6, S, 4), [E.COUNT]),
    ("dlba huge count, blocks past the page", lambda: hand_page(dbp([0, 0, 0, 0], total=2**31 - 1), 6, S, 4),
     [E.DELTA]),
    ("dlba count past int32", lambda: hand_page(_dlba(WORDS, total=2**40), 6, S, 4), [E.DELTA]),
    ("dlba negative length", lambda: hand_page(dbp([2, -1, 0, 3]) + b"abcdef", 6, S, 4), [E.LENGTH]),
    ("dlba bytes past the page", lambda: hand_page(_dlba(WORDS)[:-1], 6, S, 4), [E.LENGTH]),
    ("dlba unterminated header", lambda: hand_page(b"\x80" * 12, 6, S, 4), [E.DELTA]),
    ("dba prefix longer than the previous value",
     lambda: hand_page(_dba([0, 3, 0, 0], [b"ab", b"c", b"", b"xyz"]), 7, S, 4), [E.LENGTH]),
    ("dba first prefix not zero", lambda: hand_page(_dba([1, 0, 0, 0], [b"ab", b"c", b"", b"x"]), 7, S, 4),
     [E.LENGTH]),
    ("dba negative prefix", lambda: hand_page(_dba([0, -2, 0, 0], [b"ab", b"c", b"", b"x"]), 7, S, 4), [E.LENGTH]),
    ("int64 bit width over 64", lambda: hand_page(dbp(list(range(10)), widths=[65, 0, 0, 0]), 5, pa.int64(), 10),
     [E.BIT_WIDTH]),
    ("int32 bit width over 32", lambda: hand_page(dbp(list(range(10)), widths=[33, 0, 0, 0]), 5, pa.int32(), 10),
     [E.BIT_WIDTH]),
    ("int count below the rows", lambda: hand_page(dbp(list(range(10))), 5, pa.int32(), 11), [E.COUNT]),
    ("int miniblocks past the page", lambda: hand_page(dbp(list(range(0, 3000, 7)))[:-3], 5, pa.int32(), 429),
     [E.DELTA]),
    ("dictionary data page without a dictionary", lambda: hand_page(_dict_ids([0, 0]), 8, S, 2),
     [E.DICT_INDEX]),
], ids=lambda x: x if isinstance(x, str) else "")
def test_hostile_pages(name, case, want):
    assert page_errors(*case()) == [int(w) for w in want]


def test_hostile_fixed_length_delta_byte_array():
    """A FIXED_LEN_BYTE_ARRAY value of another length than the type's (through the stand-in)."""
    data, chunks, pages = hand_page(_dba([0, 0], [b"abc", b"ab"]), 7, pa.binary(3), 2)
    pages["nonnull"] = 2
    body = int(pages[0]["offset"])
    extra = SimpleNamespace(valid=np.ones(2, np.uint8), vindex=np.arange(2, dtype=np.int32),
                            row_page=np.zeros(2, np.int32), idx=np.zeros(2, np.int32), vstart=np.array([body], np.int64),
                            vend=np.array([body + int(pages[0]["size"])], np.int64), total_dict=0)
    _c, pages, _out = decode(data.tobytes(), chunks, pages, extra)
    assert pages["error"].tolist() == [PageError.LENGTH]
    # without the per-row string scratch (a batch of no BYTES chunk): refused, nothing written past it
    pages["error"] = 0
    _c, pages, _out = decode(data.tobytes(), chunks, pages, extra, string_rows=0)
    assert pages["error"].tolist() == [PageError.ENCODING]
