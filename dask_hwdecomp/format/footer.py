"""Reading a Parquet file's footer into a :class:`Footer`."""

from __future__ import annotations

import re
import struct as _struct
from dataclasses import dataclass

from ..errors import CorruptMetadataError, PageLocation
from ..names import decode_name
from .structs import CODEC_NAMES, Codec, ColumnChunk, ColumnMetaData, FileMetaData, RowGroup
from .thrift import Struct, T, ThriftError, decode_struct

__all__ = ["Footer", "parse_footer", "read_footer", "TAIL_GUESS"]

TAIL_GUESS = 64 * 1024
_DECODED_CODECS = frozenset(c.value for c in Codec if c != Codec.LZO)
_PARQUET_MR = re.compile(rb"\s*parquet-mr(?:\s+version\s+(\d+)(?:\.(\d+))?(?:\.(\d+))?)?", re.IGNORECASE)
MAGIC = b"PAR1"
ENCRYPTED_MAGIC = b"PARE"


@dataclass
class Footer:
    """A decoded ``FileMetaData`` and where it sits in its file.

    Attributes
    ----------
    meta : Struct
        The raw ``FileMetaData`` (every field kept).
    file_size : int
        Size of the file in bytes.
    footer_offset : int
        Offset of the first byte of the encoded ``FileMetaData``.
    path : str
        The file, for error messages.
    """

    meta: Struct
    file_size: int
    footer_offset: int
    path: str
    encrypted_footer: bool = False

    @property
    def row_groups(self) -> list[Struct]:
        return self.meta.get_value(FileMetaData.row_groups, (T.STRUCT, []))[1]

    @property
    def num_row_groups(self) -> int:
        return len(self.row_groups)

    def column_chunks(self, rg: int) -> list[Struct]:
        return self.row_groups[rg].get_value(RowGroup.columns, (T.STRUCT, []))[1]

    @property
    def pads_column_chunks(self) -> bool:
        """True where ``total_compressed_size`` may be understated (PARQUET-816).

        parquet-mr before 1.2.9 left the dictionary page header out of it;
        Arrow reads up to 100 bytes past the declared end for those writers
        only, and so do we: for any other writer a page running past its
        chunk is corrupt.
        """
        created_by = self.meta.get_value(FileMetaData.created_by)
        if not isinstance(created_by, bytes):
            return False
        m = _PARQUET_MR.match(created_by)
        if m is None:
            return False
        version = tuple(int(g) if g else 0 for g in m.groups())
        return version < (1, 2, 9)

    def unsupported_reason(self) -> str | None:
        """Why this path cannot serve the file, or None if it can."""
        if self.encrypted_footer:
            return "the file is encrypted (encrypted footer, magic PARE)"
        if self.meta.get(FileMetaData.encryption_algorithm) is not None:
            return "the file is encrypted (plaintext footer, encrypted columns)"
        for rg in range(self.num_row_groups):
            for chunk in self.column_chunks(rg):
                if chunk.get(ColumnChunk.crypto_metadata) is not None or chunk.get(
                    ColumnChunk.encrypted_column_metadata
                ) is not None:
                    return "a column chunk is encrypted"
                if chunk.get(ColumnChunk.file_path) is not None:
                    return "a column chunk lives in another file (file_path is set)"
                md = chunk.get_value(ColumnChunk.meta_data)
                if md is None:
                    return "a column chunk has no metadata"
                codec = md.get_value(ColumnMetaData.codec)
                if codec not in _DECODED_CODECS:
                    name = CODEC_NAMES.get(codec, f"with id {codec}")
                    return f"a column chunk uses compression codec {name}, which this reader does not decode"
        return None


def column_path(chunk: Struct) -> str:
    """Dotted ``path_in_schema`` of a column chunk ('?' where unknown), as pyarrow prints it."""
    md = chunk.get_value(ColumnChunk.meta_data)
    if md is None:
        return "?"
    parts = md.get_value(ColumnMetaData.path_in_schema, (T.BINARY, []))[1]
    return ".".join(decode_name(p) for p in parts)


def parse_footer(tail: bytes, file_size: int, path: str) -> Footer | int:
    """Decode the footer from the last ``len(tail)`` bytes of a file.

    Returns
    -------
    Footer or int
        The footer, or the number of tail bytes needed when ``tail`` is too
        short to hold it.

    Raises
    ------
    CorruptMetadataError
        Bad magic, a length that does not fit the file, or a footer that
        does not decode.
    """
    where = PageLocation(file=path)
    if file_size < 12:
        raise CorruptMetadataError(
            f"file size {file_size} is smaller than the 12 bytes of an empty Parquet file", where
        )
    if len(tail) < 8:
        return 8
    magic = tail[-4:]
    if magic == ENCRYPTED_MAGIC:
        return Footer(Struct(), file_size, 0, path, encrypted_footer=True)
    if magic != MAGIC:
        raise CorruptMetadataError(f"file does not end in PAR1 (found {bytes(magic)!r})", where)
    (length,) = _struct.unpack("<I", tail[-8:-4])
    if length > file_size - 12:
        raise CorruptMetadataError(
            f"parquet metadata length {length} exceeds available file size {file_size - 12}", where
        )
    if length + 8 > len(tail):
        return length + 8
    start = len(tail) - 8 - length
    try:
        meta, end = decode_struct(tail, start, len(tail) - 8, schema=FOOTER_SCHEMA)
    except ThriftError as exc:
        raise CorruptMetadataError(f"footer does not decode ({exc.reason})", where) from None
    _check_shape(meta, where)
    return Footer(meta, file_size, file_size - 8 - length, path)


# The footer's list fields, with their element types as parquet.thrift gives
# them (structs without lists are empty dicts): read as pyarrow's generated
# Thrift code reads them, whatever element type a list's header declares.
_SIZE_STATISTICS = {2: (T.LIST, T.I64), 3: (T.LIST, T.I64)}
_GEOSPATIAL_STATISTICS = {2: (T.LIST, T.I32)}
_COLUMN_META = {
    2: (T.LIST, T.I32),  # encodings
    3: (T.LIST, T.BINARY),  # path_in_schema
    8: (T.LIST, {}),  # key_value_metadata
    13: (T.LIST, {}),  # encoding_stats
    16: (T.STRUCT, _SIZE_STATISTICS),
    17: (T.STRUCT, _GEOSPATIAL_STATISTICS),
}
_ROW_GROUP = {1: (T.LIST, {3: (T.STRUCT, _COLUMN_META)}), 4: (T.LIST, {})}  # columns, sorting_columns
FOOTER_SCHEMA = {
    2: (T.LIST, {}),  # schema
    4: (T.LIST, _ROW_GROUP),  # row_groups
    5: (T.LIST, {}),  # key_value_metadata
    7: (T.LIST, {}),  # column_orders
}


def _want(s, fid: int, ttype: int, name: str, where: PageLocation, elem: int | None = None):
    item = s.get(fid)
    if item is None:
        return None
    if item[0] != ttype:
        raise CorruptMetadataError(f"footer field {name} has thrift type {item[0]}, expected {ttype}", where)
    if elem is not None and item[1][0] != elem and item[1][1]:
        raise CorruptMetadataError(
            f"footer field {name} is a list of thrift type {item[1][0]}, expected a list of {elem}", where
        )
    return item[1]


# Fields parquet.thrift marks required, with their types: pyarrow's Thrift
# reader refuses a footer that lacks one (or has it with another type), so
# this reader, which rewrites the footer and would heal some, refuses it too.
_REQUIRED = {
    "FileMetaData": ((1, T.I32, None, "version"), (2, T.LIST, T.STRUCT, "schema"),
                     (3, T.I64, None, "num_rows"), (4, T.LIST, T.STRUCT, "row_groups")),
    "RowGroup": ((1, T.LIST, T.STRUCT, "columns"), (2, T.I64, None, "total_byte_size"),
                 (3, T.I64, None, "num_rows")),
    "ColumnChunk": ((2, T.I64, None, "file_offset"),),
    "ColumnMetaData": ((1, T.I32, None, "type"), (2, T.LIST, T.I32, "encodings"),
                       (3, T.LIST, T.BINARY, "path_in_schema"), (4, T.I32, None, "codec"),
                       (5, T.I64, None, "num_values"), (6, T.I64, None, "total_uncompressed_size"),
                       (7, T.I64, None, "total_compressed_size"), (9, T.I64, None, "data_page_offset")),
    "SchemaElement": ((4, T.BINARY, None, "name"),),
}


def _require(s: Struct, struct_name: str, where: PageLocation) -> None:
    for fid, ttype, elem, name in _REQUIRED[struct_name]:
        if s.get(fid) is None:
            raise CorruptMetadataError(f"footer lacks the required field {struct_name}.{name}", where)
        _want(s, fid, ttype, f"{struct_name}.{name}", where, elem)


def _check_shape(meta: Struct, where: PageLocation) -> None:
    """Check the required fields and the types of every footer field this reader uses."""
    _require(meta, "FileMetaData", where)
    for element in meta.get_value(FileMetaData.schema)[1]:
        _require(element, "SchemaElement", where)
    groups = _want(meta, FileMetaData.row_groups, T.LIST, "row_groups", where, T.STRUCT)
    _want(meta, FileMetaData.num_rows, T.I64, "num_rows", where)
    for i, rg in enumerate(groups[1] if groups else []):
        here = where.with_(row_group=i)
        _require(rg, "RowGroup", here)
        cols = _want(rg, RowGroup.columns, T.LIST, "columns", here, T.STRUCT)
        _want(rg, RowGroup.num_rows, T.I64, "num_rows", here)
        for chunk in cols[1] if cols else []:
            _require(chunk, "ColumnChunk", here)
            md = _want(chunk, ColumnChunk.meta_data, T.STRUCT, "meta_data", here)
            if md is None:
                continue
            _require(md, "ColumnMetaData", here)
            _want(md, ColumnMetaData.path_in_schema, T.LIST, "path_in_schema", here, T.BINARY)
            for fid, name, ttype in (
                (ColumnMetaData.codec, "codec", T.I32),
                (ColumnMetaData.num_values, "num_values", T.I64),
                (ColumnMetaData.total_compressed_size, "total_compressed_size", T.I64),
                (ColumnMetaData.data_page_offset, "data_page_offset", T.I64),
            ):
                _want(md, fid, ttype, name, here)
            # dictionary_page_offset is optional: of another type, Thrift's
            # generated reader (pyarrow's) skips it, and chunk_range ignores it.


def read_footer(f, file_size: int, path: str) -> Footer:
    """Read and decode the footer of an open, seekable file.

    Parameters
    ----------
    f : file-like
        Supports ``seek`` and ``read``.
    file_size : int
        The file's size.
    path : str
        Named in errors.

    Raises
    ------
    CorruptMetadataError
    """
    want = min(file_size, TAIL_GUESS)
    while True:
        f.seek(file_size - want)
        tail = f.read(want)
        if len(tail) != want:
            raise CorruptMetadataError(
                f"short read of the footer: {len(tail)} of {want} bytes", PageLocation(file=path)
            )
        got = parse_footer(tail, file_size, path)
        if isinstance(got, Footer):
            return got
        if got <= want:  # pragma: no cover - parse_footer asks only for more
            raise CorruptMetadataError("footer length inconsistent", PageLocation(file=path))
        want = min(file_size, got)
