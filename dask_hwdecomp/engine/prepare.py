"""Decompressing all pieces of one output partition as one batch."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from ..options import Options
from ..readpath.filters import filter_columns
from ..readpath.plan import Piece
from ..readpath.sequence import batches, plan_pieces
from ..report import ReadReport

__all__ = ["piece_key", "prepared_images", "current_images", "current_choices", "needed_columns"]

_images: contextvars.ContextVar[dict | None] = contextvars.ContextVar("hwdecomp_images", default=None)
_choices: contextvars.ContextVar[dict | None] = contextvars.ContextVar("hwdecomp_choices", default=None)


def piece_key(path: str, row_groups) -> tuple:
    """The key of a dask piece: path and row groups (None: all)."""
    if row_groups is None or list(row_groups) == [None]:
        return (path, None)
    return (path, tuple(row_groups))


def needed_columns(columns, index, filters, schema) -> list | None:
    """Columns to decompress: requested, index, filtered-on, pandas index columns."""
    if columns is None:
        return None
    names = {c for c in columns if c is not None}
    if isinstance(index, (list, tuple)):
        names |= set(index)
    elif isinstance(index, str):
        names.add(index)
    if filters:
        names |= filter_columns(filters)
    if schema is not None:
        names.add("__index_level_0__")
        meta = schema.metadata or {}
        if b"pandas" in meta:
            import json

            for col in json.loads(meta[b"pandas"]).get("index_columns", []):
                if isinstance(col, str):
                    names.add(col)
    return sorted(n for n in names if isinstance(n, str))


def _normalize(piece) -> tuple[str, object]:
    if isinstance(piece, str):
        return piece, None
    path, row_group, _ = piece
    if isinstance(row_group, tuple):
        row_group = list(row_group)
    if row_group is not None and not isinstance(row_group, list):
        row_group = [row_group]
    return path, row_group


@contextlib.contextmanager
def prepared_images(fs, pieces: list, columns, options: Options, report: ReadReport) -> Iterator[dict]:
    """Decompress every piece; yield ``{piece_key: Image or None}``.

    ``None`` marks a piece pyarrow reads itself: one the page path cannot
    serve (reported and warned about by
    :func:`dask_hwdecomp.readpath.sequence.fallback`), or one ``auto``
    chose to read with pyarrow as the faster way (its plan, with the
    reason, in :func:`current_choices`). The images are valid inside the
    ``with`` block only, and are visible to :func:`current_images` in this
    context.
    """
    images: dict = {}
    unique: list[Piece] = []
    for piece in pieces:
        key = piece_key(*_normalize(piece))
        if key not in images:
            images[key] = None
            unique.append(Piece(key[0], key[1]))
    plans = plan_pieces(fs, unique, columns, options, report)
    choices = {piece_key(p.piece.path, p.piece.row_groups): p for p in plans if p.pyarrow_way is not None}
    with contextlib.ExitStack() as stack:
        for batch in batches(fs, plans, options, report):
            stack.enter_context(batch)
            for image in batch.images:
                images[piece_key(image.plan.piece.path, image.plan.piece.row_groups)] = image
        token = _images.set(images)
        chosen = _choices.set(choices)
        try:
            yield images
        finally:
            _choices.reset(chosen)
            _images.reset(token)


def current_images() -> dict | None:
    """The images of the partition being read in this context, if any."""
    return _images.get()


def current_choices() -> dict:
    """``{piece_key: PiecePlan}`` of the pieces ``auto`` chose pyarrow's own read for, in this context."""
    return _choices.get() or {}
