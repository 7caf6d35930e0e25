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
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import PageLocation
from .pagewalk import (
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
from .tables import CHUNK, PAGE, Encoding, OutKind, PageKind
from .types import CpuReason, GpuColumn, classify_columns, dictionary_reason, encoding_table

__all__ = ["DecodePlan", "ChunkColumn", "ImageSource", "plan_file", "plan_batch", "plan_sources"]

_NKINDS = max(OutKind) + 1
_NENC = max(Encoding) + 1


def _encoding_tables() -> tuple[np.ndarray, np.ndarray]:
    allowed = np.zeros((_NKINDS, _NENC), np.uint8)
    for kind, encodings in encoding_table().items():
        allowed[kind, list(encodings)] = 1
    dict_ok = np.array([dictionary_reason(OutKind(k)) is None if k in OutKind._value2member_map_ else 0
                        for k in range(_NKINDS)], np.uint8)
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
    row_groups : sequence of int
        Original row group of each of its row groups.
    """

    data: np.ndarray
    base: int
    path: str
    row_groups: Sequence[int]


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
        Leaf column names to read (None: all).
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
    """
    data = _as_bytes(buf)
    return plan_sources([ImageSource(data, 0, path, range(_num_row_groups(data)))], columns,
                        row_groups=[row_groups], read_dictionary=read_dictionary)


def _num_row_groups(data: np.ndarray) -> int:
    return pq.ParquetFile(pa.py_buffer(data)).metadata.num_row_groups


def plan_batch(images, columns: Collection[str] | None = None, *, host_address: int | None = None,
               read_dictionary: Collection[str] = ()) -> DecodePlan:
    """Plan the GPU decoding of the images of one read batch.

    Parameters
    ----------
    images : list of dask_hwdecomp.readpath.batch.Image
        In one host buffer.
    columns : collection of str, optional
        Leaf column names to read (None: all).
    host_address : int, optional
        Address of the host buffer's first byte (``ranges`` are relative to
        it); by default the lowest image address.
    read_dictionary : collection of str
        Columns pyarrow reads as dictionaries (left to it).
    """
    if host_address is None:
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


def _chunk_bytes(md, rg: int, leaf: int, footer: int) -> tuple[int, int] | str:
    """(start, length) of a column chunk of a file whose footer starts at ``footer``, or why not."""
    cc = md.row_group(rg).column(leaf)
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
    """Classify an image's columns; (metadata, gpu leaves {leaf: GpuColumn}, fallbacks, pending chunks)."""
    pf = pq.ParquetFile(pa.py_buffer(src.data), read_dictionary=list(read_dictionary) or None)
    md = pf.metadata
    classes = classify_columns(pf.schema, pf.schema_arrow)
    wanted = None if columns is None else set(columns)
    gpu: dict[int, GpuColumn] = {}
    fallbacks: dict[str, str] = {}
    for leaf, cls in enumerate(classes):
        if wanted is not None and cls.name not in wanted:
            continue
        if isinstance(cls, CpuReason):
            fallbacks[cls.name] = cls.reason
        else:
            gpu[leaf] = cls
    groups = range(md.num_row_groups) if row_groups is None else row_groups
    pending: list[_Pending] = []
    footer = _footer_offset(src.data)
    for rg in groups:
        rows = md.row_group(rg).num_rows
        for leaf, col in list(gpu.items()):
            if col.name in fallbacks:
                continue
            got = _chunk_bytes(md, rg, leaf, footer)
            if isinstance(got, str):
                fallbacks[col.name] = f"row group {src.row_groups[rg]}: {got}"
                continue
            num_values = md.row_group(rg).column(leaf).num_values
            if num_values != rows:
                fallbacks[col.name] = (f"row group {src.row_groups[rg]}: column chunk holds {num_values} values "
                                       f"for {rows} rows")
                continue
            pending.append(_Pending(leaf, rg, got[0], got[1], num_values, rows))
    return md, gpu, fallbacks, pending


def plan_sources(sources: Sequence[ImageSource], columns: Collection[str] | None = None, *,
                 row_groups: Sequence[Sequence[int] | None] | None = None,
                 read_dictionary: Collection[str] = ()) -> DecodePlan:
    """Plan the GPU decoding of uncompressed Parquet files lying in one host buffer.

    ``row_groups[i]``: the row groups of source ``i`` to read (None: all).
    See :class:`DecodePlan`.
    """
    chunk_parts: list[np.ndarray] = []
    page_parts: list[np.ndarray] = []
    infos: list[ChunkColumn] = []
    ranges: list[list[int]] = []
    gpu_out: list[dict[str, GpuColumn]] = []
    fallback_out: list[dict[str, str]] = []
    npages = 0
    row_base = 0
    dict_base = 0
    data_end = 0
    for i, src in enumerate(sources):
        md, gpu, fallbacks, pending = _image_plan(src, columns, None if row_groups is None else row_groups[i],
                                                  read_dictionary)
        n = len(pending)
        i64 = np.int64
        res, walked = walk_chunks(
            src.data,
            np.array([p.start for p in pending], i64),
            np.array([p.length for p in pending], i64),
            np.array([p.num_values for p in pending], i64),
            np.array([p.rows for p in pending], i64),
            np.array([gpu[p.leaf].max_def for p in pending], i64),
            np.array([int(gpu[p.leaf].kind) for p in pending], i64),
            _ALLOWED,
            _DICT_OK,
        )
        for k in range(n):
            if res[k, S_STATUS]:
                p = pending[k]
                name = gpu[p.leaf].name
                if name not in fallbacks:
                    fallbacks[name] = _reason(res[k], int(src.row_groups[p.row_group]))
        keep = [k for k in range(n) if gpu[pending[k].leaf].name not in fallbacks]
        chunks = np.zeros(len(keep), CHUNK)
        pages_here: list[np.ndarray] = []
        for j, k in enumerate(keep):
            p = pending[k]
            col = gpu[p.leaf]
            lo, hi = int(res[k, S_PLO]), int(res[k, S_PHI])
            ps = walked[lo:hi]
            end = int(res[k, S_END]) if hi > lo else p.start
            nbytes = end - p.start
            src_off = src.base + p.start
            if ranges and ranges[-1][0] + ranges[-1][1] == src_off:
                ranges[-1][1] += nbytes
            elif nbytes:
                ranges.append([src_off, nbytes, data_end])
            rec = np.zeros(hi - lo, PAGE)
            rec["chunk"] = len(infos)
            rec["kind"] = ps[:, W_KIND]
            rec["encoding"] = ps[:, W_ENCODING]
            rec["offset"] = ps[:, W_OFFSET] - p.start + data_end
            rec["size"] = ps[:, W_SIZE]
            rec["num_values"] = ps[:, W_VALUES]
            rec["def_bytes"] = ps[:, W_DEF]
            data_rows = ps[:, W_ROWS]
            starts = np.cumsum(data_rows) - data_rows
            rec["row_start"] = row_base + starts
            has_dict = hi > lo and ps[0, W_KIND] == PageKind.DICTIONARY
            c = chunks[j]
            c["kind"] = int(col.kind)
            c["physical"] = int(col.physical)
            c["type_length"] = col.type_length
            c["width"] = col.width
            c["max_def"] = col.max_def
            c["dict_page"] = npages if has_dict else -1
            c["first_page"] = npages + (1 if has_dict else 0)
            c["num_pages"] = hi - lo - (1 if has_dict else 0)
            c["num_rows"] = p.rows
            c["row_base"] = row_base
            c["dict_base"] = dict_base
            c["out_valid"] = c["out_values"] = c["out_data"] = -1
            if has_dict:
                dict_base += int(ps[0, W_VALUES])
            row_base += p.rows
            npages += hi - lo
            data_end += nbytes
            pages_here.append(rec)
            infos.append(ChunkColumn(i, p.row_group, col.name, col.arrow_type,
                                     PageLocation(src.path, int(src.row_groups[p.row_group]), col.name)))
        chunk_parts.append(chunks)
        page_parts.extend(pages_here)
        gpu_out.append({c.name: c for c in gpu.values() if c.name not in fallbacks})
        fallback_out.append(fallbacks)
    return DecodePlan(
        chunks=np.concatenate(chunk_parts) if chunk_parts else np.zeros(0, CHUNK),
        pages=np.concatenate(page_parts) if page_parts else np.zeros(0, PAGE),
        ranges=np.array(ranges, np.int64).reshape(-1, 3),
        data_bytes=data_end,
        columns=tuple(infos),
        gpu_columns=tuple(gpu_out),
        fallbacks=tuple(fallback_out),
    )


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
