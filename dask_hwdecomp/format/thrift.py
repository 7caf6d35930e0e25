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

from ..errors import CorruptMetadataError

__all__ = ["ThriftError", "Struct", "decode_struct", "encode_struct", "T", "Limits"]


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

    def get_value(self, fid: int, default=None):
        item = self.get(fid)
        return default if item is None else item[1]

    def set_value(self, fid: int, ttype: int, value) -> None:
        self[fid] = (ttype, value)

    def copy(self) -> "Struct":  # shallow copy, same type
        return Struct(self)


class _Reader:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf, pos: int, end: int):
        self.buf = buf
        self.pos = pos
        self.end = end

    def fail(self, what: str):
        raise ThriftError(f"thrift: {what} at byte {self.pos}")

    def byte(self) -> int:
        if self.pos >= self.end:
            self.fail("unexpected end of data")
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def varint(self, max_bytes: int) -> int:
        result = shift = 0
        for _ in range(max_bytes):
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
        self.fail(f"varint longer than {max_bytes} bytes")

    def zigzag(self, max_bytes: int) -> int:
        n = self.varint(max_bytes)
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        if n > self.end - self.pos:
            self.fail(f"length {n} exceeds the {self.end - self.pos} bytes that remain")
        out = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return out

    def size(self, what: str) -> int:
        n = self.varint(5)
        if n > Limits.max_container:
            self.fail(f"{what} size {n} exceeds the limit {Limits.max_container}")
        if n > self.end - self.pos:
            self.fail(f"{what} size {n} exceeds the {self.end - self.pos} bytes that remain")
        return n

    def value(self, ttype: int, depth: int):
        if ttype == T.BYTE:
            b = self.byte()
            return b - 256 if b > 127 else b
        if ttype == T.I16:
            v = self.zigzag(3)
            if not -(1 << 15) <= v < (1 << 15):
                self.fail(f"i16 value {v} out of range")
            return v
        if ttype == T.I32:
            v = self.zigzag(5)
            if not -(1 << 31) <= v < (1 << 31):
                self.fail(f"i32 value {v} out of range")
            return v
        if ttype == T.I64:
            v = self.zigzag(10)
            if not -(1 << 63) <= v < (1 << 63):
                self.fail(f"i64 value {v} out of range")
            return v
        if ttype == T.DOUBLE:
            return _struct.unpack("<d", self.take(8))[0]
        if ttype == T.BINARY:
            n = self.varint(5)
            if n > Limits.max_string:
                self.fail(f"binary length {n} exceeds the limit {Limits.max_string}")
            return self.take(n)
        if depth >= Limits.max_depth:
            self.fail(f"nesting deeper than {Limits.max_depth}")
        if ttype in (T.LIST, T.SET):
            head = self.byte()
            etype = head & 0x0F
            n = head >> 4
            if n == 15:
                n = self.size("list")
            elif n > self.end - self.pos:
                self.fail(f"list size {n} exceeds the bytes that remain")
            if etype in (T.TRUE, T.FALSE):
                items = []
                for _ in range(n):
                    b = self.byte()
                    if b not in (0, 1, 2):
                        self.fail(f"bool list element {b}")
                    items.append(b == 1)
                return (T.BOOL, items)
            if n and etype not in _ELEMENT_TYPES:
                self.fail(f"unknown element type {etype}")
            return (etype, [self.value(etype, depth + 1) for _ in range(n)])
        if ttype == T.MAP:
            n = self.size("map")
            if n == 0:
                return (0, 0, [])
            head = self.byte()
            ktype, vtype = head >> 4, head & 0x0F
            for t in (ktype, vtype):
                if t not in _ELEMENT_TYPES and t not in (T.TRUE, T.FALSE):
                    self.fail(f"unknown map element type {t}")
            items = []
            for _ in range(n):
                k = self._elem(ktype, depth)
                v = self._elem(vtype, depth)
                items.append((k, v))
            return (_canon(ktype), _canon(vtype), items)
        if ttype == T.STRUCT:
            return self.struct(depth + 1)
        self.fail(f"unknown type {ttype}")

    def _elem(self, etype: int, depth: int):
        if etype in (T.TRUE, T.FALSE):
            b = self.byte()
            if b not in (0, 1, 2):
                self.fail(f"bool element {b}")
            return b == 1
        return self.value(etype, depth + 1)

    def struct(self, depth: int) -> Struct:
        if depth >= Limits.max_depth:
            self.fail(f"nesting deeper than {Limits.max_depth}")
        out = Struct()
        last = 0
        while True:
            head = self.byte()
            if head == T.STOP:
                return out
            ttype = head & 0x0F
            delta = head >> 4
            if delta:
                fid = last + delta
            else:
                fid = self.zigzag(3)
            if not -(1 << 15) <= fid < (1 << 15):
                self.fail(f"field id {fid} out of range")
            if ttype == T.TRUE:
                out[fid] = (T.BOOL, True)
            elif ttype == T.FALSE:
                out[fid] = (T.BOOL, False)
            else:
                out[fid] = (ttype, self.value(ttype, depth))
            last = fid


_ELEMENT_TYPES = frozenset(
    (T.BYTE, T.I16, T.I32, T.I64, T.DOUBLE, T.BINARY, T.LIST, T.SET, T.MAP, T.STRUCT)
)


def _canon(t: int) -> int:
    return T.BOOL if t in (T.TRUE, T.FALSE) else t


def decode_struct(buf, pos: int = 0, end: int | None = None) -> tuple[Struct, int]:
    """Decode one struct from ``buf[pos:end]``.

    Parameters
    ----------
    buf : bytes-like
        The encoded bytes (any buffer indexable by int).
    pos, end : int
        The window to read in.

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
    reader = _Reader(buf, pos, end)
    try:
        return reader.struct(0), reader.pos
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
        _write_struct(out, value)
    else:
        raise ThriftError(f"thrift: cannot encode type {ttype}")


def _write_struct(out: bytearray, s: Struct) -> None:
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
