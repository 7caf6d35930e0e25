"""Turning pyarrow's decode failures into the project's exceptions.

pyarrow decodes the uncompressed image; when the bytes inside a page are
broken (levels, bit widths, value counts, a schema it refuses), it raises
``ArrowInvalid`` or ``OSError`` without the file's name. :func:`decode_errors`
wraps every decode so such failures surface as
:class:`~dask_hwdecomp.errors.CorruptDataError` naming the file, with
pyarrow's error chained.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import pyarrow as pa

from ..errors import CorruptDataError, HwdecompError, PageLocation, UnsupportedFeatureError

__all__ = ["decode_errors"]

# pyarrow raises ArrowInvalid both for broken data and for a column or
# filter name that is not in the file. The second is the caller's mistake,
# not the file's: it passes through unchanged, as pyarrow raises it.
_CALLER_ERRORS = ("No match for FieldRef",)


@contextlib.contextmanager
def decode_errors(path: str, row_groups=None) -> Iterator[None]:
    """Re-raise pyarrow decode failures inside the block as project errors.

    Parameters
    ----------
    path : str
        The original file (not the in-memory image), named in the error.
    row_groups : sequence of int, optional
        The original row groups being decoded, named in the error when
        there is exactly one.

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
    >>> with decode_errors("part.0.parquet"):  # doctest: +SKIP
    ...     table = pq.read_table(pa.BufferReader(image))
    """
    try:
        yield
    except HwdecompError:
        raise
    except pa.ArrowNotImplementedError as exc:
        raise UnsupportedFeatureError(
            f"pyarrow cannot decode this data: {exc}", _where(path, row_groups)
        ) from exc
    except (pa.ArrowException, OSError) as exc:
        if isinstance(exc, pa.ArrowInvalid) and str(exc).startswith(_CALLER_ERRORS):
            raise
        raise CorruptDataError(
            f"pyarrow could not decode the decompressed data "
            f"({type(exc).__name__}: {exc})",
            _where(path, row_groups),
        ) from exc


def _where(path: str, row_groups) -> PageLocation:
    rgs = list(row_groups) if row_groups is not None else []
    return PageLocation(file=path, row_group=rgs[0] if len(rgs) == 1 else None)
