"""A bounded Thrift compact-protocol codec that keeps every field.

Structs decode to :class:`Struct`, a mapping from field id to
``(type, value)``; fields nobody here knows survive a decode/encode round
trip, so a rewritten footer or page header loses nothing. Names are given
to field ids in :mod:`dask_hwdecomp.format.structs`.

Every read is bounded: nesting depth, container sizes, string lengths and
varint length, and no size may exceed the bytes that remain. Anything else
raises :class:`ThriftError`, never another exception.
"""

from __future__ import annotations

import struct as _struct
from typing import NoReturn

from ..errors import CorruptMetadataError

__all__ = ["ThriftError", "Struct", "RawStruct", "decode_struct", "encode_struct", "T", "Limits"]


class ThriftError(CorruptMetadataError):
    """Bytes that are not a valid (or an overly large) compact-protocol struct."""


class T:
    """Compact-protocol type ids."""

    STOP = 0
    TRUE = 1  # field header only
    FALSE = 2  # field header only
    BOOL = 1  # canonical id of a bool in this module's values
    BYTE = 3
    I16 = 4
    I32 = 5
    I64 = 6
    DOUBLE = 7
    BINARY = 8
    LIST = 9
    SET = 10
    MAP = 11
    STRUCT = 12


class Limits:
    """Bounds applied while decoding."""

    max_depth = 64
    max_container = 1 << 24
    max_string = 1 << 30


class Struct(dict):
    """A decoded struct: ``{field_id: (type, value)}``.

    Lists and sets are ``(element_type, [values])``, maps are
    ``(key_type, value_type, [(key, value), ...])``, structs are
    :class:`Struct`, binaries are ``bytes``.
    """

    # The encoded bytes of a struct decoded in lazy mode (page headers): it
    # re-encodes as these bytes. Set on decode only; ``copy()`` drops it, and
    # code that changes a struct changes a copy (never the decoded object).
    raw: bytes | None = None

    def get_value(self, fid: int, default=None):
        item = self.get(fid)
        return default if item is None else item[1]

    def copy(self) -> Struct:  # shallow copy, same type
        return Struct(self)


class RawStruct:
    """A nested struct kept as its encoded bytes (see ``decode_struct(lazy_depth=)``).

    It re-encodes verbatim; its content was checked to be well formed (and
    within the limits) when it was skipped.
    """

    __slots__ = ("encoded",)

    def __init__(self, encoded: bytes):
        self.encoded = encoded

    def __eq__(self, other):
        return isinstance(other, RawStruct) and other.encoded == self.encoded

    def __repr__(self):
        return f"RawStruct({len(self.encoded)} bytes)"


def _fail(what: str, pos: int) -> NoReturn:
    raise ThriftError(f"thrift: {what} at byte {pos}")


_ELEMENT_TYPES = frozenset(
    (T.BYTE, T.I16, T.I32, T.I64, T.DOUBLE, T.BINARY, T.LIST, T.SET, T.MAP, T.STRUCT)
)
# Max bytes of a zigzag varint per integer type, and the value range.
_INT_BYTES = {T.I16: 3, T.I32: 5, T.I64: 10}
_INT_RANGE = {T.I16: 1 << 15, T.I32: 1 << 31, T.I64: 1 << 63}


def _canon(t: int) -> int:
    return T.BOOL if t in (T.TRUE, T.FALSE) else t


def _read_varint(b, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    n = shift = 0
    stop = pos + max_bytes
    if stop > end:
        stop = end
    while pos < stop:
        x = b[pos]
        pos += 1
        n |= (x & 0x7F) << shift
        if x < 0x80:
            return n, pos
        shift += 7
    if pos >= end:
        _fail("unexpected end of data", pos)
    _fail(f"varint longer than {max_bytes} bytes", pos)


def _int(b, pos: int, end: int, ttype: int) -> tuple[int, int]:
    n, pos = _read_varint(b, pos, end, _INT_BYTES[ttype])
    v = (n >> 1) ^ -(n & 1)
    bound = _INT_RANGE[ttype]
    if not -bound <= v < bound:
        _fail(f"integer {v} out of range for type {ttype}", pos)
    return v, pos


def _size(b, pos: int, end: int, what: str) -> tuple[int, int]:
    n, pos = _read_varint(b, pos, end, 5)
    if n > Limits.max_container:
        _fail(f"{what} size {n} exceeds the limit {Limits.max_container}", pos)
    if n > end - pos:
        _fail(f"{what} size {n} exceeds the {end - pos} bytes that remain", pos)
    return n, pos


def _list_head(b, pos: int, end: int) -> tuple[int, int, int]:
    """A list header: (element type code, element count, position after it).

    The count is bounded by the bytes that remain (every element takes at
    least one byte), so no list can make the reader allocate past its input.
    """
    if pos >= end:
        _fail("unexpected end of data", pos)
    head = b[pos]
    pos += 1
    n = head >> 4
    if n == 15:
        n, pos = _size(b, pos, end, "list")
    elif n > end - pos:
        _fail(f"list size {n} exceeds the bytes that remain", pos)
    return head & 0x0F, n, pos

def _bool_elem(b, pos: int, end: int) -> tuple[bool, int]:
    # Apache Thrift's compact reader (pyarrow's) takes a bool element as
    # true when its byte is 1 and false otherwise, never as an error.
    if pos >= end:
        _fail("unexpected end of data", pos)
    return b[pos] == 1, pos + 1


def _value(b, pos: int, end: int, ttype: int, depth: int):
    """Decode one value of ``ttype``; returns (value, new position)."""
    if ttype in _INT_BYTES:
        return _int(b, pos, end, ttype)
    if ttype == T.BINARY:
        n, pos = _read_varint(b, pos, end, 5)
        if n > Limits.max_string:
            _fail(f"binary length {n} exceeds the limit {Limits.max_string}", pos)
        if n > end - pos:
            _fail(f"length {n} exceeds the {end - pos} bytes that remain", pos)
        return bytes(b[pos : pos + n]), pos + n
    if ttype == T.BYTE:
        if pos >= end:
            _fail("unexpected end of data", pos)
        x = b[pos]
        return (x - 256 if x > 127 else x), pos + 1
    if ttype == T.DOUBLE:
        if end - pos < 8:
            _fail("unexpected end of data", pos)
        return _struct.unpack_from("<d", b, pos)[0], pos + 8
    if depth >= Limits.max_depth:
        _fail(f"nesting deeper than {Limits.max_depth}", pos)
    if ttype == T.STRUCT:
        return _struct_at(b, pos, end, depth + 1)
    if ttype in (T.LIST, T.SET):
        etype, n, pos = _list_head(b, pos, end)
        items = []
        if etype in (T.TRUE, T.FALSE):
            for _ in range(n):
                v, pos = _bool_elem(b, pos, end)
                items.append(v)
            return (T.BOOL, items), pos
        if n and etype not in _ELEMENT_TYPES:
            _fail(f"unknown element type {etype}", pos)
        for _ in range(n):
            v, pos = _value(b, pos, end, etype, depth + 1)
            items.append(v)
        return (etype, items), pos
    if ttype == T.MAP:
        n, pos = _size(b, pos, end, "map")
        if n == 0:
            return (0, 0, []), pos
        if pos >= end:
            _fail("unexpected end of data", pos)
        head = b[pos]
        pos += 1
        ktype, vtype = head >> 4, head & 0x0F
        for t in (ktype, vtype):
            if t not in _ELEMENT_TYPES and t not in (T.TRUE, T.FALSE):
                _fail(f"unknown map element type {t}", pos)
        pairs = []
        for _ in range(n):
            if ktype in (T.TRUE, T.FALSE):
                k, pos = _bool_elem(b, pos, end)
            else:
                k, pos = _value(b, pos, end, ktype, depth + 1)
            if vtype in (T.TRUE, T.FALSE):
                v, pos = _bool_elem(b, pos, end)
            else:
                v, pos = _value(b, pos, end, vtype, depth + 1)
            pairs.append((k, v))
        return (_canon(ktype), _canon(vtype), pairs), pos
    _fail(f"unknown type {ttype}", pos)


# Compact-protocol type codes Apache Thrift accepts in a list header (13 is
# UUID); 14 and 15 make it throw.
_MAX_DECLARED_TYPE = 13


def _list_as(b, pos: int, end: int, elem, depth: int):
    """A list field of known element type, read as Thrift's generated code reads it.

    The generated reader (pyarrow's) checks only that the declared element
    type is a type at all, then reads every element as the schema's type:
    ``elem`` is a type id, or a schema dict for a list of structs. A damaged
    element-type code thus changes nothing for pyarrow, and nothing here.
    The list is returned with the schema's element type.
    """
    if depth >= Limits.max_depth:
        _fail(f"nesting deeper than {Limits.max_depth}", pos)
    declared, n, pos = _list_head(b, pos, end)
    if declared > _MAX_DECLARED_TYPE:
        _fail(f"unknown element type {declared}", pos)
    items = []
    if isinstance(elem, dict):
        for _ in range(n):
            v, pos = _struct_at(b, pos, end, depth + 1, _EAGER, elem)
            items.append(v)
        return (T.STRUCT, items), pos
    for _ in range(n):
        v, pos = _value(b, pos, end, elem, depth + 1)
        items.append(v)
    return (elem, items), pos


def _field_header(b, pos: int, end: int, last: int) -> tuple[int, int, int]:
    """(type, field id, pos) of the field header at ``pos``; type ``T.STOP`` ends the struct.

    Type 0 ends the struct whatever the high nibble holds, as in Apache
    Thrift's compact protocol (which pyarrow uses): a flipped bit there
    changes nothing for pyarrow, so nothing here either.
    """
    if pos >= end:
        _fail("unexpected end of data", pos)
    head = b[pos]
    pos += 1
    ttype = head & 0x0F
    if ttype == T.STOP:
        return ttype, last, pos
    delta = head >> 4
    if delta:
        fid = last + delta
        if fid >= 1 << 15:
            _fail(f"field id {fid} out of range", pos)
        return ttype, fid, pos
    fid, pos = _int(b, pos, end, T.I16)
    return ttype, fid, pos


def _skip(b, pos: int, end: int, ttype: int, depth: int) -> int:
    """Check one value of ``ttype`` as :func:`_value` does, without building it."""
    if ttype in _INT_BYTES:
        return _read_varint(b, pos, end, _INT_BYTES[ttype])[1]
    if ttype == T.BINARY:
        n, pos = _read_varint(b, pos, end, 5)
        if n > Limits.max_string or n > end - pos:
            _fail(f"binary length {n} exceeds the bytes that remain or the limit", pos)
        return pos + n
    if ttype == T.BYTE:
        if pos >= end:
            _fail("unexpected end of data", pos)
        return pos + 1
    if ttype == T.DOUBLE:
        if end - pos < 8:
            _fail("unexpected end of data", pos)
        return pos + 8
    if ttype == T.STRUCT:
        if depth >= Limits.max_depth:
            _fail(f"nesting deeper than {Limits.max_depth}", pos)
        last = 0
        while True:
            ftype, last, pos = _field_header(b, pos, end, last)
            if ftype == T.STOP:
                return pos
            if ftype != T.TRUE and ftype != T.FALSE:
                pos = _skip(b, pos, end, ftype, depth + 1)
    # containers are rare in the structs skipped here: decode and drop
    return _value(b, pos, end, ttype, depth)[1]


_EAGER = 1 << 30


def _struct_at(b, pos: int, end: int, depth: int, lazy: int = _EAGER, schema: dict | None = None) -> tuple[Struct, int]:
    if depth >= Limits.max_depth:
        _fail(f"nesting deeper than {Limits.max_depth}", pos)
    out = Struct()
    last = 0
    while True:
        ttype, fid, pos = _field_header(b, pos, end, last)
        if ttype == T.STOP:
            return out, pos
        if ttype == T.TRUE or ttype == T.FALSE:
            out[fid] = (T.BOOL, ttype == T.TRUE)
        elif ttype == T.I32 or ttype == T.I64:
            # The common case, inlined: one zigzag varint.
            n = shift = 0
            maxb = 5 if ttype == T.I32 else 10
            stop = pos + maxb
            if stop > end:
                stop = end
            while True:
                if pos >= stop:
                    _fail("unexpected end of data" if pos >= end else f"varint longer than {maxb} bytes", pos)
                x = b[pos]
                pos += 1
                n |= (x & 0x7F) << shift
                if x < 0x80:
                    break
                shift += 7
            v = (n >> 1) ^ -(n & 1)
            bound = _INT_RANGE[ttype]
            if not -bound <= v < bound:
                _fail(f"integer {v} out of range for type {ttype}", pos)
            out[fid] = (ttype, v)
        elif ttype == T.STRUCT and depth + 1 >= lazy:
            start = pos
            pos = _skip(b, pos, end, T.STRUCT, depth + 1)
            out[fid] = (T.STRUCT, RawStruct(bytes(b[start:pos])))
        elif ttype == T.STRUCT:
            start = pos
            spec = schema.get(fid) if schema else None
            sub = spec[1] if spec is not None and spec[0] == T.STRUCT else None
            v, pos = _struct_at(b, pos, end, depth + 1, lazy, sub)
            if lazy < _EAGER:
                v.raw = bytes(b[start:pos])
            out[fid] = (T.STRUCT, v)
        elif ttype == T.LIST and schema and fid in schema and schema[fid][0] == T.LIST:
            v, pos = _list_as(b, pos, end, schema[fid][1], depth)
            out[fid] = (T.LIST, v)
        else:
            v, pos = _value(b, pos, end, ttype, depth)
            out[fid] = (ttype, v)
        last = fid


def decode_struct(
    buf, pos: int = 0, end: int | None = None, *, lazy_depth: int | None = None, schema: dict | None = None
) -> tuple[Struct, int]:
    """Decode one struct from ``buf[pos:end]``.

    Parameters
    ----------
    buf : bytes-like
        The encoded bytes (bytes, bytearray or a 1-D byte memoryview).
    pos, end : int
        The window to read in.
    lazy_depth : int, optional
        Structs nested this deep (the top level is 0) are checked but kept
        as :class:`RawStruct` bytes: page headers carry statistics nobody here
        reads, and decoding them would cost more than the rest of the header.
    schema : dict, optional
        The list fields whose element type is known, as Thrift's generated
        code knows them: ``{field_id: (T.LIST, element)}`` with ``element``
        a type id or the schema dict of a struct, and ``{field_id:
        (T.STRUCT, schema)}`` for the structs that hold such lists. Those
        lists are read with the known element type whatever their header
        declares; every other field is read generically.

    Returns
    -------
    (Struct, int)
        The struct and the offset just after it.

    Raises
    ------
    ThriftError
        Malformed, truncated, or over-limit input.
    """
    if end is None:
        end = len(buf)
    if not 0 <= pos <= end <= len(buf):
        raise ThriftError(f"thrift: window {pos}..{end} outside a buffer of {len(buf)} bytes")
    try:
        return _struct_at(buf, pos, end, 0, _EAGER if lazy_depth is None else lazy_depth, schema)
    except RecursionError:  # pragma: no cover - bounded by max_depth
        raise ThriftError("thrift: nesting too deep") from None


# --- encoding ---------------------------------------------------------------


def _varint(out: bytearray, n: int) -> None:
    while True:
        if n < 0x80:
            out.append(n)
            return
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def _zz(n: int, bits: int) -> int:
    return ((n << 1) ^ (n >> (bits - 1))) & ((1 << bits) - 1)


def _write_value(out: bytearray, ttype: int, value) -> None:
    if ttype == T.BOOL:
        out.append(1 if value else 2)
    elif ttype == T.BYTE:
        out.append(value & 0xFF)
    elif ttype == T.I16:
        _varint(out, _zz(value, 16))
    elif ttype == T.I32:
        _varint(out, _zz(value, 32))
    elif ttype == T.I64:
        _varint(out, _zz(value, 64))
    elif ttype == T.DOUBLE:
        out += _struct.pack("<d", value)
    elif ttype == T.BINARY:
        _varint(out, len(value))
        out += value
    elif ttype in (T.LIST, T.SET):
        etype, items = value
        wire = T.TRUE if etype == T.BOOL else etype
        if len(items) < 15:
            out.append((len(items) << 4) | wire)
        else:
            out.append(0xF0 | wire)
            _varint(out, len(items))
        for item in items:
            _write_value(out, etype, item)
    elif ttype == T.MAP:
        ktype, vtype, items = value
        _varint(out, len(items))
        if items:
            kw = T.TRUE if ktype == T.BOOL else ktype
            vw = T.TRUE if vtype == T.BOOL else vtype
            out.append((kw << 4) | vw)
            for k, v in items:
                _write_value(out, ktype, k)
                _write_value(out, vtype, v)
    elif ttype == T.STRUCT:
        if isinstance(value, RawStruct):
            out += value.encoded
        else:
            _write_struct(out, value)
    else:
        raise ThriftError(f"thrift: cannot encode type {ttype}")


def _write_struct(out: bytearray, s: Struct) -> None:
    if s.raw is not None:
        out += s.raw
        return
    last = 0
    for fid in sorted(s):
        ttype, value = s[fid]
        wire = (T.TRUE if value else T.FALSE) if ttype == T.BOOL else ttype
        delta = fid - last
        if 0 < delta <= 15:
            out.append((delta << 4) | wire)
        else:
            out.append(wire)
            _varint(out, _zz(fid, 16))
        if ttype != T.BOOL:
            _write_value(out, ttype, value)
        last = fid
    out.append(T.STOP)


def encode_struct(s: Struct) -> bytes:
    """Encode a :class:`Struct` (fields in ascending id order)."""
    out = bytearray()
    _write_struct(out, s)
    return bytes(out)
