"""Turning pyarrow's decode failures into the project's exceptions.

pyarrow decodes the uncompressed image; when the bytes inside a page are
broken (levels, bit widths, value counts, a schema it refuses), it raises
``ArrowInvalid`` or ``OSError`` without the file's name. :func:`locate_decode_errors`
wraps every decode so such failures surface as
:class:`~dask_hwdecomp.errors.CorruptDataError` naming the file, and, when
the image is given, the row group and column that fail to decode on their
own; pyarrow's error is chained.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import CorruptDataError, HwdecompError, PageLocation, UnsupportedFeatureError

__all__ = ["locate_decode_errors", "locate_decode_failure"]

# pyarrow raises ArrowInvalid both for broken data and for a column or
# filter name that is not in the file. The second is the caller's mistake,
# not the file's: it passes through unchanged, as pyarrow raises it.
_CALLER_ERRORS = ("No match for FieldRef",)


@contextlib.contextmanager
def locate_decode_errors(
    path: str, row_groups: Sequence[int] | None = None, image: pa.Buffer | None = None
) -> Iterator[None]:
    """Re-raise pyarrow decode failures inside the block as project errors.

    Parameters
    ----------
    path : str
        The original file (not the in-memory image), named in the error.
    row_groups : sequence of int, optional
        The original row groups the image holds, in order (row group ``i``
        of the image is ``row_groups[i]``); named in the error.
    image : pyarrow.Buffer, optional
        The uncompressed image being decoded. On a failure it is decoded
        again one row group and one column at a time, and the first pair
        that fails is named in the error.

    Raises
    ------
    CorruptDataError
        pyarrow refused the data (``ArrowInvalid``, ``OSError``, other
        ``ArrowException``); its error is the ``__cause__``.
    UnsupportedFeatureError
        pyarrow does not implement what the data needs
        (``ArrowNotImplementedError``).

    Examples
    --------
    >>> with locate_decode_errors("part.0.parquet", [0], image):  # doctest: +SKIP
    ...     table = pq.read_table(pa.BufferReader(image))
    """
    try:
        yield
    except HwdecompError:
        raise
    except pa.ArrowNotImplementedError as exc:
        raise UnsupportedFeatureError(
            f"pyarrow cannot decode this data: {exc}", _where(path, row_groups, image)
        ) from exc
    except (pa.ArrowException, OSError) as exc:
        if isinstance(exc, pa.ArrowInvalid) and str(exc).startswith(_CALLER_ERRORS):
            raise
        raise CorruptDataError(
            f"pyarrow could not decode the decompressed data "
            f"({type(exc).__name__}: {exc})",
            _where(path, row_groups, image),
        ) from exc


def locate_decode_failure(image: pa.Buffer) -> tuple[int, str] | None:
    """The first (row group of the image, leaf column path) that pyarrow fails to decode.

    Decodes each leaf column of each row group on its own, in file order.
    None when every one decodes alone (the failure needs several columns
    together, or lies outside the column data) or the image's footer itself
    does not open.
    """
    try:
        pf = pq.ParquetFile(pa.BufferReader(image))
        leaves = [pf.schema.column(j).path for j in range(pf.metadata.num_columns)]
        num_row_groups = pf.metadata.num_row_groups
    except (pa.ArrowException, OSError):
        return None
    for rg in range(num_row_groups):
        for leaf in leaves:
            try:
                pf.read_row_group(rg, columns=[leaf], use_threads=False)
            except (pa.ArrowException, OSError) as exc:
                if isinstance(exc, pa.ArrowInvalid) and str(exc).startswith(_CALLER_ERRORS):
                    continue  # the path does not select the leaf (a dot in a name): no verdict
                return rg, leaf
            except Exception:  # noqa: BLE001 - a selection pyarrow refuses says nothing of the data
                continue
    return None


def _where(path: str, row_groups, image) -> PageLocation:
    rgs = list(row_groups) if row_groups is not None else []
    where = PageLocation(file=path, row_group=rgs[0] if len(rgs) == 1 else None)
    if image is None:
        return where
    try:
        found = locate_decode_failure(image)
    except Exception:  # noqa: BLE001 - locating is best effort; the decode error itself is raised
        found = None
    if found is None:
        return where
    rg, leaf = found
    return where.with_(row_group=rgs[rg] if rg < len(rgs) else None, column=leaf)
