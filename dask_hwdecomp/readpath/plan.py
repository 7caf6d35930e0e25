"""Planning a read: footers, the column chunks wanted, their byte ranges."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import pyarrow as pa

from ..errors import CorruptMetadataError, PageLocation
from ..format.footer import Footer, column_path, read_footer
from ..format.pages import ChunkRange, chunk_range
from ..format.structs import ColumnMetaData, RowGroup

__all__ = ["Piece", "PlannedChunk", "PiecePlan", "plan_piece", "select_columns", "open_footer"]


@dataclass(frozen=True)
class Piece:
    """One file and the row groups to read from it (None: all)."""

    path: str
    row_groups: tuple[int, ...] | None = None


class PlannedChunk(NamedTuple):
    """A column chunk to read: its row group and column ids, byte range and location."""

    row_group: int
    column: int
    rng: ChunkRange
    where: PageLocation


@dataclass
class PiecePlan:
    """What one piece needs: its footer, row groups and chunk ranges.

    ``unsupported`` is the reason the piece must go through pyarrow's own
    reader, or None. ``pyarrow_way`` is the reason ``backend="auto"``
    chose pyarrow's own reader for it as the faster way
    (:func:`dask_hwdecomp.routing.ways.choose`), or None.
    """

    piece: Piece
    footer: Footer | None
    row_groups: list[int] = field(default_factory=list)
    chunks: list[PlannedChunk] = field(default_factory=list)
    unsupported: str | None = None
    pyarrow_way: str | None = None

    @property
    def estimated_bytes(self) -> int:
        """Uncompressed size the footer claims (for batching only)."""
        total = 0
        for chunk in self.chunks:
            rng = chunk.rng
            claimed = rng.meta.get_value(ColumnMetaData.total_uncompressed_size, 0)
            total += max(rng.length, claimed if isinstance(claimed, int) else 0)
        return total


def open_footer(fs, path: str) -> Footer:
    """Read the footer of ``path`` on fsspec filesystem ``fs``."""
    size = fs.size(path)
    with fs.open(path, "rb") as f:
        return read_footer(f, size, path)


def select_columns(footer: Footer, columns) -> list[int]:
    """Leaf column ids of the top-level fields that the names in ``columns`` lie in.

    ``columns=None`` selects every leaf. A dotted name (``"s.a"``) selects
    every leaf of its top-level field (``s``): pyarrow's dataset reader
    decodes the whole top-level field and projects afterwards, so a sibling
    leaf left out of the image would fail its decode.
    """
    if footer.num_row_groups == 0:
        return []
    chunks = footer.column_chunks(0)
    if columns is None:
        return list(range(len(chunks)))
    wanted = {str(c).split(".", 1)[0] for c in columns if c is not None}
    picked = []
    for i, chunk in enumerate(chunks):
        path = column_path(chunk)
        if any(path == w or path.startswith(w + ".") for w in wanted):
            picked.append(i)
    return picked


def plan_piece(fs, piece: Piece, columns, footer: Footer | None = None) -> PiecePlan:
    """Read the footer (unless given) and list the chunks to fetch.

    Raises
    ------
    CorruptMetadataError
        The footer is broken or a chunk's range is impossible.
    pyarrow.ArrowInvalid
        A requested row group does not exist (as pyarrow raises it).
    """
    footer = footer or open_footer(fs, piece.path)
    plan = PiecePlan(piece, footer)
    reason = footer.unsupported_reason()
    if reason is not None:
        plan.unsupported = reason
        return plan
    n = footer.num_row_groups
    rgs = list(range(n)) if piece.row_groups is None else list(piece.row_groups)
    for rg in rgs:
        if not 0 <= rg < n:
            raise pa.ArrowInvalid(f"{piece.path!r}: row group {rg} out of range (the file has {n})")
    plan.row_groups = rgs
    leaves = select_columns(footer, columns)
    for rg in dict.fromkeys(rgs):
        chunks = footer.column_chunks(rg)
        if len(chunks) != len(footer.column_chunks(0)):
            raise CorruptMetadataError(
                f"row group has {len(chunks)} column chunks, row group 0 has "
                f"{len(footer.column_chunks(0))}",
                PageLocation(file=piece.path, row_group=rg),
            )
        num_rows = footer.row_groups[rg].get_value(RowGroup.num_rows, 0)
        for col in leaves:
            where = PageLocation(file=piece.path, row_group=rg, column=column_path(chunks[col]))
            rng = chunk_range(
                chunks[col], footer.footer_offset, where, pad=footer.pads_column_chunks, file_size=footer.file_size
            )
            if num_rows < 0:
                raise CorruptMetadataError(f"row group declares {num_rows} rows", where)
            plan.chunks.append(PlannedChunk(rg, col, rng, where))
    return plan
