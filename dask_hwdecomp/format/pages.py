"""Walking the pages of a column chunk.

:func:`chunk_range` says which bytes of the file hold a column chunk;
:func:`scan_chunk` decodes its page headers, checks every size against the
chunk and the limits, and returns one :class:`Page` per page.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from ..errors import ChecksumError, CorruptMetadataError, LimitExceededError, PageLocation
from .structs import (
    ColumnChunk,
    ColumnMetaData,
    DataPageHeader,
    DataPageHeaderV2,
    DictionaryPageHeader,
    PageHeader,
    PageType,
)
from .thrift import Struct, T, ThriftError, decode_struct

__all__ = ["Page", "ChunkRange", "chunk_range", "scan_chunk", "check_page_crc", "page_crc_error", "page_crc",
           "DECODED_PAGE_TYPES"]

# Old parquet-mr writers understated total_compressed_size (PARQUET-816);
# Arrow reads this much past the declared end, bounded by the footer.
_PADDING = 100


# The page types a reader decodes; pages of any other type are skipped.
DECODED_PAGE_TYPES = frozenset((PageType.DATA_PAGE, PageType.DATA_PAGE_V2, PageType.DICTIONARY_PAGE))


@dataclass(frozen=True)
class ChunkRange:
    """The file bytes ``[start, start + length)`` of one column chunk."""

    start: int
    length: int
    declared: int
    codec: int
    num_values: int
    meta: Struct


@dataclass
class Page:
    """One page of a column chunk, offsets relative to the chunk start.

    ``levels_size`` is the v2 repetition and definition level bytes, stored
    uncompressed ahead of the body; ``compressed`` is False where the bytes
    are stored as they are (UNCOMPRESSED codec, or v2 ``is_compressed``
    false). ``crc`` is the header's CRC-32 of the stored body when the scan
    was asked to keep it (``keep_crc``), else None.
    """

    ordinal: int
    header: Struct
    page_type: int
    header_start: int
    body_start: int
    body_size: int
    uncompressed_size: int
    levels_size: int
    compressed: bool
    crc: int | None = None


def page_crc_error(expected: int, actual: int, where: PageLocation) -> ChecksumError:
    """The error for a page whose stored bytes do not have their header's CRC-32."""
    return ChecksumError(
        f"page CRC-32 {expected:#010x} does not match its bytes ({actual:#010x})", where
    )


def check_page_crc(body, expected: int, where: PageLocation) -> None:
    """Check a page's stored bytes against its header's CRC-32 (on the host).

    Raises
    ------
    ChecksumError
    """
    actual = zlib.crc32(body)
    if actual != expected:
        raise page_crc_error(expected, actual, where)


def chunk_range(
    chunk: Struct, footer_offset: int, where: PageLocation, *, pad: bool = False, file_size: int | None = None
) -> ChunkRange:
    """Compute and check the byte range of a column chunk.

    ``pad`` reads up to 100 bytes past the declared end, for writers that
    understated ``total_compressed_size`` (see ``Footer.pads_column_chunks``).

    A chunk declared to run into the footer is refused, unless ``file_size``
    is given: then, as pyarrow does, only a chunk running past the end of
    the file is refused, and the range stops at the footer (pyarrow reads
    pages until the chunk's values are reached, so its footer bytes are
    never read as a page either).

    Raises
    ------
    CorruptMetadataError
        Offsets or sizes that are negative or outside the data area.
    """
    md = chunk.get_value(ColumnChunk.meta_data)
    if md is None:
        raise CorruptMetadataError("column chunk has no metadata", where)
    data_off = md.get_value(ColumnMetaData.data_page_offset)
    dict_off = md.get(ColumnMetaData.dictionary_page_offset)
    dict_off = dict_off[1] if dict_off is not None and dict_off[0] == T.I64 else None  # else skipped, as by pyarrow
    length = md.get_value(ColumnMetaData.total_compressed_size)
    num_values = md.get_value(ColumnMetaData.num_values)
    codec = md.get_value(ColumnMetaData.codec)
    for name, value in (
        ("data_page_offset", data_off),
        ("total_compressed_size", length),
        ("num_values", num_values),
        ("codec", codec),
    ):
        if value is None:
            raise CorruptMetadataError(f"column metadata lacks {name}", where)
    if num_values == 0 and isinstance(length, int) and length >= 0:
        # No values: nothing to decode, and writers put odd offsets here
        # (e.g. data_page_offset 0 in column_chunk_key_value_metadata).
        return ChunkRange(4, 0, 0, codec, 0, md)
    start = data_off
    if dict_off is not None and 0 < dict_off < start:
        start = dict_off
    if start < 4 or start >= footer_offset:
        raise CorruptMetadataError(
            f"column chunk offset {start} outside the data area 4..{footer_offset}", where
        )
    if length < 0 or num_values < 0:
        raise CorruptMetadataError(
            f"negative size: total_compressed_size {length}, num_values {num_values}", where
        )
    if file_size is not None and start + length > file_size:
        raise CorruptMetadataError(
            f"column chunk {start}+{length} runs past the end of the file at {file_size}", where
        )
    if file_size is None and start + length > footer_offset:
        raise CorruptMetadataError(
            f"column chunk {start}+{length} runs past the footer at {footer_offset}", where
        )
    length = min(length, footer_offset - start)
    # Read a little past the declared end, as Arrow does, for old writers
    # only: for the others a page past the declared end is corrupt.
    padded = min(length + _PADDING, footer_offset - start) if pad else length
    return ChunkRange(start, padded, length, codec, num_values, md)


def _int_field(s: Struct | None, fid: int, name: str, where: PageLocation, lo: int = 0) -> int:
    if not isinstance(s, Struct):
        raise CorruptMetadataError(f"page header lacks the struct holding {name}", where)
    item = s.get(fid)
    if item is None:
        raise CorruptMetadataError(f"page header lacks {name}", where)
    if item[0] != T.I32:
        # Every field read here is an i32; Thrift's generated reader (pyarrow's)
        # skips a field of another type, and then lacks a required one (the
        # rewritten header would otherwise heal it).
        raise CorruptMetadataError(f"page header {name} has thrift type {item[0]}, expected {T.I32}", where)
    value = item[1]
    if value < lo:
        raise CorruptMetadataError(f"page header {name} {value} is negative", where)
    return value


def page_crc(header: Struct) -> int | None:
    """The page's CRC-32 field, or None; a crc of another Thrift type is skipped, as pyarrow's reader skips it."""
    item = header.get(PageHeader.crc)
    return item[1] if item is not None and item[0] == T.I32 else None


def scan_chunk(
    data,
    rng: ChunkRange,
    where: PageLocation,
    *,
    max_page_bytes: int,
    verify_checksums: bool = False,
    keep_crc: bool = False,
    num_rows: int | None = None,
) -> list[Page]:
    """Decode the page headers of one column chunk.

    Pages are read, as pyarrow reads them, until the chunk's bytes end or
    its metadata's ``num_values`` are reached; a metadata count above what
    the pages hold is no error (pyarrow reads on), but pages holding fewer
    values than the row group has rows are: every row puts at least one
    value (or null) in every leaf column, and pyarrow sizes its buffers by
    the declared rows.

    Parameters
    ----------
    data : memoryview
        The chunk's bytes, ``rng.length`` of them.
    rng : ChunkRange
    where : PageLocation
        File, row group and column; the page is filled in.
    max_page_bytes : int
        Largest accepted ``uncompressed_page_size`` (option ``max_page_bytes``).
    verify_checksums : bool
        Check each page's CRC-32 where present, here on the host.
    keep_crc : bool
        Record each page's CRC-32 in :attr:`Page.crc` unchecked: the read
        path checks it where the page's bytes are (the backend that
        decompresses it, on the GPU for GPU batches).
    num_rows : int, optional
        The row group's declared rows; the pages must hold at least as many
        values.

    Returns
    -------
    list of Page

    Raises
    ------
    CorruptMetadataError, LimitExceededError, ChecksumError
    """
    pages: list[Page] = []
    pos = 0
    end = len(data)
    seen = 0
    compressed_codec = rng.codec != 0
    while pos < end and seen < rng.num_values:
        here = PageLocation(where.file, where.row_group, where.column, len(pages))
        try:
            header, body_start = decode_struct(data, pos, end, lazy_depth=2)
        except ThriftError as exc:
            raise CorruptMetadataError(f"page header does not decode ({exc.reason})", here) from None
        ptype = _int_field(header, PageHeader.type, "type", here)
        usize = _int_field(header, PageHeader.uncompressed_page_size, "uncompressed_page_size", here)
        csize = _int_field(header, PageHeader.compressed_page_size, "compressed_page_size", here)
        if csize > end - body_start:
            raise CorruptMetadataError(
                f"compressed_page_size {csize} runs past the column chunk "
                f"({end - body_start} bytes remain)",
                here,
            )
        if usize > max_page_bytes and ptype in DECODED_PAGE_TYPES:
            raise LimitExceededError(
                f"uncompressed_page_size {usize} exceeds max_page_bytes {max_page_bytes} "
                "(raise the option max_page_bytes to read it)",
                here,
            )
        crc = page_crc(header)
        stored = None
        if crc is not None:
            stored = crc & 0xFFFFFFFF
            if verify_checksums:
                check_page_crc(data[body_start : body_start + csize], stored, here)
        levels = 0
        compressed = compressed_codec
        if ptype == PageType.DATA_PAGE:
            sub = header.get_value(PageHeader.data_page_header)
            seen += _int_field(sub, DataPageHeader.num_values, "data_page_header.num_values", here)
        elif ptype == PageType.DATA_PAGE_V2:
            sub = header.get_value(PageHeader.data_page_header_v2)
            seen += _int_field(sub, DataPageHeaderV2.num_values, "data_page_header_v2.num_values", here)
            dl = _int_field(sub, DataPageHeaderV2.definition_levels_byte_length, "definition_levels_byte_length", here)
            rl = _int_field(sub, DataPageHeaderV2.repetition_levels_byte_length, "repetition_levels_byte_length", here)
            levels = dl + rl
            if levels > csize or levels > usize:
                raise CorruptMetadataError(
                    f"v2 level bytes {levels} exceed the page sizes "
                    f"(compressed {csize}, uncompressed {usize})",
                    here,
                )
            if sub.get_value(DataPageHeaderV2.is_compressed, True) is False:
                compressed = False
        elif ptype == PageType.DICTIONARY_PAGE:
            sub = header.get_value(PageHeader.dictionary_page_header)
            _int_field(sub, DictionaryPageHeader.num_values, "dictionary_page_header.num_values", here)
        if ptype not in DECODED_PAGE_TYPES:
            # An index page or a type Parquet does not define: pyarrow skips
            # it by its compressed_page_size, and so does the image.
            pass
        elif not compressed and usize != csize:
            raise CorruptMetadataError(
                f"uncompressed page declares {usize} bytes but stores {csize}", here
            )
        pages.append(
            Page(len(pages), header, ptype, pos, body_start, csize, usize, levels, compressed,
                 stored if keep_crc else None)
        )
        pos = body_start + csize
    if num_rows is not None and seen < num_rows:
        raise CorruptMetadataError(
            f"row group declares {num_rows} rows but the pages of the column chunk hold {seen} values",
            where,
        )
    return pages
