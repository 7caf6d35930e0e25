"""The bounded Thrift compact-protocol codec: round trips, hostile bytes, limits, real footers."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dask_hwdecomp.errors import CorruptMetadataError
from dask_hwdecomp.format.thrift import Limits, Struct, T, ThriftError, decode_struct, encode_struct

from corruption import varint

# --- generated structs ----------------------------------------------------------

_SCALARS = {
    T.BOOL: st.booleans(),
    T.BYTE: st.integers(-128, 127),
    T.I16: st.integers(-(1 << 15), (1 << 15) - 1),
    T.I32: st.integers(-(1 << 31), (1 << 31) - 1),
    T.I64: st.integers(-(1 << 63), (1 << 63) - 1),
    # NaN != NaN would fail the equality, not the codec; NaN has its own test
    T.DOUBLE: st.floats(allow_nan=False),
    T.BINARY: st.binary(max_size=40),
}
_ELEMENT_TYPES = [T.BOOL, T.BYTE, T.I16, T.I32, T.I64, T.DOUBLE, T.BINARY, T.LIST, T.SET, T.MAP, T.STRUCT]
_KEY_TYPES = [T.BOOL, T.BYTE, T.I16, T.I32, T.I64, T.DOUBLE, T.BINARY]  # hashable-ish, as in real IDLs

# Field ids: small deltas (short form), big deltas and negative ids (long form).
_FIELD_IDS = st.one_of(st.integers(1, 20), st.integers(-(1 << 15), (1 << 15) - 1))


def _typed(ttype: int, depth: int):
    """A strategy for a value of ``ttype`` in this module's Struct representation."""
    if ttype in _SCALARS:
        return _SCALARS[ttype]
    if depth <= 0:
        # out of depth: an empty container of its kind
        if ttype in (T.LIST, T.SET):
            return st.just((T.I32, []))
        if ttype == T.MAP:
            return st.just((0, 0, []))
        return st.just(Struct())
    if ttype in (T.LIST, T.SET):
        return st.sampled_from(_ELEMENT_TYPES).flatmap(
            lambda et: st.lists(_typed(et, depth - 1), max_size=20).map(lambda xs: (et, xs))
        )
    if ttype == T.MAP:
        def entries(kv):
            k, v = kv
            return st.lists(st.tuples(_typed(k, depth - 1), _typed(v, depth - 1)), min_size=1, max_size=6).map(
                lambda xs: (k, v, xs)
            )

        # An empty map carries no element types on the wire: it decodes as (0, 0, []).
        return st.one_of(
            st.just((0, 0, [])),
            st.tuples(st.sampled_from(_KEY_TYPES), st.sampled_from(_ELEMENT_TYPES)).flatmap(entries),
        )
    return structs(depth - 1)


def structs(depth: int = 3):
    """Structs of every field type, nested ``depth`` deep."""
    field = st.sampled_from(_ELEMENT_TYPES).flatmap(lambda t: _typed(t, depth).map(lambda v: (t, v)))
    return st.dictionaries(_FIELD_IDS, field, max_size=8).map(Struct)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(structs())
def test_roundtrip_generated_structs(s):
    encoded = encode_struct(s)
    decoded, end = decode_struct(encoded)
    assert end == len(encoded)
    assert decoded == s
    assert encode_struct(decoded) == encoded  # the encoding is canonical


@given(st.lists(st.booleans(), max_size=40), st.dictionaries(st.integers(1, 300), st.booleans(), max_size=20))
def test_roundtrip_bools_in_fields_and_lists(items, fields):
    s = Struct({fid: (T.BOOL, v) for fid, v in fields.items()})
    s[400] = (T.LIST, (T.BOOL, items))
    s[401] = (T.MAP, (T.BOOL, T.BOOL, [(a, not a) for a in items[:5]]) if items else (0, 0, []))
    assert decode_struct(encode_struct(s))[0] == s


@pytest.mark.parametrize("fids", [[1, 2, 3], [15, 30, 45], [1, 16, 17], [-5, 0, 3], [32767], [-32768, 32767], [100, 20000]])
def test_roundtrip_field_id_deltas(fids):
    s = Struct({fid: (T.I32, fid) for fid in fids})
    assert decode_struct(encode_struct(s))[0] == s


def test_unknown_fields_survive():
    # A PageHeader with a field id no Parquet version defines, and a nested unknown struct.
    s = Struct({1: (T.I32, 0), 2: (T.I32, 10), 3: (T.I32, 10), 99: (T.STRUCT, Struct({7: (T.BINARY, b"x")}))})
    decoded = decode_struct(encode_struct(s))[0]
    assert decoded[99] == (T.STRUCT, Struct({7: (T.BINARY, b"x")}))


def test_nan_double_keeps_its_bits():
    nan = struct.unpack("<d", b"\x01\x00\x00\x00\x00\x00\xf8\x7f")[0]
    encoded = encode_struct(Struct({1: (T.DOUBLE, nan)}))
    decoded = decode_struct(encoded)[0].get_value(1)
    assert math.isnan(decoded) and encode_struct(Struct({1: (T.DOUBLE, decoded)})) == encoded


# --- hostile bytes ---------------------------------------------------------------


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_thrift_error(data):
    try:
        decode_struct(data)
    except ThriftError:
        pass


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(structs(2), st.data())
def test_mutated_encodings_raise_only_thrift_error(s, data):
    encoded = bytearray(encode_struct(s))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(encoded) - 1))
        encoded[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(encoded)))
    try:
        decode_struct(bytes(encoded[:cut]))
    except ThriftError as exc:
        assert isinstance(exc, CorruptMetadataError)
        assert str(exc).startswith("thrift: ")


@given(st.binary(max_size=50), st.integers(-5, 60), st.integers(-5, 60))
def test_windows_outside_the_buffer_raise_thrift_error(data, pos, end):
    try:
        decode_struct(data, pos, end)
    except ThriftError:
        pass


# --- limits ------------------------------------------------------------------------


def _nested(depth: int) -> bytes:
    # field 1 of type struct, nested depth times, then STOPs
    return bytes([0x1C]) * depth + bytes(depth + 1)


def test_depth_limit():
    decode_struct(_nested(Limits.max_depth - 1))
    with pytest.raises(ThriftError, match=rf"nesting deeper than {Limits.max_depth}"):
        decode_struct(_nested(Limits.max_depth + 1))
    with pytest.raises(ThriftError, match="nesting deeper"):
        decode_struct(_nested(100_000))  # no RecursionError


def test_nested_lists_depth_limit():
    # field 1: list of 1 list of 1 list ... (0x19 = list of lists, one element)
    data = bytes([0x19]) + bytes([0x19]) * 200 + bytes([0x15, 0x00]) + b"\x00"
    with pytest.raises(ThriftError, match="nesting deeper"):
        decode_struct(data)


def test_container_limit(monkeypatch):
    monkeypatch.setattr(Limits, "max_container", 100)
    ok = bytes([0x19, 0xF3]) + varint(100) + bytes(100) + b"\x00"  # list<byte> of 100
    assert len(decode_struct(ok)[0].get_value(1)[1]) == 100
    big = bytes([0x19, 0xF3]) + varint(101) + bytes(101) + b"\x00"
    with pytest.raises(ThriftError, match=r"list size 101 exceeds the limit 100"):
        decode_struct(big)
    bigmap = bytes([0x1B]) + varint(101) + bytes([0x33]) + bytes(202) + b"\x00"
    with pytest.raises(ThriftError, match=r"map size 101 exceeds the limit 100"):
        decode_struct(bigmap)


def test_container_size_larger_than_the_input():
    # a list claiming 2**24 elements in 10 bytes fails before allocating anything
    data = bytes([0x19, 0xF3]) + varint(1 << 24) + bytes(10)
    with pytest.raises(ThriftError, match=r"list size 16777216 exceeds the 10 bytes that remain"):
        decode_struct(data)
    data = bytes([0x1B]) + varint(1 << 24) + bytes(10)
    with pytest.raises(ThriftError, match=r"map size"):
        decode_struct(data)


def test_string_limit(monkeypatch):
    monkeypatch.setattr(Limits, "max_string", 10)
    decode_struct(bytes([0x18, 10]) + b"x" * 10 + b"\x00")
    with pytest.raises(ThriftError, match=r"binary length 11 exceeds the limit 10"):
        decode_struct(bytes([0x18, 11]) + b"x" * 11 + b"\x00")


def test_string_longer_than_input():
    with pytest.raises(ThriftError, match=r"length 1000 exceeds the 3 bytes that remain"):
        decode_struct(bytes([0x18]) + varint(1000) + b"abc")


@pytest.mark.parametrize(
    "ttype, max_bytes",
    [(T.I16, 3), (T.I32, 5), (T.I64, 10)],
)
def test_varint_length_limit(ttype, max_bytes):
    head = bytes([0x10 | ttype])
    decode_struct(head + b"\x80" * (max_bytes - 1) + b"\x00" + b"\x00")
    with pytest.raises(ThriftError, match=rf"varint longer than {max_bytes} bytes"):
        decode_struct(head + b"\x80" * max_bytes + b"\x00" + b"\x00")


@pytest.mark.parametrize(
    "ttype, value",
    [(T.I16, 1 << 15), (T.I32, 1 << 31), (T.I32, -(1 << 31) - 1)],
)
def test_integer_range(ttype, value):
    zz = (value << 1) ^ (value >> 63)
    with pytest.raises(ThriftError, match="out of range"):
        decode_struct(bytes([0x10 | ttype]) + varint(zz & ((1 << 64) - 1)) + b"\x00")


def test_unknown_types():
    with pytest.raises(ThriftError, match="unknown type 13"):
        decode_struct(bytes([0x1D, 0]))
    with pytest.raises(ThriftError, match="unknown element type"):
        decode_struct(bytes([0x19, 0x1E, 0]))



def test_bool_element_of_any_byte_reads_as_thrift_reads_it():
    """Apache Thrift takes a bool list element as true for byte 1, false for any other."""
    s, _ = decode_struct(bytes([0x19, 0x31, 7, 1, 2, 0]))
    assert s[1] == (T.LIST, (T.BOOL, [False, True, False]))


# --- real footers and page headers ----------------------------------------------------


def _par1_files(corpus):
    out = []
    for path in sorted(corpus.rglob("*.parquet*")):
        data = path.read_bytes()
        if data[-4:] == b"PAR1" and len(data) >= 12:
            out.append((path, data))
    return out


def test_corpus_footers_roundtrip(corpus):
    files = _par1_files(corpus)
    assert len(files) > 80
    for path, data in files:
        (length,) = struct.unpack("<I", data[-8:-4])
        raw = data[-8 - length : -8]
        meta, end = decode_struct(raw)
        encoded = encode_struct(meta)
        assert decode_struct(encoded)[0] == meta, path
        # Every writer in the corpus encodes canonically; a plaintext-footer
        # encrypted file has a signature after the struct.
        assert encoded == raw[:end], path


def _first_page_offsets(corpus, field: str):
    """(path, bytes, offset) of each column's first page (by ``field``) in row group 0."""
    from dask_hwdecomp.format.footer import parse_footer
    from dask_hwdecomp.format.structs import ColumnChunk, ColumnMetaData

    for path, data in _par1_files(corpus):
        try:
            footer = parse_footer(data, len(data), str(path))
        except CorruptMetadataError:
            continue
        if footer.unsupported_reason() or not footer.num_row_groups:
            continue
        for chunk in footer.column_chunks(0):
            md = chunk.get_value(ColumnChunk.meta_data)
            off = md.get_value(getattr(ColumnMetaData, field)) or md.get_value(ColumnMetaData.data_page_offset)
            if 4 <= off < len(data):
                yield path, data, off


def test_corpus_page_headers_roundtrip(corpus):
    count = 0
    for path, data, off in _first_page_offsets(corpus, "dictionary_page_offset"):
        try:
            header, end = decode_struct(data, off, len(data))
        except ThriftError:
            continue  # bad_data with broken headers
        assert encode_struct(header) == data[off:end], path
        count += 1
    assert count > 300


def test_lazy_decode_keeps_nested_structs_verbatim(corpus):
    """Page headers are decoded with ``lazy_depth=2``: statistics stay raw bytes."""
    from dask_hwdecomp.format.thrift import RawStruct

    raw_seen = 0
    for path, data, off in _first_page_offsets(corpus, "data_page_offset"):
        try:
            eager, end = decode_struct(data, off, len(data))
        except ThriftError:
            continue
        lazy, lazy_end = decode_struct(data, off, len(data), lazy_depth=2)
        assert lazy_end == end, path
        assert encode_struct(lazy) == data[off:end], path
        # a changed copy re-encodes to what the eager decode re-encodes to
        changed, changed_eager = lazy.copy(), eager.copy()
        for s in (changed, changed_eager):
            s[3] = (T.I32, 12345)
            s.pop(4, None)
        assert decode_struct(encode_struct(changed))[0] == decode_struct(encode_struct(changed_eager))[0], path
        for _, (ttype, value) in lazy.items():
            if ttype == T.STRUCT:
                raw_seen += sum(isinstance(v, RawStruct) for _, v in value.values())
    assert raw_seen > 100  # statistics were really skipped


def test_lazy_decode_checks_what_it_skips():
    # a nested-nested struct with a binary longer than the input
    bad = bytes([0x1C, 0x1C, 0x18, 0x7F, 0x41, 0x00, 0x00, 0x00])
    with pytest.raises(ThriftError):
        decode_struct(bad, lazy_depth=2)
    with pytest.raises(ThriftError):
        decode_struct(bad)


def test_lazy_decode_rejects_what_eager_decode_rejects():
    # a statistics-depth struct whose short-form field ids climb past 2**15
    inner = bytes([0xF5, 0x00] * 2200) + b"\x00"
    data = bytes([0x1C, 0x1C]) + inner + b"\x00\x00"
    with pytest.raises(ThriftError, match="field id"):
        decode_struct(data)
    with pytest.raises(ThriftError, match="field id"):
        decode_struct(data, lazy_depth=2)
