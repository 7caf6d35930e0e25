"""The steps of a page-path read, written once for ``read_table`` and the Dask engine.

A read plans its pieces (:func:`plan_pieces`: footers and page headers,
the ``scan`` stage; a piece the page path cannot serve is a *fallback*,
warned about or refused by the ``on_unsupported`` option and left to
pyarrow's own reader; a piece for which ``backend="auto"`` finds pyarrow's
own read the faster way is left to it too, with the reason in
``PiecePlan.pyarrow_way``), decompresses the others in batches
(:func:`batches`), and decodes each image with pyarrow, or with the GPU's
columns it carries (:func:`decode_image`: the ``decode`` stage, pyarrow's
errors located to their page, each column accounted in the report). The
callers differ only in who decodes: ``read_table`` calls pyarrow on the
image itself, the engine lets dask's own ``_read_table`` do it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa

from ..errors import PageLocation, UnsupportedFeatureError
from ..options import Options
from ..report import Fallback, ReadReport
from ..routing.router import Router, gpu_can_run
from ..routing.ways import Way, choose
from .assemble import ImageTable
from .batch import DecompressedBatch, iter_batches
from .decode_errors import locate_decode_errors
from .decode_report import account_image_columns
from .image import Image
from .plan import Piece, PiecePlan, plan_piece

__all__ = ["HwdecompFallbackWarning", "fallback", "plan_pieces", "batches", "decode_image"]


class HwdecompFallbackWarning(UserWarning):
    """A file was read by pyarrow's own reader; the message says why."""


def fallback(plan: PiecePlan, options: Options, report: ReadReport) -> None:
    """Record (and warn about, or refuse) a piece pyarrow must read itself.

    Raises
    ------
    UnsupportedFeatureError
        ``options.on_unsupported == "raise"``.
    """
    if options.on_unsupported == "raise":
        raise UnsupportedFeatureError(
            f"{plan.unsupported}; set on_unsupported='warn' to read it with pyarrow",
            PageLocation(file=plan.piece.path),
        ) from None
    warnings.warn(
        f"dask_hwdecomp: {plan.piece.path!r} is read by pyarrow's own reader: {plan.unsupported}",
        HwdecompFallbackWarning,
        stacklevel=4,
    )
    report.fallbacks.append(Fallback(path=plan.piece.path, reason=str(plan.unsupported)))


def plan_pieces(fs, pieces: Sequence[Piece], columns, options: Options, report: ReadReport,
                footers: dict | None = None) -> list[PiecePlan]:
    """Plan every piece (the ``scan`` stage); a fallback is recorded here (:func:`fallback`).

    Parameters
    ----------
    fs : fsspec filesystem
    pieces : sequence of Piece
    columns : list of str or None
        The columns to decompress (None: all).
    options : Options
    report : ReadReport
    footers : dict, optional
        Footers by path, read already (the pieces of one file share one);
        filled with those read here.

    Returns
    -------
    list of PiecePlan
        In ``pieces`` order; a plan whose ``unsupported`` or
        ``pyarrow_way`` is set is pyarrow's to read.

    Raises
    ------
    UnsupportedFeatureError
        A fallback with ``on_unsupported="raise"``.
    """
    footers = {} if footers is None else footers
    plans = []
    with report.stage("scan"):
        for piece in pieces:
            plan = plan_piece(fs, piece, columns, footers.get(piece.path))
            footers[piece.path] = plan.footer
            plans.append(plan)
    choosing = gpu_can_run()
    for plan in plans:
        if plan.unsupported is not None:
            fallback(plan, options, report)
        elif choosing:
            choice = choose(options, (chunk.rng.codec for chunk in plan.chunks))
            if choice.way is Way.PYARROW:
                plan.pyarrow_way = choice.reason
    return plans


def batches(fs, plans: Sequence[PiecePlan], options: Options, report: ReadReport) -> Iterator[DecompressedBatch]:
    """The page path's plans fetched and decompressed, a batch at a time (each a context manager).

    Plans left to pyarrow (``unsupported`` or ``pyarrow_way``) are
    skipped; where ``auto`` chose pyarrow for every piece, no backend is
    opened (the GPU service is not reached).
    """
    mine = [p for p in plans if p.unsupported is None and p.pyarrow_way is None]
    if not mine and any(p.pyarrow_way is not None for p in plans):
        return iter(())
    return iter_batches(fs, mine, Router(options), options, report)


def decode_image(image: Image, report: ReadReport, partition_fields: set,
                 decode: Callable[[], ImageTable]) -> pa.Table:
    """Run ``decode`` on ``image`` in the ``decode`` stage, pyarrow's errors located; account its columns.

    ``decode`` returns the table and the columns it took from
    ``image.decoded`` (decoded on the GPU); ``partition_fields`` are the
    columns the dataset's partitioning gives, read from no file.

    Raises
    ------
    CorruptDataError
        pyarrow refused the image's data, naming its page.
    """
    located = locate_decode_errors(image.plan.piece.path, image.row_groups, image.buffer)
    with report.stage("decode"), located:
        if image.restore is None:
            table, used = decode()
        else:
            table, used = _decode_restoring(image, decode)
    account_image_columns(report, image, table, used, partition_fields)
    return table


def _decode_restoring(image: Image, decode: Callable[[], ImageTable]) -> ImageTable:
    """``decode()`` of an image whose GPU columns' pages only the device received.

    Where pyarrow read a column of ``image.decoded`` from the image after
    all (the assembly could not use it), or failed, those pages are
    decompressed on the host and the image decoded again.
    """
    assert image.restore is not None
    try:
        table, used = decode()
    except Exception:
        image.restore()
        return decode()
    if set(image.decoded) - set(used):
        image.restore()
        return decode()
    return ImageTable(table, used)
