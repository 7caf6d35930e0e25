"""The decode plan: which chunks of a batch's images the GPU decodes, page by page.

:func:`plan_batch` (the images of one read batch) and :func:`plan_file`
(one uncompressed Parquet file in memory) classify every selected leaf
column (:mod:`.types`), walk the page headers of its chunks in compiled
code (:mod:`.pagewalk`) and fill the :data:`~.tables.CHUNK` and
:data:`~.tables.PAGE` records of a :class:`DecodePlan`, with the byte
ranges to upload so that the device buffer ``data`` holds exactly the
decoded chunks. A column with any chunk the GPU cannot decode (its type,
an encoding, levels, or anything off in its pages) is left to pyarrow for
the whole image, with the reason in :attr:`DecodePlan.fallbacks`: pyarrow
then decodes it, or raises its own error, as it does without the GPU.

A chunk whose values do not add up to its row group's rows (the metadata's
``num_values``, or its pages' counts) leaves *every* column of its image to
pyarrow: what pyarrow does with such a file depends on the columns it reads
together (pyarrow 25 refuses the whole read, "expected length 600 but got
length 300", yet reads the one column alone), so only its read of the whole
file gives its result.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pa_ds
import pyarrow.parquet as pq

from ..errors import PageLocation
from ..names import field_names
from .pagewalk import (
    R_ROWS,
    R_TOO_MANY,
    R_V2ROWS,
    REASONS,
    S_DETAIL,
    S_END,
    S_PAGE,
    S_PHI,
    S_PLO,
    S_STATUS,
    W_DEF,
    W_ENCODING,
    W_KIND,
    W_OFFSET,
    W_ROWS,
    W_SIZE,
    W_VALUES,
    walk_chunks,
)
from .tables import CHUNK, PAGE, Encoding, OutKind, PageKind, Physical
from .types import CpuReason, GpuColumn, classify_columns, dictionary_reason, encoding_reason

__all__ = ["DecodePlan", "ChunkColumn", "ImageSource", "plan_file", "plan_batch", "plan_sources"]

logger = logging.getLogger("dask_hwdecomp")

_NPHYS = max(Physical) + 1
_NENC = max(Encoding) + 1
# Why pyarrow decodes every column of an image with a name that is not UTF-8.
NAME_NOT_UTF8 = "a column name of the file is not UTF-8 (pyarrow's ParquetFile, which plans the GPU decode, refuses it)"
# Walk statuses that say a chunk's values do not add up to its row group's rows.
_MISCOUNTED = (R_ROWS, R_V2ROWS, R_TOO_MANY)


def _encoding_tables() -> tuple[np.ndarray, np.ndarray]:
    """Per (kind, physical) row (:func:`_class`): the data-page encodings decoded, and whether a dictionary may be."""
    rows = (max(OutKind) + 1) * _NPHYS
    allowed = np.zeros((rows, _NENC), np.uint8)
    dict_ok = np.zeros(rows, np.uint8)
    for kind in OutKind:
        for physical in Physical:
            row = int(kind) * _NPHYS + int(physical)
            dict_ok[row] = dictionary_reason(kind) is None
            for enc in Encoding:
                allowed[row, int(enc)] = encoding_reason(kind, physical, enc) is None
    return allowed, dict_ok


_ALLOWED, _DICT_OK = _encoding_tables()


@dataclass(frozen=True)
class ChunkColumn:
    """What one CHUNK record is: its image, row group and column.

    Attributes
    ----------
    image : int
        Index of the image in the batch.
    row_group : int
        Row group of the image.
    name : str
        The leaf column's name (its top-level Arrow field).
    arrow_type : pa.DataType
        The type the decoded buffers are wrapped as.
    location : PageLocation
        File, original row group and column path, for errors (see
        :meth:`page_location`).
    """

    image: int
    row_group: int
    name: str
    arrow_type: pa.DataType
    location: PageLocation

    def page_location(self, ordinal: int) -> PageLocation:
        """Where page ``ordinal`` of the chunk (dictionary page included, as the file holds them) is."""
        return self.location.with_(page=ordinal)


@dataclass(frozen=True)
class ImageSource:
    """One uncompressed Parquet file to plan, and where it lies in the batch's host buffer.

    Attributes
    ----------
    data : np.ndarray
        The file's bytes (uint8).
    base : int
        Offset of its first byte in the batch's host buffer.
    path : str
        The original file, for errors.
    row_groups : sequence of int or None
        Original row group of each of its row groups (None: the same).
    """

    data: np.ndarray
    base: int
    path: str
    row_groups: Sequence[int] | None

    def original_row_group(self, rg: int) -> int:
        """The original file's row group of row group ``rg`` of this file."""
        return rg if self.row_groups is None else int(self.row_groups[rg])


@dataclass(frozen=True)
class DecodePlan:
    """What the GPU decodes of a batch, and how.

    Attributes
    ----------
    chunks : np.ndarray
        :data:`~.tables.CHUNK` records, by image, row group, then leaf column.
    pages : np.ndarray
        :data:`~.tables.PAGE` records; ``offset`` is in ``data``.
    ranges : np.ndarray
        int64 rows (src_offset in the batch's host buffer, nbytes,
        dst_offset in ``data``): what to upload.
    data_bytes : int
        Size of ``data``.
    columns : tuple of ChunkColumn
        One per CHUNK record.
    gpu_columns : tuple of dict
        Per image, {column name: GpuColumn} of the columns the GPU decodes.
    fallbacks : tuple of dict
        Per image, {column name: reason} of the selected columns pyarrow decodes.
    """

    chunks: np.ndarray
    pages: np.ndarray
    ranges: np.ndarray
    data_bytes: int
    columns: tuple[ChunkColumn, ...]
    gpu_columns: tuple[dict[str, GpuColumn], ...]
    fallbacks: tuple[dict[str, str], ...]

    def page_location(self, page: int) -> PageLocation:
        """Where PAGE record ``page`` lies: file, original row group, column and the page's ordinal in its chunk.

        Ordinals count every page of the chunk as the file holds them, the
        dictionary page included (the planner keeps only chunks whose pages
        are all data or dictionary pages).
        """
        c = int(self.pages[page]["chunk"])
        rec = self.chunks[c]
        first = int(rec["dict_page"]) if int(rec["dict_page"]) >= 0 else int(rec["first_page"])
        return self.columns[c].page_location(page - first)

    def gather(self, host) -> np.ndarray:
        """``data`` on the host: the planned ranges of ``host`` (the batch's host buffer) copied together."""
        src = np.frombuffer(host, np.uint8)
        out = np.empty(self.data_bytes, np.uint8)
        for s, n, d in self.ranges:
            out[d : d + n] = src[s : s + n]
        return out


def _as_bytes(buf) -> np.ndarray:
    return np.frombuffer(buf, np.uint8)


def plan_file(buf, columns: Collection[str] | None = None, row_groups: Sequence[int] | None = None,
              *, path: str = "<memory>", read_dictionary: Collection[str] = ()) -> DecodePlan:
    """Plan the GPU decoding of one uncompressed Parquet file in memory.

    Parameters
    ----------
    buf : buffer
        The whole file (written without compression, or an image).
    columns : collection of str, optional
        Columns to read: top-level field names (a flat column's leaf name is
        its field's), or leaf paths of nested columns (None: all).
    row_groups : sequence of int, optional
        Row groups to read, in order (None: all).
    path : str
        Named in errors.
    read_dictionary : collection of str
        Columns pyarrow reads as dictionaries (left to it).

    Returns
    -------
    DecodePlan
        With ``ranges`` relative to ``buf``; one image.

    A footer pyarrow cannot open (its Arrow schema corrupt, a type it
    refuses) leaves the whole file to pyarrow: the plan holds none of its
    columns, and pyarrow's own decode raises its error. Anything wrong in a
    column chunk or page leaves that column to pyarrow.
    """
    return plan_sources([ImageSource(_as_bytes(buf), 0, path, None)], columns, row_groups=[row_groups],
                        read_dictionary=read_dictionary)


def plan_batch(images, columns: Collection[str] | None = None, *, within=None,
               read_dictionary: Collection[str] = ()) -> DecodePlan:
    """Plan the GPU decoding of the images of one read batch.

    Parameters
    ----------
    images : list of dask_hwdecomp.readpath.batch.Image
        In one host buffer.
    columns : collection of str, optional
        Columns to read: top-level field names (a flat column's leaf name is
        its field's), or leaf paths of nested columns (None: all).
    within : buffer, optional
        The host buffer the images lie in (``ranges`` are relative to its
        first byte); by default they start at the lowest image.
    read_dictionary : collection of str
        Columns pyarrow reads as dictionaries (left to it).

    Returns
    -------
    DecodePlan

    An image whose footer pyarrow cannot open gets no GPU column (see
    :func:`plan_file`).
    """
    if within is not None:
        host_address = int(_as_bytes(within).ctypes.data) if len(memoryview(within)) else 0
    else:
        host_address = min((im.buffer.address for im in images), default=0)
    sources = [ImageSource(_as_bytes(im.buffer), im.buffer.address - host_address, im.plan.piece.path,
                           list(im.row_groups)) for im in images]
    return plan_sources(sources, columns, read_dictionary=read_dictionary)


@dataclass
class _Pending:
    """A chunk the walk checks: its image's leaf column and row group, where it lies."""

    leaf: int
    row_group: int
    start: int
    length: int
    num_values: int
    rows: int


def _footer_offset(data: np.ndarray) -> int:
    """First byte of the encoded footer (pyarrow has already checked the file's tail)."""
    size = data.shape[0]
    return size - 8 - int.from_bytes(data[size - 8 : size - 4].tobytes(), "little")


def _chunk_bytes(cc, footer: int) -> tuple[int, int] | str:
    """(start, length) of a column chunk (its pyarrow metadata) in a file whose footer starts at ``footer``, or why not."""
    if cc.compression != "UNCOMPRESSED":
        return f"column chunk compressed with {cc.compression}"
    if cc.num_values == 0:
        return 0, 0
    start = cc.data_page_offset
    dict_off = cc.dictionary_page_offset
    if cc.has_dictionary_page and dict_off is not None and 0 < dict_off < start:
        start = dict_off
    length = cc.total_compressed_size
    if start < 4 or length < 0 or start + length > footer:
        return f"column chunk bytes {start}+{length} outside the file's data area"
    return start, length


def _image_plan(src: ImageSource, columns, row_groups, read_dictionary):
    """Classify an image's columns.

    Returns (metadata, gpu leaves {leaf: GpuColumn}, fallbacks, pending
    chunks, {name: why} of the columns whose metadata's values are not
    their row groups' rows).
    """
    wanted = None if columns is None else set(columns)
    try:
        pf = pq.ParquetFile(pa.py_buffer(src.data), read_dictionary=list(read_dictionary) or None)
        md = pf.metadata
        classes = classify_columns(pf.schema, pf.schema_arrow)
    except (pa.ArrowException, OSError) as exc:
        # A footer pyarrow cannot open (a corrupt schema, a type it refuses):
        # the GPU decodes nothing of it, and pyarrow's decode of the image
        # raises its own error there, located, as without a GPU.
        logger.info("%s: the GPU decodes none of its columns: pyarrow cannot open it (%s: %s)", src.path,
                    type(exc).__name__, exc)
        return None, {}, {}, [], {}
    except UnicodeDecodeError:
        # pyarrow's dataset reader, which decodes the image, reads such a file:
        # the columns are left to it, under the names it prints.
        image = pa_ds.ParquetFileFormat().make_fragment(pa.BufferReader(pa.py_buffer(src.data)))
        names = field_names(image.physical_schema)
        return image.metadata, {}, {n: NAME_NOT_UTF8 for n in names if wanted is None or n in wanted}, [], {}
    fields = set(pf.schema_arrow.names)
    gpu: dict[int, GpuColumn] = {}
    fallbacks: dict[str, str] = {}
    for leaf, cls in enumerate(classes):
        if wanted is not None and cls.name not in wanted:
            path = pf.schema.column(leaf).path
            if path not in wanted or path in fields:
                continue  # neither its field's name nor its leaf path (not also a field's name) is asked for
        if isinstance(cls, CpuReason):
            fallbacks[cls.name] = cls.reason
        else:
            gpu[leaf] = cls
    groups = range(md.num_row_groups) if row_groups is None else row_groups
    pending: list[_Pending] = []
    miscounted: dict[str, str] = {}
    footer = _footer_offset(src.data)
    for rg in groups:
        rg_meta = md.row_group(rg)
        rows = rg_meta.num_rows
        for leaf, col in gpu.items():
            if col.name in fallbacks:
                continue
            cc = rg_meta.column(leaf)
            if cc.physical_type != pf.schema.column(leaf).physical_type:
                # pyarrow refuses such a chunk: its decode of the image says so
                fallbacks[col.name] = (f"row group {src.original_row_group(rg)}: column chunk of type "
                                       f"{cc.physical_type}, the schema's is {pf.schema.column(leaf).physical_type}")
                continue
            got = _chunk_bytes(cc, footer)
            if isinstance(got, str):
                fallbacks[col.name] = f"row group {src.original_row_group(rg)}: {got}"
                continue
            num_values = cc.num_values
            if num_values != rows:
                fallbacks[col.name] = miscounted[col.name] = (
                    f"row group {src.original_row_group(rg)}: column chunk holds {num_values} values for {rows} rows")
                continue
            pending.append(_Pending(leaf, rg, got[0], got[1], num_values, rows))
    return md, gpu, fallbacks, pending, miscounted


def plan_sources(sources: Sequence[ImageSource], columns: Collection[str] | None = None, *,
                 row_groups: Sequence[Sequence[int] | None] | None = None,
                 read_dictionary: Collection[str] = ()) -> DecodePlan:
    """Plan the GPU decoding of uncompressed Parquet files lying in one host buffer.

    ``row_groups[i]``: the row groups of source ``i`` to read (None: all).
    See :class:`DecodePlan`.
    """
    chunk_parts: list[np.ndarray] = []
    page_parts: list[np.ndarray] = []
    src_parts: list[np.ndarray] = []
    infos: list[ChunkColumn] = []
    gpu_out: list[dict[str, GpuColumn]] = []
    fallback_out: list[dict[str, str]] = []
    # running totals over the images: pages, rows, dictionary entries, bytes of ``data``
    totals = np.zeros(4, np.int64)
    for i, src in enumerate(sources):
        md, gpu, fallbacks, pending, miscounted = _image_plan(src, columns, None if row_groups is None else row_groups[i],
                                                              read_dictionary)
        res, walked = walk_chunks(
            src.data,
            np.array([p.start for p in pending], np.int64),
            np.array([p.length for p in pending], np.int64),
            np.array([p.num_values for p in pending], np.int64),
            np.array([p.rows for p in pending], np.int64),
            np.array([gpu[p.leaf].max_def for p in pending], np.int64),
            np.array([_class(gpu[p.leaf]) for p in pending], np.int64),
            _ALLOWED,
            _DICT_OK,
        )
        for k in np.flatnonzero(res[:, S_STATUS]):
            name = gpu[pending[k].leaf].name
            why = _reason(res[k], src.original_row_group(pending[k].row_group))
            fallbacks.setdefault(name, why)
            if int(res[k, S_STATUS]) in _MISCOUNTED:
                miscounted.setdefault(name, why)
        if miscounted:
            name, first = next(iter(miscounted.items()))
            why = f"pyarrow reads this file whole: its column {name!r} does not add up ({first})"
            for col in gpu.values():
                fallbacks.setdefault(col.name, why)
        keep = np.array([gpu[p.leaf].name not in fallbacks for p in pending], bool)
        kept = [p for p, ok in zip(pending, keep) if ok]
        chunks, pages, src_ranges = _records(src, kept, [gpu[p.leaf] for p in kept], res[keep], walked,
                                             res, keep, totals)
        pages["chunk"] += len(infos)
        for p in kept:
            col = gpu[p.leaf]
            infos.append(ChunkColumn(i, p.row_group, col.name, col.arrow_type,
                                     PageLocation(src.path, src.original_row_group(p.row_group), col.name)))
        chunk_parts.append(chunks)
        page_parts.append(pages)
        src_parts.append(src_ranges)
        gpu_out.append({c.name: c for c in gpu.values() if c.name not in fallbacks})
        fallback_out.append(fallbacks)
    return DecodePlan(
        chunks=np.concatenate(chunk_parts) if chunk_parts else np.zeros(0, CHUNK),
        pages=np.concatenate(page_parts) if page_parts else np.zeros(0, PAGE),
        ranges=_coalesce(np.concatenate(src_parts) if src_parts else np.zeros((0, 2), np.int64)),
        data_bytes=int(totals[3]),
        columns=tuple(infos),
        gpu_columns=tuple(gpu_out),
        fallbacks=tuple(fallback_out),
    )


def _class(col: GpuColumn) -> int:
    """Row of the encoding tables for a column: its kind and physical type."""
    return int(col.kind) * _NPHYS + int(col.physical)


def _exclusive(a: np.ndarray) -> np.ndarray:
    return np.cumsum(a) - a


def _records(src: ImageSource, kept: list[_Pending], cols: list[GpuColumn], res: np.ndarray, walked: np.ndarray,
             res_all: np.ndarray, keep: np.ndarray, totals: np.ndarray):
    """CHUNK and PAGE records of an image's kept chunks, and their (src_offset, nbytes); advances ``totals``.

    ``res`` are the kept chunks' walk results, ``res_all``/``keep`` all of
    them (``walked`` holds the pages of every chunk whose walk was OK, some
    of which a column's fallback drops).
    """
    n = len(kept)
    counts_all = res_all[:, S_PHI] - res_all[:, S_PLO]
    page_keep = np.repeat(keep, counts_all)
    wp = walked[page_keep]
    counts = res[:, S_PHI] - res[:, S_PLO]
    first = _exclusive(counts)  # first page of each kept chunk in ``wp``
    has_dict = np.zeros(n, bool)
    has_dict[counts > 0] = wp[first[counts > 0], W_KIND] == PageKind.DICTIONARY
    dict_entries = np.where(has_dict, wp[np.minimum(first, max(len(wp) - 1, 0)), W_VALUES] if len(wp) else 0, 0)
    starts = np.array([p.start for p in kept], np.int64)
    rows = np.array([p.rows for p in kept], np.int64)
    ends = np.where(counts > 0, res[:, S_END], starts)
    nbytes = ends - starts
    data_off = totals[3] + _exclusive(nbytes)
    page_base = totals[0] + first
    row_base = totals[1] + _exclusive(rows)

    chunks = np.zeros(n, CHUNK)
    chunks["kind"] = [int(c.kind) for c in cols]
    chunks["physical"] = [int(c.physical) for c in cols]
    chunks["type_length"] = [c.type_length for c in cols]
    chunks["width"] = [c.width for c in cols]
    chunks["max_def"] = [c.max_def for c in cols]
    chunks["dict_page"] = np.where(has_dict, page_base, -1)
    chunks["first_page"] = page_base + has_dict
    chunks["num_pages"] = counts - has_dict
    chunks["num_rows"] = rows
    chunks["row_base"] = row_base
    chunks["dict_base"] = totals[2] + _exclusive(dict_entries)
    chunks["out_valid"] = chunks["out_values"] = chunks["out_data"] = -1

    pc = np.repeat(np.arange(n), counts)  # each page's kept chunk
    pages = np.zeros(len(wp), PAGE)
    pages["chunk"] = pc
    pages["kind"] = wp[:, W_KIND]
    pages["encoding"] = wp[:, W_ENCODING]
    pages["offset"] = wp[:, W_OFFSET] - starts[pc] + data_off[pc]
    pages["size"] = wp[:, W_SIZE]
    pages["num_values"] = wp[:, W_VALUES]
    pages["def_bytes"] = wp[:, W_DEF]
    before = _exclusive(wp[:, W_ROWS])  # rows of the image's kept pages before each page
    pages["row_start"] = row_base[pc] + before - (before[first[pc]] if len(wp) else 0)

    totals += (len(wp), int(rows.sum()), int(dict_entries.sum()), int(nbytes.sum()))
    return chunks, pages, np.stack([src.base + starts, nbytes], axis=1)


def _coalesce(spans: np.ndarray) -> np.ndarray:
    """(src_offset, nbytes, dst_offset) rows: ``spans`` (src_offset, nbytes), laid end to end, adjacent ones merged."""
    spans = spans[spans[:, 1] > 0]
    if not len(spans):
        return np.zeros((0, 3), np.int64)
    new = np.ones(len(spans), bool)
    new[1:] = spans[1:, 0] != spans[:-1, 0] + spans[:-1, 1]
    heads = np.flatnonzero(new)
    sizes = np.add.reduceat(spans[:, 1], heads)
    return np.stack([spans[heads, 0], sizes, _exclusive(sizes)], axis=1).astype(np.int64)


def _reason(res_row: np.ndarray, row_group: int) -> str:
    status = int(res_row[S_STATUS])
    text = REASONS[status]
    detail = int(res_row[S_DETAIL])
    if "{}" in text:
        try:
            name = Encoding(detail).name if "encoding" in text else str(detail)
        except ValueError:
            name = str(detail)
        text = text.format(name)
    page = int(res_row[S_PAGE])
    where = f"row group {row_group}" + (f", page {page}" if page >= 0 else "")
    return f"{where}: {text}"
