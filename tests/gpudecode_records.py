"""Test helper: decode records for a whole Parquet file, and arrays from the output.

Until the planner lands this builds the :data:`CHUNK`/:data:`PAGE` records of
every (flat) column chunk of an uncompressed file with the project's own
page scanner, and assembles each chunk's pyarrow array from the decoder's
output buffer as the host will.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dask_hwdecomp.errors import PageLocation
from dask_hwdecomp.format.footer import parse_footer
from dask_hwdecomp.format.pages import chunk_range, scan_chunk
from dask_hwdecomp.format.structs import PageHeader, PageType
from dask_hwdecomp.gpudecode.tables import CHUNK, PAGE, OutKind, PageKind, Physical

__all__ = ["out_kind", "plan_buffer", "chunk_array"]

_PHYSICAL = {p.name: int(p) for p in Physical}
# The ``encoding`` field of the data page, dictionary page and v2 data page headers.
_ENCODING_FIELD = {PageType.DATA_PAGE: 2, PageType.DICTIONARY_PAGE: 2, PageType.DATA_PAGE_V2: 4}
_HEADER_FIELD = {PageType.DATA_PAGE: PageHeader.data_page_header,
                 PageType.DICTIONARY_PAGE: PageHeader.dictionary_page_header,
                 PageType.DATA_PAGE_V2: PageHeader.data_page_header_v2}
_KIND = {PageType.DATA_PAGE: PageKind.DATA_V1, PageType.DICTIONARY_PAGE: PageKind.DICTIONARY,
         PageType.DATA_PAGE_V2: PageKind.DATA_V2}


def out_kind(t: pa.DataType) -> tuple[OutKind, int]:
    """(kind, width) of the output for an Arrow type."""
    if pa.types.is_boolean(t):
        return OutKind.BOOL, 0
    if pa.types.is_decimal(t):
        return OutKind.DECIMAL, 16
    if t in (pa.int8(), pa.uint8()):
        return OutKind.NARROW, 1
    if t in (pa.int16(), pa.uint16()):
        return OutKind.NARROW, 2
    return OutKind.COPY, t.byte_width


def plan_buffer(buf: bytes) -> tuple[np.ndarray, np.ndarray, list[pa.DataType]]:
    """The records of every column chunk of ``buf`` (row groups, then columns), and each chunk's Arrow type."""
    meta = pq.ParquetFile(pa.BufferReader(buf)).metadata
    schema = pq.ParquetFile(pa.BufferReader(buf)).schema_arrow
    footer = parse_footer(buf, len(buf), "test")
    chunks, pages, types = [], [], []
    row = 0
    for rg in range(meta.num_row_groups):
        for col, raw in enumerate(footer.column_chunks(rg)):
            cmeta = meta.row_group(rg).column(col)
            t = schema.field(col).type
            kind, width = out_kind(t)
            c = np.zeros((), CHUNK)
            c["kind"] = kind
            c["physical"] = _PHYSICAL[cmeta.physical_type]
            c["type_length"] = meta.schema.column(col).length if cmeta.physical_type == "FIXED_LEN_BYTE_ARRAY" else 0
            c["width"] = width
            c["max_def"] = meta.schema.column(col).max_definition_level
            c["dict_page"] = -1
            c["num_rows"] = meta.row_group(rg).num_rows
            c["row_base"] = row
            rng = chunk_range(raw, footer.footer_offset, PageLocation())
            view = memoryview(buf)[rng.start : rng.start + rng.length]
            page_row = row
            first = None
            for pg in scan_chunk(view, rng, PageLocation(), max_page_bytes=1 << 30):
                sub = pg.header.get_value(_HEADER_FIELD[pg.page_type])
                p = np.zeros((), PAGE)
                p["chunk"] = len(chunks)
                p["kind"] = _KIND[pg.page_type]
                p["encoding"] = sub.get_value(_ENCODING_FIELD[pg.page_type])
                p["offset"] = rng.start + pg.body_start
                p["size"] = pg.uncompressed_size
                p["num_values"] = sub.get_value(1)
                p["def_bytes"] = pg.levels_size if pg.page_type == PageType.DATA_PAGE_V2 else -1
                p["row_start"] = page_row
                if pg.page_type == PageType.DICTIONARY_PAGE:
                    c["dict_page"] = len(pages)
                else:
                    page_row += int(p["num_values"])
                    first = len(pages) if first is None else first
                pages.append(p)
            c["first_page"] = first if first is not None else len(pages)
            c["num_pages"] = len(pages) - int(c["first_page"])
            chunks.append(c)
            types.append(t)
            row += int(c["num_rows"])
    return np.array(chunks, CHUNK), np.array(pages, PAGE), types


def chunk_array(out: np.ndarray, chunk, t: pa.DataType) -> pa.Array:
    """The Arrow array of one decoded (non-string) chunk, from the output buffer."""
    n = int(chunk["num_rows"])
    valid = None
    if int(chunk["out_valid"]) >= 0:
        start = int(chunk["out_valid"])
        valid = pa.py_buffer(out[start : start + (n + 7) // 8].tobytes())
    kind = int(chunk["kind"])
    nbytes = (n + 7) // 8 if kind == OutKind.BOOL else n * int(chunk["width"])
    start = int(chunk["out_values"])
    values = pa.py_buffer(out[start : start + nbytes].tobytes())
    return pa.Array.from_buffers(t, n, [valid, values], int(chunk["null_count"]))
