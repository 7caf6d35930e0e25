"""Small Parquet files that make the decoder launch every kernel it has.

The GPU service decodes them once when it starts (numba compiles each
kernel on first launch, or loads it from its disk cache); the tests compile
every kernel these launches reach for a real GPU without one.
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["warmup_table", "warmup_files"]

# Encodings that a dictionary-free write asks for, per column.
_ENCODINGS = {
    "i32": "BYTE_STREAM_SPLIT", "i64": "DELTA_BINARY_PACKED", "f32": "BYTE_STREAM_SPLIT",
    "f64": "BYTE_STREAM_SPLIT", "fsb": "BYTE_STREAM_SPLIT", "s": "DELTA_LENGTH_BYTE_ARRAY",
    "ls": "DELTA_BYTE_ARRAY", "i8": "DELTA_BINARY_PACKED", "b": "RLE",
}


def warmup_table(n: int = 40) -> pa.Table:
    """A table of every output kind: booleans, narrow, wide and decimal integers, floats, strings."""
    rng = np.random.default_rng(0)
    mask = rng.random(n) < 0.3
    return pa.table({
        "b": pa.array(rng.random(n) < 0.5, mask=mask),
        "i8": pa.array(rng.integers(-9, 9, n).astype(np.int8), mask=mask),
        "i32": pa.array(rng.integers(-9, 9, n).astype(np.int32)),
        "i64": pa.array(rng.integers(-9, 9, n), mask=mask),
        "f32": pa.array(rng.random(n).astype(np.float32)),
        "f64": pa.array(rng.random(n), mask=mask),
        "d32": pa.array([None] * 3 + [1] * (n - 3), type=pa.decimal128(5, 1)),
        "d64": pa.array([2] * n, type=pa.decimal128(15, 1)),
        "dfl": pa.array([3] * n, type=pa.decimal128(30, 1)),
        "fsb": pa.array([b"abc"] * n, type=pa.binary(3)),
        "s": pa.array([f"v{i % 7}" for i in range(n)]),
        "ls": pa.array([f"w{i % 5}" for i in range(n)], type=pa.large_string(), mask=mask),
    })


def warmup_files() -> list[bytes]:
    """The table written uncompressed, v1 and v2 pages, with and without dictionaries and other encodings."""
    table = warmup_table()
    out = []
    for version in ("1.0", "2.0"):
        for kw in (dict(use_dictionary=True), dict(use_dictionary=False),
                   dict(use_dictionary=False, column_encoding=_ENCODINGS)):
            sink = io.BytesIO()
            pq.write_table(table, sink, compression="none", data_page_version=version, data_page_size=128, **kw)
            out.append(sink.getvalue())
    return out
