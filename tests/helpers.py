"""Shared test helpers: the corpus, the generated matrix, table comparison.

Importable from any test module under ``tests/`` (``from helpers import
...``): the Dask engine tests use the same matrix and the same comparison
as the ``read_table`` tests.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "corpus_root",
    "assert_tables_equal",
    "tables_equal",
    "matrix_table",
    "MatrixFile",
    "MATRIX_CODECS",
    "write_matrix",
    "walk_buffers",
    "FUZZ_STATS",
    "gpu_available",
    "uploaded_in_file",
]

# Lines the fuzz tests report; conftest prints them in the terminal summary.
FUZZ_STATS: list[str] = []

REPO = Path(__file__).resolve().parent.parent
# What pyarrow raises on a file it refuses: its own classes, and OSError
# for codec failures ("GZipCodec failed").
PYARROW_ERRORS = (pa.ArrowException, OSError)


def until(condition, what: str, timeout_s: float = 60.0, every_s: float = 0.01) -> None:
    """Wait for ``condition()``; fail (rather than hang) past ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(every_s)


def sample_frame(n: int, seed: int, *, categorical: bool = False, index: pd.Index | None = None) -> pd.DataFrame:
    """A small frame for dask reads: ints, floats, strings, nullable ints, a categorical (optional), a partition key."""
    rng = np.random.default_rng(seed)
    columns = {
        "key": np.arange(n, dtype="int64") + seed * n,
        "price": rng.random(n),
        "qty": rng.integers(0, 50, n).astype("int32"),
        "flag": rng.choice(["A", "N", "R"], n),
        "comment": [f"c{i % 97}-{seed}" for i in range(n)],
        "maybe": pd.array(np.where(rng.random(n) < 0.2, None, rng.integers(0, 9, n)), dtype="Int64"),
    }
    if categorical:
        columns["cat"] = pd.Categorical(rng.choice(["x", "y", None], n))
    columns["part"] = np.arange(n) % 3
    return pd.DataFrame(columns, index=index)


def gpu_available() -> bool:
    """True when a GPU backend can run here (then ``backend="auto"`` takes the page path)."""
    from dask_hwdecomp.backend_table import GPU_BACKENDS
    from dask_hwdecomp.routing import registry

    return any(registry.probe(name) is None for name in GPU_BACKENDS)


# Lines for a reading subprocess's script: after its reads, it holds no CUDA context (the GPU service does
# the GPU work), neither created nor current.
NO_CUDA_CONTEXT_CHECK = """
from cuda.bindings import driver
driver.cuInit(0)
_, dev = driver.cuDeviceGet(0)
err, _flags, active = driver.cuDevicePrimaryCtxGetState(dev)
assert int(err) == 0 and not active, "this reading process created a CUDA context"
err, ctx = driver.cuCtxGetCurrent()
assert int(err) == 0 and int(ctx) == 0, "this reading process has a current CUDA context"
"""


# apache/parquet-testing, shipped with the tests (its LICENSE.txt and SOURCE.txt beside it).
SHIPPED_CORPUS = REPO / "tests" / "data" / "parquet-testing"


def corpus_root() -> Path:
    """The parquet-testing copy: ``$HWDECOMP_CORPUS``, else the one shipped in ``tests/data/parquet-testing``."""
    env = os.environ.get("HWDECOMP_CORPUS")
    return Path(env) if env else SHIPPED_CORPUS


# --- comparison -------------------------------------------------------------


def _same(x, y) -> bool:
    if isinstance(x, float) and isinstance(y, float) or (
        isinstance(x, np.floating) and isinstance(y, np.floating)
    ):
        if math.isnan(x) and math.isnan(y):
            return True
        return x == y and math.copysign(1, x) == math.copysign(1, y)
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        return len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y))
    return type(x) is type(y) and x == y


def _first_difference(a: pa.ChunkedArray, b: pa.ChunkedArray):
    la, lb = a.to_pylist(), b.to_pylist()
    if len(la) != len(lb):
        return f"lengths {len(la)} != {len(lb)}"
    for i, (x, y) in enumerate(zip(la, lb)):
        if not _same(x, y):
            return f"row {i}: {x!r} != {y!r}"
    return None


def tables_equal(a: pa.Table, b: pa.Table) -> str | None:
    """None when equal (schema with metadata, values with NaN == NaN), else why not."""
    if not a.schema.equals(b.schema, check_metadata=True):
        if a.schema.names != b.schema.names:
            return f"column names differ: {a.schema.names} != {b.schema.names}"
        for fa, fb in zip(a.schema, b.schema):
            if not fa.equals(fb, check_metadata=True):
                return f"field differs: {fa} ({fa.metadata}) != {fb} ({fb.metadata})"
        return f"schema metadata differs: {a.schema.metadata} != {b.schema.metadata}"
    if a.num_rows != b.num_rows:
        return f"row counts differ: {a.num_rows} != {b.num_rows}"
    if a.equals(b):
        return None
    for name, ca, cb in zip(a.column_names, a.columns, b.columns):
        if ca.equals(cb):
            continue
        # Table.equals treats NaN != NaN; compare values, NaN-aware and
        # sign-of-zero aware, before calling it a difference.
        diff = _first_difference(ca, cb)
        if diff is not None:
            return f"column {name!r}: {diff}"
    return None


def assert_tables_equal(a: pa.Table, b: pa.Table) -> None:
    """Assert ``a`` equals ``b``: schema incl. metadata, values with NaN == NaN."""
    why = tables_equal(a, b)
    assert why is None, why


def walk_buffers(table: pa.Table):
    """Every non-null buffer of every array in ``table`` (children, dictionaries too)."""

    def arr(a: pa.Array):
        for buf in a.buffers():
            if buf is not None:
                yield buf
        if pa.types.is_dictionary(a.type):
            yield from arr(a.dictionary)

    for col in table.columns:
        for chunk in col.chunks:
            yield from arr(chunk)


# --- the generated matrix ---------------------------------------------------

MATRIX_CODECS = ("none", "snappy", "gzip", "lz4", "zstd", "brotli")  # pyarrow's "lz4" is LZ4_RAW


def _values(name: str, typ: pa.DataType, n: int, rng: np.random.Generator) -> pa.Array:
    """``n`` values of ``typ``, no nulls, deterministic from ``rng``."""
    ints = rng.integers(-(1 << 40), 1 << 40, n)
    if pa.types.is_boolean(typ):
        return pa.array(rng.integers(0, 2, n).astype(bool))
    if pa.types.is_integer(typ):
        info = np.iinfo(typ.to_pandas_dtype())
        return pa.array(rng.integers(info.min, info.max, n, endpoint=True, dtype=typ.to_pandas_dtype()))
    if pa.types.is_floating(typ):
        dtype = typ.to_pandas_dtype()
        vals = rng.normal(0, 1e3, n).astype(dtype)
        vals[::17] = np.nan
        vals[5::23] = -0.0
        vals[7::29] = np.inf
        return pa.array(vals, type=typ)
    if pa.types.is_decimal(typ):
        digits = 10 ** min(typ.precision, 12)
        return pa.array([Decimal(int(v) % digits - digits // 2).scaleb(-typ.scale) for v in ints], type=typ)
    if pa.types.is_date32(typ):
        return pa.array((ints % 200000).astype(np.int32), type=pa.int32()).cast(typ)
    if pa.types.is_time32(typ):
        return pa.array((ints % 86_400_000).astype(np.int32), type=pa.int32()).cast(typ)
    if pa.types.is_time64(typ):
        return pa.array((ints % 86_400_000_000).astype(np.int64), type=pa.int64()).cast(typ)
    if pa.types.is_timestamp(typ):
        return pa.array(ints.astype(np.int64), type=pa.int64()).cast(typ)
    if pa.types.is_fixed_size_binary(typ):
        return pa.array([int(v).to_bytes(8, "little", signed=True)[: typ.byte_width] for v in ints], type=typ)
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        # few distinct values so that dictionary encoding has work to do
        return pa.array([f"s{v % 37}" * int(v % 5) + "é" for v in ints], type=typ)
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return pa.array([bytes(int(v % 251) for _ in range(int(v % 7))) for v in ints], type=typ)
    if pa.types.is_list(typ) and pa.types.is_list(typ.value_type):
        return pa.array(
            [[[f"x{j}" for j in range(int(v % 3))] if (v + k) % 4 else None for k in range(int(v % 4))] for v in ints],
            type=typ,
        )
    if pa.types.is_list(typ):
        return pa.array([[int(v % 100000) + k if k % 3 else None for k in range(int(v % 5))] for v in ints], type=typ)
    if pa.types.is_struct(typ):
        return pa.array(
            [{"a": int(v % 1000) if v % 3 else None, "b": f"b{v % 11}"} for v in ints], type=typ
        )
    if pa.types.is_map(typ):
        return pa.array([[(f"k{k}", int(v + k) if k % 2 else None) for k in range(int(v % 4))] for v in ints], type=typ)
    raise AssertionError(f"no generator for {name}: {typ}")


MATRIX_TYPES: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float16": pa.float16(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "decimal128_9": pa.decimal128(9, 2),
    "decimal128_38": pa.decimal128(38, 10),
    "decimal256": pa.decimal256(50, 5),
    "date32": pa.date32(),
    "time32": pa.time32("ms"),
    "time64": pa.time64("us"),
    "timestamp_tz": pa.timestamp("us", tz="Europe/Paris"),
    "timestamp_ns_utc": pa.timestamp("ns", tz="UTC"),
    "string": pa.string(),
    "large_string": pa.large_string(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "fixed_size_binary": pa.binary(5),
    "list": pa.list_(pa.int32()),
    "nested_list": pa.list_(pa.list_(pa.string())),
    "struct": pa.struct([("a", pa.int32()), ("b", pa.string())]),
    "map": pa.map_(pa.string(), pa.int64()),
}

NULL_MODES = ("none", "some", "all")


def matrix_table(n_rows: int = 240, seed: int = 0) -> pa.Table:
    """One wide table: every matrix type × every null mode (``<type>_<mode>`` columns).

    ``int32_none`` holds no nulls and is the natural filter column.
    """
    rng = np.random.default_rng(seed)
    columns = {}
    for name, typ in MATRIX_TYPES.items():
        base = _values(name, typ, n_rows, rng)
        for mode in NULL_MODES:
            if mode == "none":
                arr = base
            elif mode == "all":
                arr = pa.nulls(n_rows, type=typ)
            else:
                mask = pa.array(rng.random(n_rows) < 0.3)
                arr = pa.compute.if_else(mask, pa.nulls(n_rows, type=typ), base) if not (
                    pa.types.is_nested(typ)
                ) else _null_nested(base, mask)
            columns[f"{name}_{mode}"] = arr
    schema = pa.schema(
        [pa.field(k, v.type) for k, v in columns.items()],
        metadata={b"hwdecomp-test": b"matrix"},
    )
    return pa.table(columns, schema=schema)


def _null_nested(arr: pa.Array, mask: pa.Array) -> pa.Array:
    items = arr.to_pylist()
    return pa.array([None if m else v for v, m in zip(items, mask.to_pylist())], type=arr.type)


@dataclass(frozen=True)
class MatrixFile:
    """One file of the matrix and how pyarrow wrote it."""

    path: Path
    codec: str
    data_page_version: str
    dictionary: bool

    @property
    def id(self) -> str:
        return f"{self.codec}-v{self.data_page_version[0]}-{'dict' if self.dictionary else 'plain'}"


ROW_GROUP_SIZE = 100  # several row groups
WRITE_OPTIONS = dict(
    row_group_size=ROW_GROUP_SIZE,
    data_page_size=256,  # tiny pages ...
    write_batch_size=32,  # ... checked every 32 values
    dictionary_pagesize_limit=512,  # dictionaries overflow to plain pages
)


def write_matrix(directory: Path, table: pa.Table | None = None, codecs=MATRIX_CODECS) -> list[MatrixFile]:
    """Write the matrix (codec × page version × dictionary) of ``table`` into ``directory``."""
    table = matrix_table() if table is None else table
    out = []
    for codec in codecs:
        for version in ("1.0", "2.0"):
            for dictionary in (True, False):
                f = MatrixFile(Path(directory) / "x.parquet", codec, version, dictionary)
                f = MatrixFile(Path(directory) / f"{f.id}.parquet", codec, version, dictionary)
                pq.write_table(
                    table,
                    f.path,
                    compression=codec,
                    data_page_version=version,
                    use_dictionary=dictionary,
                    **WRITE_OPTIONS,
                )
                out.append(f)
    return out


# The column decoder of the table tests: pyarrow's own columns, read from
# each image column by column and row group by row group (what the GPU
# decoder hands over), through the seam of readpath/batch.py.
PICKED_OUT = "left to pyarrow by the test"


def decoded_by_pyarrow(buffer: pa.Buffer, names) -> dict[str, pa.ChunkedArray]:
    """``names`` of an uncompressed Parquet file, each one chunk per row group, as pyarrow decodes them."""
    pf = pq.ParquetFile(pa.BufferReader(buffer))
    out = {}
    for name in names:
        parts = [pf.read_row_group(i, columns=[name]).column(0) for i in range(pf.metadata.num_row_groups)]
        out[name] = pa.chunked_array([c for p in parts for c in p.chunks], type=pf.schema_arrow.field(name).type)
    return out


def pyarrow_decoder(pick):
    """A column decoder taking pyarrow's columns: the flat top-level columns read whose name ``pick`` accepts."""

    def decode(images, options, report):
        for image in images:
            pf = pq.ParquetFile(pa.BufferReader(image.buffer))
            names = pf.schema_arrow.names
            # A flat column's leaf path is its name (dots included); a
            # nested one's is longer.
            read = {pf.schema.column(c.column).path for c in image.plan.chunks}
            chosen = []
            for path in sorted(read):
                flat = path in names and names.count(path) == 1 and not pa.types.is_nested(
                    pf.schema_arrow.field(path).type
                )
                if flat and pick(path):
                    chosen.append(path)
                else:
                    image.why_not_gpu[path if flat else path.split(".")[0]] = PICKED_OUT
            image.decoded.update(decoded_by_pyarrow(image.buffer, chosen))

    return decode


def uploaded_in_file(plan, offset: int) -> int:
    """Where byte ``offset`` of a GPU decode plan's upload lies in the planned file."""
    for src, n, dst in plan.ranges.tolist():
        if dst <= offset < dst + n:
            return src + offset - dst
    raise AssertionError(f"offset {offset} is not uploaded")


def with_chunk_field(buf: bytes, rg: int, leaf: int, field: int, value: int) -> bytes:
    """``buf`` (a Parquet file) with one i64 field of a column chunk's metadata replaced (5: ``num_values``)."""
    import struct

    from dask_hwdecomp.format.footer import parse_footer
    from dask_hwdecomp.format.structs import ColumnChunk, FileMetaData, RowGroup
    from dask_hwdecomp.format.thrift import T, encode_struct

    footer = parse_footer(buf, len(buf), "mem")
    meta = footer.meta.copy()
    groups = [g.copy() for g in footer.row_groups]
    chunks = [c.copy() for c in footer.column_chunks(rg)]
    md = chunks[leaf].get_value(ColumnChunk.meta_data).copy()
    md[field] = (T.I64, value)
    chunks[leaf][ColumnChunk.meta_data] = (T.STRUCT, md)
    groups[rg][RowGroup.columns] = (T.LIST, (T.STRUCT, chunks))
    meta[FileMetaData.row_groups] = (T.LIST, (T.STRUCT, groups))
    encoded = encode_struct(meta)
    return buf[: footer.footer_offset] + encoded + struct.pack("<I", len(encoded)) + b"PAR1"
