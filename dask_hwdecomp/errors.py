"""The exceptions dask_hwdecomp raises for what it finds in a file.

Every error about a file's content, or about this reader's limits and
backends, is a :class:`HwdecompError`. Where the reader knows it, the
message names the file, row group, column and page, and the offending value
with its limit, so that a failed read in a cluster of hundreds of files says
exactly where to look.

Each is also an instance of what pyarrow raises for the same fault, so that
handlers written for pyarrow (``except (OSError, pyarrow.ArrowInvalid)``)
keep catching them:

- broken metadata, pages, checksums, data pyarrow cannot decode, sizes
  above a limit: both ``OSError`` and ``pyarrow.ArrowInvalid`` (so also
  ``ValueError``). pyarrow raises one or the other for the same kind of
  fault: ``ArrowInvalid`` for a bad footer frame or a page that
  decompresses to the wrong size, ``OSError`` for a footer or page header
  that does not decode, corrupt compressed data or a CRC mismatch;
- a feature not served: ``pyarrow.ArrowNotImplementedError``.

Mistakes in the call itself (a missing path, an unknown option, a row group
the file lacks) raise what Python or pyarrow raise for them; see the errors
section of the user guide.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

__all__ = [
    "HwdecompError",
    "ServiceUnreachable",
    "GpuBatchFailedError",
    "CorruptFileError",
    "CorruptMetadataError",
    "CorruptPageError",
    "CorruptDataError",
    "ChecksumError",
    "UnsupportedFeatureError",
    "BackendUnavailableError",
    "LimitExceededError",
    "PageLocation",
]


@dataclass(frozen=True)
class PageLocation:
    """Where a page lives: file, row group, column path and page ordinal.

    Any field may be ``None`` when the reader does not know it (yet).
    """

    file: str | None = None
    row_group: int | None = None
    column: str | None = None
    page: int | None = None

    def describe(self) -> str:
        parts = []
        if self.file is not None:
            parts.append(f"file {self.file!r}")
        if self.row_group is not None:
            parts.append(f"row group {self.row_group}")
        if self.column is not None:
            parts.append(f"column {self.column!r}")
        if self.page is not None:
            parts.append(f"page {self.page}")
        return ", ".join(parts)

    def with_(self, **changes) -> PageLocation:
        fields = dict(self.__dict__)
        fields.update(changes)
        return PageLocation(**fields)


class HwdecompError(Exception):
    """Base class of every exception raised by dask_hwdecomp.

    Parameters
    ----------
    message : str
        What went wrong, with the offending value and its limit.
    location : PageLocation, optional
        Where it went wrong; rendered in front of the message.
    """

    def __init__(self, message: str, location: PageLocation | None = None):
        self.reason = message
        self.location = location
        where = location.describe() if location is not None else ""
        # One argument only, whichever built-in comes next in the MRO
        # (OSError takes a lone argument as its message, without errno).
        super().__init__(f"{where}: {message}" if where else message)

    def __reduce__(self):
        # Keep the structured fields across pickling (dask ships errors
        # from workers to the client).
        return (type(self), (self.reason, self.location))


class CorruptFileError(HwdecompError, OSError, pa.ArrowInvalid):
    """Base of the errors about a file's bytes; also ``OSError`` and ``pyarrow.ArrowInvalid``.

    pyarrow raises one or the other for the same kind of fault (``OSError``
    for corrupt compressed data or a header that does not decode,
    ``ArrowInvalid`` for a bad footer frame or a page of the wrong size), so
    every subclass is both: a handler written for pyarrow catches it.
    """


class CorruptMetadataError(CorruptFileError):
    """The footer or a page header cannot be decoded or is inconsistent."""


class CorruptPageError(CorruptFileError):
    """A page body does not decompress to what its header declares."""


class CorruptDataError(CorruptFileError):
    """pyarrow could not decode the decompressed pages (levels, values, schema).

    Page decompression succeeded and every size matched its header, but the
    bytes inside are not valid Parquet data. pyarrow's own exception is
    chained as ``__cause__``. The location names the row group and column
    that fail to decode on their own, where one does.
    """


class ChecksumError(CorruptPageError):
    """A checksum does not match: a page's CRC-32 (``verify_checksums=True``),
    a gzip member's CRC-32 or a Zstd frame's content checksum (always).

    The message gives the expected and the actual value. It is the data's
    fault, not the decoder's: ``cpu_retry`` never redoes such a page.
    """


class UnsupportedFeatureError(HwdecompError, pa.ArrowNotImplementedError):
    """The file uses a feature this reader does not serve (e.g. LZO).

    Also a ``pyarrow.ArrowNotImplementedError`` (a ``NotImplementedError``).
    """


class BackendUnavailableError(HwdecompError):
    """An explicitly requested decompression backend cannot run here."""


class ServiceUnreachable(BackendUnavailableError):
    """The GPU service cannot be reached or started; readers fall back to the CPU.

    Here, below every layer, because the router that falls back and the
    service client that raises it are on different floors.
    """


class GpuBatchFailedError(HwdecompError):
    """The GPU service was lost under a batch whose every page the CPU decodes.

    The service died, hung or failed the batch's call as a whole: for
    another reader's corrupt page sharing the GPU or the call, or for a
    page the GPU fails on and the CPU reads. The CPU's output of every
    page is in the destination by then (the CPU pass that looked for a bad
    page wrote it); the router keeps it, logs a warning and lists the
    reason in the read's report (``ReadReport.retries``), and the batch is
    decoded by pyarrow rather than wait for a fresh service. The GPU's own
    error, if it gave one, is chained as ``__cause__``.

    Here, below every layer, because the router that keeps the CPU's
    output and the service client that raises it are on different floors.
    """


class LimitExceededError(CorruptFileError):
    """A size exceeds a configured bound; the message names the option.

    A :class:`CorruptFileError` (so ``OSError`` and ``ArrowInvalid``) like
    pyarrow's refusal of a page or footer beyond its own bounds: in practice
    a declared size this large is a corrupt header.
    """
