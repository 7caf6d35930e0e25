"""The decode plan's records: what the host plans and the GPU decodes.

A *decode batch* is the column chunks of one read batch that the GPU
decodes. Its bytes (the uncompressed pages, headers included, as the
image holds them) are one device buffer ``data``; the plan describes them
with two numpy structured arrays, :data:`CHUNK` (one record per column
chunk) and :data:`PAGE` (one record per page, dictionary pages included),
plus the batch-wide row space: chunk ``c`` owns rows
``[row_base, row_base + num_rows)`` of every per-row scratch array.

Decoding runs in two phases, each one launch sequence over the whole
batch:

1. **measure**: definition levels become per-row validity, each page's
   values are counted and checked against what its body holds, string
   lengths are read; the host gets, per chunk, ``null_count`` and
   ``data_bytes`` (string bytes; 0 for other kinds), and per page an
   ``error`` code (:class:`PageError`);
2. **write**: once the host has placed every chunk's output buffers
   (``out_valid``, ``out_values``, ``out_data``: offsets in one output
   buffer), values are written in Arrow's layout: an LSB-first validity
   bitmap starting at the chunk's first row (only where ``max_def`` is 1),
   then fixed-width values (``width`` bytes a row, null rows zero), or a
   bitmap (BOOLEAN), or ``num_rows + 1`` offsets of ``width`` bytes (4 or
   8) followed by the string bytes at ``out_data``.

Every offset is in bytes. Nothing here imports numba or CUDA.
"""

from __future__ import annotations

import enum

import numpy as np

from ..format.structs import Encoding, Physical

__all__ = ["CHUNK", "PAGE", "OutKind", "PageKind", "Encoding", "Physical", "PageError", "ALIGN", "place_outputs",
           "output_bytes", "validity_bytes", "values_bytes"]

# Output buffers are placed at this alignment (Arrow's recommended 64).
ALIGN = 64


class PageKind(enum.IntEnum):
    """What a PAGE record is."""

    DICTIONARY = 0
    DATA_V1 = 1
    DATA_V2 = 2


class OutKind(enum.IntEnum):
    """How a chunk's values become Arrow's (``CHUNK.kind``).

    ``width`` is the output bytes a row (or offset width for BYTES).
    """

    # The physical value's bytes as they are: INT32 -> 4 (int32, uint32,
    # date32, time32), INT64 -> 8 (int64, uint64, timestamp, time64),
    # FLOAT -> 4, DOUBLE -> 8, FIXED_LEN_BYTE_ARRAY -> type_length
    # (fixed_size_binary, float16).
    COPY = 1
    # INT32 -> its low ``width`` (1 or 2) bytes: int8, uint8, int16, uint16.
    NARROW = 2
    # decimal128: INT32 / INT64 sign-extended, or FIXED_LEN_BYTE_ARRAY
    # (big-endian two's complement, type_length <= 16) sign-extended, to 16
    # little-endian bytes.
    DECIMAL = 3
    # BOOLEAN -> a bitmap, LSB first, from the chunk's first row.
    BOOL = 4
    # BYTE_ARRAY -> offsets (width 4: string/binary, 8: large_*) and data.
    BYTES = 5


class PageError(enum.IntEnum):
    """Per-page error codes the kernels set (0: none); the first wins."""

    OK = 0
    LEVELS = 1  # definition levels run past their bytes, or a bad run header
    VALUES = 2  # the values need more bytes than the page holds
    DICT_INDEX = 3  # a dictionary index out of range, or no dictionary page
    BIT_WIDTH = 4  # a bit width the encoding does not allow
    LENGTH = 5  # a negative string length, or one past the page
    DELTA = 6  # a DELTA_* header or block that is not valid
    COUNT = 7  # the levels and the header disagree on value counts
    ENCODING = 8  # an encoding this kernel set does not decode


# One record per column chunk of the decode batch.
CHUNK = np.dtype(
    [
        ("kind", np.int32),  # OutKind
        ("physical", np.int32),  # Physical
        ("type_length", np.int32),  # FIXED_LEN_BYTE_ARRAY width, else 0
        ("width", np.int32),  # output bytes a row (BYTES: offset width 4 or 8; BOOL: 0)
        ("max_def", np.int32),  # 0 (required) or 1 (optional, flat)
        ("dict_page", np.int32),  # PAGE index of its dictionary page, -1 if none
        ("first_page", np.int32),  # PAGE index of its first data page
        ("num_pages", np.int32),  # data pages, consecutive from first_page
        ("num_rows", np.int64),
        ("row_base", np.int64),  # first row in the batch-wide row space
        ("dict_base", np.int64),  # first entry in the batch-wide dictionary-entry space
        ("out_valid", np.int64),  # validity bitmap offset in the output, -1 if max_def == 0
        ("out_values", np.int64),  # values / offsets / boolean bitmap offset in the output
        ("out_data", np.int64),  # string bytes offset in the output (BYTES), else -1
        # measured by the kernels:
        ("null_count", np.int64),
        ("data_bytes", np.int64),
    ]
)

# One record per page of the decode batch (a chunk's dictionary page, then
# its data pages in order).
PAGE = np.dtype(
    [
        ("chunk", np.int32),  # CHUNK index
        ("kind", np.int8),  # PageKind
        ("encoding", np.int8),  # Encoding of the values
        ("pad", np.int16),
        ("offset", np.int64),  # first body byte in ``data`` (after the page header)
        ("size", np.int64),  # body bytes (uncompressed_page_size)
        ("num_values", np.int32),  # levels (= rows, flat columns), or dictionary entries
        ("def_bytes", np.int32),  # v2: definition-level bytes; v1: -1 (4-byte length prefix if max_def)
        ("row_start", np.int64),  # first row of the page in the batch-wide row space
        # measured by the kernels:
        ("nonnull", np.int32),  # values the page's levels say it holds
        ("error", np.int32),  # PageError
    ]
)


def validity_bytes(num_rows: int) -> int:
    """Bytes of a bitmap of ``num_rows`` bits."""
    return (num_rows + 7) // 8


def values_bytes(chunk) -> int:
    """Bytes of a measured chunk's values buffer (offsets for BYTES, a bitmap for BOOL)."""
    rows = int(chunk["num_rows"])
    kind = int(chunk["kind"])
    if kind == OutKind.BOOL:
        return validity_bytes(rows)
    if kind == OutKind.BYTES:
        return (rows + 1) * int(chunk["width"])
    return rows * int(chunk["width"])


def place_outputs(chunks: np.ndarray) -> int:
    """Place every measured chunk's output buffers in one output buffer.

    Sets ``out_valid`` (-1 where ``max_def`` is 0), ``out_values`` and
    ``out_data`` (-1 unless BYTES) of each record, each at a multiple of
    :data:`ALIGN`, in chunk order; returns the output buffer's size.
    ``data_bytes`` must have been measured.
    """
    valid, values, data = _buffer_bytes(chunks)
    total = valid + values + data
    start = np.cumsum(total) - total
    chunks["out_valid"] = np.where(chunks["max_def"] > 0, start, -1)
    chunks["out_values"] = start + valid
    chunks["out_data"] = np.where(chunks["kind"] == int(OutKind.BYTES), start + valid + values, -1)
    return int(total.sum())


def output_bytes(chunks: np.ndarray) -> np.ndarray:
    """Each measured chunk's bytes in :func:`place_outputs`' layout (int64, multiples of :data:`ALIGN`).

    Chunks are placed one after the other, so the placement of any run of
    consecutive chunks is theirs alone shifted by the bytes before them.
    """
    valid, values, data = _buffer_bytes(chunks)
    return valid + values + data


def _buffer_bytes(chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per chunk, the aligned bytes of its validity bitmap, values (or offsets) and string data (int64)."""
    rows = chunks["num_rows"].astype(np.int64)
    kind = chunks["kind"]
    bitmap = (rows + 7) // 8  # validity_bytes
    values = np.where(kind == int(OutKind.BOOL), bitmap,
                      np.where(kind == int(OutKind.BYTES), rows + 1, rows) * chunks["width"].astype(np.int64))
    valid = np.where(chunks["max_def"] > 0, _aligned(bitmap), 0)
    data = np.where(kind == int(OutKind.BYTES), _aligned(chunks["data_bytes"].astype(np.int64)), 0)
    return valid.astype(np.int64), _aligned(values).astype(np.int64), data.astype(np.int64)


def _aligned(n: np.ndarray) -> np.ndarray:
    return (n + ALIGN - 1) // ALIGN * ALIGN
