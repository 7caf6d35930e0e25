"""Rewriting the pages of a Parquet file with the project's own Thrift codec.

Tests use it to build files pyarrow does not write: several gzip members in
one page, Hadoop-framed LZ4 with several blocks, v2 pages stored with
``is_compressed=false`` under a compressing codec, empty v2 bodies. The
source is usually a file pyarrow wrote UNCOMPRESSED; every page passes
through a ``transform`` that returns its new header and body, and the column
metadata and footer are rewritten to the new offsets.
"""

from __future__ import annotations

import gzip
import io
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cramjam

from dask_hwdecomp.errors import PageLocation
from dask_hwdecomp.format.footer import parse_footer
from dask_hwdecomp.format.pages import Page, chunk_range, scan_chunk
from dask_hwdecomp.format.structs import (
    ColumnChunk,
    ColumnMetaData,
    DataPageHeaderV2,
    FileMetaData,
    PageHeader,
    PageType,
    RowGroup,
)
from dask_hwdecomp.format.thrift import Struct, T, encode_struct

__all__ = ["PageView", "rewrite_pages", "compress_values", "gzip_members", "hadoop_lz4"]


@dataclass
class PageView:
    """A page handed to a transform: its header (a copy), its body, where it is."""

    header: Struct
    body: bytes
    page: Page
    row_group: int
    column: int

    @property
    def levels(self) -> bytes:
        return self.body[: self.page.levels_size]

    @property
    def values(self) -> bytes:
        return self.body[self.page.levels_size :]


Transform = Callable[[PageView], tuple[Struct, bytes]]


def rewrite_pages(src: Path, dst: Path, transform: Transform, codec: int | None = None) -> None:
    """Write ``dst``: ``src`` with every page replaced by ``transform(page)``.

    ``codec`` (a Parquet codec id) replaces every chunk's codec when given.
    Page indexes and bloom filters are dropped (their offsets would be wrong).
    """
    data = Path(src).read_bytes()
    footer = parse_footer(data, len(data), str(src))
    out = bytearray(b"PAR1")
    meta = footer.meta.copy()
    groups = []
    for rg_id, rg in enumerate(footer.row_groups):
        rg_start = len(out)
        new_chunks = []
        for col, chunk in enumerate(footer.column_chunks(rg_id)):
            where = PageLocation(file=str(src), row_group=rg_id)
            rng = chunk_range(chunk, footer.footer_offset, where)
            view = memoryview(data)[rng.start : rng.start + rng.length]
            pages = scan_chunk(view, rng, where, max_page_bytes=1 << 30)
            start = len(out)
            data_off = dict_off = None
            for page in pages:
                body = bytes(view[page.body_start : page.body_start + page.body_size])
                header, new_body = transform(PageView(page.header.copy(), body, page, rg_id, col))
                header[PageHeader.compressed_page_size] = (T.I32, len(new_body))
                if page.page_type == PageType.DICTIONARY_PAGE and dict_off is None:
                    dict_off = len(out)
                elif page.page_type != PageType.DICTIONARY_PAGE and data_off is None:
                    data_off = len(out)
                out += encode_struct(header) + new_body
            c = chunk.copy()
            for fid in (4, 5, 6, 7):  # offset/column index
                c.pop(fid, None)
            md = c.get_value(ColumnChunk.meta_data).copy()
            for fid in (ColumnMetaData.index_page_offset, ColumnMetaData.bloom_filter_offset, ColumnMetaData.bloom_filter_length):
                md.pop(fid, None)
            if codec is not None:
                md[ColumnMetaData.codec] = (T.I32, codec)
            md[ColumnMetaData.total_compressed_size] = (T.I64, len(out) - start)
            md[ColumnMetaData.data_page_offset] = (T.I64, data_off if data_off is not None else start)
            if dict_off is not None:
                md[ColumnMetaData.dictionary_page_offset] = (T.I64, dict_off)
            else:
                md.pop(ColumnMetaData.dictionary_page_offset, None)
            c[ColumnChunk.meta_data] = (T.STRUCT, md)
            c[ColumnChunk.file_offset] = (T.I64, start)
            new_chunks.append(c)
        g = rg.copy()
        g[RowGroup.columns] = (T.LIST, (T.STRUCT, new_chunks))
        g[RowGroup.file_offset] = (T.I64, rg_start)
        g[RowGroup.total_compressed_size] = (T.I64, len(out) - rg_start)
        groups.append(g)
    meta[FileMetaData.row_groups] = (T.LIST, (T.STRUCT, groups))
    encoded = encode_struct(meta)
    out += encoded + struct.pack("<I", len(encoded)) + b"PAR1"
    Path(dst).write_bytes(bytes(out))


def compress_values(compress: Callable[[bytes], bytes], *, v2_uncompressed: Callable[[PageView], bool] = lambda p: False) -> Transform:
    """A transform compressing each page's values (v2 levels stay as they are).

    ``v2_uncompressed(page)`` true stores that v2 page as it is, with
    ``is_compressed=false``.
    """

    def transform(p: PageView) -> tuple[Struct, bytes]:
        h = p.header
        h.pop(PageHeader.crc, None)
        if p.page.page_type == PageType.DATA_PAGE_V2:
            sub = h.get_value(PageHeader.data_page_header_v2).copy()
            if v2_uncompressed(p):
                sub[DataPageHeaderV2.is_compressed] = (T.BOOL, False)
                h[PageHeader.data_page_header_v2] = (T.STRUCT, sub)
                return h, p.body
            sub[DataPageHeaderV2.is_compressed] = (T.BOOL, True)
            h[PageHeader.data_page_header_v2] = (T.STRUCT, sub)
        return h, p.levels + compress(p.values)

    return transform


def gzip_members(parts: int = 3, *, filename: str | None = None, comment: bool = False) -> Callable[[bytes], bytes]:
    """gzip: the bytes split into ``parts`` members (optionally with FNAME/FEXTRA/FCOMMENT)."""

    def member(chunk: bytes) -> bytes:
        if filename is None and not comment:
            return gzip.compress(chunk, mtime=0)
        buf = io.BytesIO()
        with gzip.GzipFile(filename=filename or "", mode="wb", fileobj=buf, mtime=0) as f:
            f.write(chunk)
        raw = bytearray(buf.getvalue())
        if comment:
            # add FEXTRA and FCOMMENT fields by hand (GzipFile writes neither)
            flags = raw[3]
            pos = 10
            name_end = raw.index(0, pos) + 1 if flags & 0x08 else pos
            extra = struct.pack("<H", 4) + b"HW\x00\x00"
            raw = raw[:10] + extra + raw[10:name_end] + b"a comment\x00" + raw[name_end:]
            raw[3] = flags | 0x04 | 0x10
        return bytes(raw)

    def compress(data: bytes) -> bytes:
        if not data:
            return member(b"")
        step = max(1, -(-len(data) // parts))
        return b"".join(member(data[i : i + step]) for i in range(0, len(data), step))

    return compress


def hadoop_lz4(blocks: int = 3) -> Callable[[bytes], bytes]:
    """LZ4 with Hadoop framing: [BE u32 raw][BE u32 compressed][block], ``blocks`` times."""

    def compress(data: bytes) -> bytes:
        step = max(1, -(-len(data) // blocks))
        out = bytearray()
        for i in range(0, max(len(data), 1), step):
            raw = data[i : i + step]
            block = bytes(cramjam.lz4.compress_block(raw, store_size=False))
            out += struct.pack(">II", len(raw), len(block)) + block
        return bytes(out)

    return compress
