"""Laying decompressed pages out as an uncompressed Parquet file in memory.

pyarrow decodes; this module decides where every decompressed page lands so
that the result is a valid uncompressed Parquet file: page headers are
rewritten (sizes, no CRC, v2 ``is_compressed`` false), index pages dropped,
and the footer is rewritten (codec UNCOMPRESSED, new offsets and sizes,
only the requested row groups, no page-index or bloom-filter references).

A :class:`FileLayout` is built before anything is decompressed, so that
backends write their outputs straight to their final offsets. After the
backends are done, :meth:`FileLayout.fill` writes the headers, the bytes
stored uncompressed, and the footer around them.
"""

from __future__ import annotations

import struct as _struct
from dataclasses import dataclass, field
from typing import NamedTuple

from ..errors import CorruptPageError, PageLocation
from ..jobs import Job, PageCrc
from .codecs import plan_body
from .footer import Footer
from .pages import DECODED_PAGE_TYPES, ChunkRange, Page, check_page_crc
from .structs import (
    ColumnChunk,
    ColumnMetaData,
    DataPageHeaderV2,
    FileMetaData,
    PageHeader,
    PageType,
    RowGroup,
)
from .thrift import Struct, T, encode_struct

__all__ = ["Job", "PageCrc", "ChunkPages", "FileLayout", "ChunkPlacement", "GroupPlacement", "build_layout",
           "image_footer", "page_header"]


@dataclass
class ChunkPages:
    """A scanned column chunk and where its bytes sit in the batch source."""

    column: int
    rng: ChunkRange
    pages: list[Page]
    src_base: int
    location: PageLocation


@dataclass
class FileLayout:
    """The in-memory uncompressed copy of (part of) one Parquet file.

    Attributes
    ----------
    base : int
        Offset of the image in the batch destination buffer.
    size : int
        Size of the image in bytes.
    jobs : list of Job
        Decompressions that write into the image.
    row_groups : list of int
        The original row-group ids, in the order the image holds them.
    """

    base: int
    size: int
    jobs: list[Job] = field(default_factory=list)
    row_groups: list[int] = field(default_factory=list)
    _writes: list[tuple[int, bytes]] = field(default_factory=list)
    _copies: list[tuple[int, int, int]] = field(default_factory=list)

    def fill(self, dst, src) -> None:
        """Write headers, stored bytes and footer; call after the jobs ran.

        Parameters
        ----------
        dst : writable memoryview
            The batch destination buffer.
        src : memoryview
            The batch source buffer.
        """
        for off, data in self._writes:
            dst[off : off + len(data)] = data
        for s, d, n in self._copies:
            dst[d : d + n] = src[s : s + n]


def page_header(page: Page) -> bytes:
    """The header of ``page`` in the image: no CRC, stored size = uncompressed size, v2 not compressed."""
    h = page.header.copy()
    h.pop(PageHeader.crc, None)
    h[PageHeader.compressed_page_size] = (T.I32, page.uncompressed_size)
    if page.page_type == PageType.DATA_PAGE_V2:
        sub = h.get_value(PageHeader.data_page_header_v2).copy()
        sub[DataPageHeaderV2.is_compressed] = (T.BOOL, False)
        h[PageHeader.data_page_header_v2] = (T.STRUCT, sub)
    return encode_struct(h)


_DROP_CHUNK = (
    ColumnChunk.offset_index_offset,
    ColumnChunk.offset_index_length,
    ColumnChunk.column_index_offset,
    ColumnChunk.column_index_length,
)
_DROP_META = (
    ColumnMetaData.index_page_offset,
    ColumnMetaData.dictionary_page_offset,
    ColumnMetaData.bloom_filter_offset,
    ColumnMetaData.bloom_filter_length,
)


def _chunk_meta(chunk: Struct, start: int, size: int, data_off: int, dict_off) -> Struct:
    c = chunk.copy()
    for fid in _DROP_CHUNK:
        c.pop(fid, None)
    c[ColumnChunk.file_offset] = (T.I64, start)
    md = c.get_value(ColumnChunk.meta_data).copy()
    for fid in _DROP_META:
        md.pop(fid, None)
    md[ColumnMetaData.codec] = (T.I32, 0)
    md[ColumnMetaData.total_compressed_size] = (T.I64, size)
    md[ColumnMetaData.total_uncompressed_size] = (T.I64, size)
    md[ColumnMetaData.data_page_offset] = (T.I64, data_off)
    if dict_off is not None:
        md[ColumnMetaData.dictionary_page_offset] = (T.I64, dict_off)
    c[ColumnChunk.meta_data] = (T.STRUCT, md)
    return c


def build_layout(
    footer: Footer,
    chunks: list[tuple[int, list[ChunkPages]]],
    src,
    base: int,
) -> FileLayout:
    """Plan the uncompressed image of the row groups in ``chunks``.

    Parameters
    ----------
    footer : Footer
        The original file's footer.
    chunks : list of (int, list of ChunkPages)
        Row-group ids with their scanned column chunks (the columns to
        read), in the order the image should hold them.
    src : memoryview
        The batch source buffer (page bodies are inspected, not copied).
    base : int
        Offset of the image in the batch destination buffer.

    Returns
    -------
    FileLayout

    Raises
    ------
    CorruptPageError, UnsupportedFeatureError
        From :func:`~dask_hwdecomp.format.codecs.plan_body`.
    """
    layout = FileLayout(base=base, size=0)
    pos = 4  # after b"PAR1"
    layout._writes.append((base, b"PAR1"))
    placed_groups = []
    for rg_id, scanned in chunks:
        layout.row_groups.append(rg_id)
        by_column = {c.column: c for c in scanned}
        placed: dict[int, ChunkPlacement] = {}
        rg_start = pos
        for col_id in range(len(footer.column_chunks(rg_id))):
            cp = by_column.get(col_id)
            if cp is None:
                continue
            chunk_start = pos
            data_off = dict_off = None
            codec = cp.rng.codec
            for page in cp.pages:
                if page.page_type not in DECODED_PAGE_TYPES:
                    continue  # index pages, unknown types: skipped, as pyarrow skips them
                if page.page_type == PageType.DICTIONARY_PAGE:
                    if dict_off is None:
                        dict_off = pos
                elif data_off is None:
                    data_off = pos
                header = page_header(page)
                layout._writes.append((base + pos, header))
                pos += len(header)
                body_src = cp.src_base + page.body_start
                if page.levels_size:
                    layout._copies.append((body_src, base + pos, page.levels_size))
                value_src = body_src + page.levels_size
                value_size = page.uncompressed_size - page.levels_size
                value_dst = base + pos + page.levels_size
                if not page.compressed:
                    if value_size:
                        layout._copies.append((value_src, value_dst, value_size))
                else:
                    where = PageLocation(cp.location.file, cp.location.row_group, cp.location.column, page.ordinal)
                    body = src[value_src : body_src + page.body_size]
                    first = len(layout.jobs)
                    try:
                        spans = plan_body(codec, body, value_size, where)
                    except CorruptPageError:
                        if page.crc is not None:  # bad bytes: say so, as pyarrow does
                            check_page_crc(src[body_src : body_src + page.body_size], page.crc, where)
                        raise
                    for span in spans:
                        layout.jobs.append(
                            Job(
                                algo=span.algo,
                                src_offset=value_src + span.src_offset,
                                src_size=span.src_size,
                                dst_offset=value_dst + span.dst_offset,
                                dst_size=span.dst_size,
                                codec=codec,
                                location=where,
                                crc32=span.crc32,
                                preamble=span.preamble,
                            )
                        )
                if page.crc is not None:
                    if page.compressed and len(layout.jobs) > first:
                        # Checked by the backend that decodes the page, where its bytes are.
                        layout.jobs[first].page_crc = PageCrc(body_src, page.body_size, page.crc)
                    else:
                        where = PageLocation(cp.location.file, cp.location.row_group, cp.location.column, page.ordinal)
                        check_page_crc(src[body_src : body_src + page.body_size], page.crc, where)
                pos += page.uncompressed_size
            if data_off is None:
                data_off = pos
            placed[col_id] = ChunkPlacement(chunk_start, pos - chunk_start, data_off, dict_off)
        placed_groups.append(GroupPlacement(rg_id, placed, rg_start, pos))
    tail = image_footer(footer, placed_groups)
    layout._writes.append((base + pos, tail))
    layout.size = pos + len(tail)
    return layout


@dataclass(frozen=True)
class ChunkPlacement:
    """Where a column chunk lies in an image (offsets from the image start)."""

    start: int
    size: int
    data_page_offset: int
    dictionary_page_offset: int | None


class GroupPlacement(NamedTuple):
    """Where a row group lies in an image, and each of its column chunks read."""

    row_group: int  # the original row-group id
    columns: dict[int, ChunkPlacement]  # by column id; the columns not read are absent
    start: int  # offsets from the image start
    end: int


def image_footer(footer: Footer, groups: list[GroupPlacement]) -> bytes:
    """The footer (with length and magic) of an image holding ``groups``.

    Parameters
    ----------
    footer : Footer
        The original file's footer.
    groups : list of GroupPlacement
        The row groups in image order (the columns not read are left empty).
    """
    new_groups = []
    num_rows = 0
    for group in groups:
        rg = footer.row_groups[group.row_group]
        new_columns = []
        for col_id, chunk in enumerate(footer.column_chunks(group.row_group)):
            p = group.columns.get(col_id)
            if p is None:
                # Not requested: left empty; pyarrow is never asked for it.
                new_columns.append(_chunk_meta(chunk, 4, 0, 4, None))
            else:
                new_columns.append(_chunk_meta(chunk, p.start, p.size, p.data_page_offset, p.dictionary_page_offset))
        new_rg = rg.copy()
        new_rg[RowGroup.columns] = (T.LIST, (T.STRUCT, new_columns))
        new_rg[RowGroup.file_offset] = (T.I64, group.start)
        new_rg[RowGroup.total_compressed_size] = (T.I64, group.end - group.start)
        new_groups.append(new_rg)
        num_rows += rg.get_value(RowGroup.num_rows, 0)
    meta = footer.meta.copy()
    meta[FileMetaData.row_groups] = (T.LIST, (T.STRUCT, new_groups))
    meta[FileMetaData.num_rows] = (T.I64, num_rows)
    encoded = encode_struct(meta)
    return encoded + _struct.pack("<I", len(encoded)) + b"PAR1"
