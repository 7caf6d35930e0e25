"""Which column chunks the GPU decodes, and into what.

:func:`classify_columns` looks at each leaf column of a file (its Parquet
physical and logical types, its levels) beside the Arrow type pyarrow
produces for it (``pq.ParquetFile(...).schema_arrow``) and answers a
:class:`GpuColumn` (how the GPU writes it, a :class:`tables.OutKind`) or a
:class:`CpuReason` (why pyarrow decodes it). The GPU only claims a column
where the stored values, converted as the kind says, are exactly pyarrow's:
the Parquet type and the Arrow type must agree (a timestamp's unit equal to
the stored unit, an int8 from INT32 annotated INT(8, signed) only, ...).

:func:`encoding_reason` says, per page, whether the GPU decodes an encoding
for a column's kind; a page it does not decode sends its whole chunk to
pyarrow.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa

from .tables import Encoding, OutKind, Physical

__all__ = ["GpuColumn", "CpuReason", "classify_column", "classify_columns", "encoding_reason",
           "dictionary_reason"]


@dataclass(frozen=True)
class GpuColumn:
    """A leaf column the GPU decodes.

    Attributes
    ----------
    name : str
        The column's name (its top-level Arrow field).
    kind : OutKind
    width : int
        Output bytes a row (BYTES: offset width 4 or 8; BOOL: 0).
    physical : Physical
    type_length : int
        FIXED_LEN_BYTE_ARRAY width, else 0.
    max_def : int
        0 (required) or 1 (optional).
    arrow_type : pa.DataType
        The type pyarrow produces (time zone and all), which the GPU's
        buffers are wrapped as.
    """

    name: str
    kind: OutKind
    width: int
    physical: Physical
    type_length: int
    max_def: int
    arrow_type: pa.DataType


@dataclass(frozen=True)
class CpuReason:
    """Why pyarrow decodes a leaf column (or one of its chunks): human text."""

    name: str
    reason: str


_PHYSICAL = {p.name: p for p in Physical}
_UNITS = {"milliseconds": "ms", "microseconds": "us", "nanoseconds": "ns"}


def _logical(col) -> dict:
    """The column's logical type as a dict (``{"Type": "None"}`` where there is none)."""
    try:
        return json.loads(col.logical_type.to_json())
    except (ValueError, AttributeError):  # a logical type pyarrow cannot render: claim nothing
        return {"Type": "?"}


def _is_int(logical: dict, bits: int, signed: bool) -> bool:
    return logical.get("Type") == "Int" and logical.get("bitWidth") == bits and logical.get("isSigned") == signed


def _same_decimal(logical: dict, t: pa.DataType) -> bool:
    return (pa.types.is_decimal128(t) and logical.get("Type") == "Decimal"
            and logical.get("precision") == t.precision and logical.get("scale") == t.scale)


def _same_unit(logical: dict, annotation: str, t: pa.DataType, name: str, width: int):
    """(COPY, ``width``) where the column is annotated ``annotation`` in ``t``'s unit, else why not."""
    if logical.get("Type") == annotation and _UNITS.get(logical.get("timeUnit", "")) == t.unit:
        return OutKind.COPY, width
    return f"{name} stored as {logical.get('timeUnit', logical.get('Type'))}: pyarrow converts units"


def _decimal_or_reason(logical: dict, t: pa.DataType, physical: str):
    """(DECIMAL, 16) for a decimal of the column's precision and scale, else why ``t`` is not read from ``physical``."""
    if pa.types.is_decimal(t):
        return (OutKind.DECIMAL, 16) if _same_decimal(logical, t) else (
            f"{t} from {physical} annotated {logical.get('Type')}")
    return f"{t} from {physical}"


def _fixed_kind(physical: Physical, logical: dict, t: pa.DataType, type_length: int):
    """(kind, width) for a fixed-width physical type, or a reason string."""
    lt = logical.get("Type")
    if physical == Physical.INT32:
        plain = lt == "None"
        for arrow, bits, signed in ((pa.int8(), 8, True), (pa.uint8(), 8, False),
                                    (pa.int16(), 16, True), (pa.uint16(), 16, False)):
            if t == arrow:
                return (OutKind.NARROW, bits // 8) if _is_int(logical, bits, signed) else (
                    f"{t} from INT32 annotated {lt}")
        if t == pa.int32():
            return (OutKind.COPY, 4) if plain or _is_int(logical, 32, True) else f"int32 from INT32 annotated {lt}"
        if t == pa.uint32():
            return (OutKind.COPY, 4) if _is_int(logical, 32, False) else f"uint32 from INT32 annotated {lt}"
        if t == pa.date32():
            return (OutKind.COPY, 4) if lt == "Date" else f"date32 from INT32 annotated {lt}"
        if t == pa.date64():
            return "date64: pyarrow converts the stored days"
        if pa.types.is_time32(t):
            return _same_unit(logical, "Time", t, str(t), 4)
        return _decimal_or_reason(logical, t, "INT32")
    if physical == Physical.INT64:
        if t == pa.int64():
            return (OutKind.COPY, 8) if lt == "None" or _is_int(logical, 64, True) else (
                f"int64 from INT64 annotated {lt}")
        if t == pa.uint64():
            return (OutKind.COPY, 8) if _is_int(logical, 64, False) else f"uint64 from INT64 annotated {lt}"
        if pa.types.is_timestamp(t):
            return _same_unit(logical, "Timestamp", t, f"timestamp[{t.unit}]", 8)
        if pa.types.is_time64(t):
            return _same_unit(logical, "Time", t, str(t), 8)
        return _decimal_or_reason(logical, t, "INT64")
    if physical == Physical.FLOAT:
        return (OutKind.COPY, 4) if t == pa.float32() and lt == "None" else f"{t} from FLOAT"
    if physical == Physical.DOUBLE:
        return (OutKind.COPY, 8) if t == pa.float64() and lt == "None" else f"{t} from DOUBLE"
    if physical == Physical.FIXED_LEN_BYTE_ARRAY:
        if type_length <= 0:
            return f"FIXED_LEN_BYTE_ARRAY of length {type_length}"
        if t == pa.float16():
            return (OutKind.COPY, 2) if lt == "Float16" and type_length == 2 else f"float16 from FLBA annotated {lt}"
        if pa.types.is_fixed_size_binary(t) and not isinstance(t, pa.BaseExtensionType):
            if lt == "None" and t.byte_width == type_length:
                return OutKind.COPY, type_length
            return f"{t} from FIXED_LEN_BYTE_ARRAY({type_length}) annotated {lt}"
        if pa.types.is_decimal128(t):
            if not _same_decimal(logical, t):
                return f"{t} from FIXED_LEN_BYTE_ARRAY annotated {lt}"
            if type_length > 16:
                return f"decimal128 from FIXED_LEN_BYTE_ARRAY({type_length}): more than 16 bytes"
            return OutKind.DECIMAL, 16
        return f"{t} from FIXED_LEN_BYTE_ARRAY"
    return f"{t} from {physical.name}"


def classify_column(col, field: pa.Field) -> GpuColumn | CpuReason:
    """Classify one leaf column.

    Parameters
    ----------
    col : pyarrow.parquet.ColumnSchema
        The leaf column of the Parquet schema.
    field : pa.Field
        The top-level Arrow field pyarrow produces for it.

    Returns
    -------
    GpuColumn or CpuReason
    """
    name = field.name
    if col.max_repetition_level > 0 or col.max_definition_level > 1:
        return CpuReason(name, "nested column")
    t = field.type
    if pa.types.is_nested(t):
        return CpuReason(name, "nested column")
    physical = _PHYSICAL.get(col.physical_type)
    if physical is None:
        return CpuReason(name, f"physical type {col.physical_type}")
    if physical == Physical.INT96:
        return CpuReason(name, "INT96 timestamps")
    if pa.types.is_dictionary(t):
        return CpuReason(name, "dictionary type (read_dictionary)")
    if isinstance(t, pa.BaseExtensionType):
        return CpuReason(name, f"extension type {t}")
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        return CpuReason(name, "string_view")
    logical = _logical(col)
    lt = logical.get("Type")
    max_def = int(col.max_definition_level)
    if physical == Physical.BOOLEAN:
        if t == pa.bool_() and lt == "None":
            return GpuColumn(name, OutKind.BOOL, 0, physical, 0, max_def, t)
        return CpuReason(name, f"{t} from BOOLEAN")
    if physical == Physical.BYTE_ARRAY:
        if pa.types.is_decimal(t):
            return CpuReason(name, "decimal from BYTE_ARRAY")
        stringy = pa.types.is_string(t) or pa.types.is_large_string(t)
        binary = pa.types.is_binary(t) or pa.types.is_large_binary(t)
        if stringy and lt != "String":
            return CpuReason(name, f"{t} from BYTE_ARRAY annotated {lt}")
        if binary and lt != "None":
            return CpuReason(name, f"{t} from BYTE_ARRAY annotated {lt}")
        if not (stringy or binary):
            return CpuReason(name, f"{t} from BYTE_ARRAY")
        width = 8 if pa.types.is_large_string(t) or pa.types.is_large_binary(t) else 4
        return GpuColumn(name, OutKind.BYTES, width, physical, 0, max_def, t)
    type_length = int(col.length) if physical == Physical.FIXED_LEN_BYTE_ARRAY else 0
    got = _fixed_kind(physical, logical, t, type_length)
    if isinstance(got, str):
        return CpuReason(name, got)
    kind, width = got
    return GpuColumn(name, kind, width, physical, type_length, max_def, t)


def _leaves(t: pa.DataType) -> int:
    """Parquet leaf columns an Arrow type is stored in."""
    if isinstance(t, pa.BaseExtensionType):
        return _leaves(t.storage_type)
    if pa.types.is_dictionary(t):
        return _leaves(t.value_type)
    if pa.types.is_map(t):
        return _leaves(t.key_type) + _leaves(t.item_type)
    if pa.types.is_struct(t):
        return sum(_leaves(t.field(k).type) for k in range(t.num_fields))
    if pa.types.is_nested(t):  # the list types
        return _leaves(t.value_type)
    return 1


def classify_columns(parquet_schema, arrow_schema: pa.Schema) -> list[GpuColumn | CpuReason]:
    """Classify every leaf column of a file, in leaf order.

    Leaves are matched with the top-level Arrow fields by position (each
    field takes as many leaves as its type is stored in), never by name:
    names may repeat or contain dots. A nested field's leaves get one
    :class:`CpuReason` each, under the field's name.

    Parameters
    ----------
    parquet_schema : pyarrow.parquet.ParquetSchema
    arrow_schema : pa.Schema
        ``schema_arrow`` of the same file, as pyarrow will read it (with
        ``read_dictionary`` where the read uses it).
    """
    n = len(parquet_schema)
    owners: list[int] = []  # each leaf's top-level field
    for k, field in enumerate(arrow_schema):
        owners.extend([k] * _leaves(field.type))
    if len(owners) != n:  # cannot happen for pyarrow's own schema: claim nothing
        return [CpuReason(parquet_schema.column(i).path, "the Arrow schema does not match the Parquet schema")
                for i in range(n)]
    out: list[GpuColumn | CpuReason] = []
    for i in range(n):
        col = parquet_schema.column(i)
        field = arrow_schema.field(owners[i])
        single = (i == 0 or owners[i - 1] != owners[i]) and (i == n - 1 or owners[i + 1] != owners[i])
        if not single or col.path != field.name:
            out.append(CpuReason(field.name, "nested column"))
        elif arrow_schema.names.count(field.name) > 1:
            out.append(CpuReason(field.name, "duplicate column name"))
        else:
            out.append(classify_column(col, field))
    return out


# Encodings of data-page values the GPU decodes, per output kind.
_DICT = frozenset((Encoding.PLAIN_DICTIONARY, Encoding.RLE_DICTIONARY))
_DECODED = {
    OutKind.COPY: frozenset((Encoding.PLAIN, Encoding.BYTE_STREAM_SPLIT, Encoding.DELTA_BINARY_PACKED)) | _DICT,
    OutKind.NARROW: frozenset((Encoding.PLAIN, Encoding.BYTE_STREAM_SPLIT, Encoding.DELTA_BINARY_PACKED)) | _DICT,
    OutKind.DECIMAL: frozenset((Encoding.PLAIN, Encoding.BYTE_STREAM_SPLIT, Encoding.DELTA_BINARY_PACKED)) | _DICT,
    OutKind.BOOL: frozenset((Encoding.PLAIN, Encoding.RLE)),
    OutKind.BYTES: frozenset((Encoding.PLAIN, Encoding.DELTA_LENGTH_BYTE_ARRAY, Encoding.DELTA_BYTE_ARRAY)) | _DICT,
}


def encoding_reason(kind: OutKind, physical: Physical, encoding: int) -> str | None:
    """Why the GPU does not decode data-page values of ``encoding`` for a column (None: it does)."""
    allowed = _DECODED[kind]
    if encoding in allowed:
        if encoding == Encoding.DELTA_BINARY_PACKED and physical not in (Physical.INT32, Physical.INT64):
            return f"DELTA_BINARY_PACKED {physical.name}"
        if encoding == Encoding.BYTE_STREAM_SPLIT and physical == Physical.BOOLEAN:
            return "BYTE_STREAM_SPLIT BOOLEAN"
        return None
    try:
        name = Encoding(encoding).name
    except ValueError:
        name = f"encoding {encoding}"
    return f"{name} values of a {physical.name} column decoded as {kind.name}"


def dictionary_reason(kind: OutKind) -> str | None:
    """Why a dictionary page cannot go to the GPU for a column of ``kind`` (None: it can)."""
    return "dictionary-encoded BOOLEAN" if kind == OutKind.BOOL else None
