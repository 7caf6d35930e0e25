"""The one place where CUDA driver results and nvCOMP statuses become exceptions.

Every driver call of this package goes through :func:`check`, every nvCOMP
call through :func:`check_nvcomp`; both raise with the message
``"NAME: explanation (while <what>)"``.
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import HwdecompError

__all__ = ["CudaError", "NvcompError", "check", "check_nvcomp", "NVCOMP_STATUS"]


class CudaError(HwdecompError):
    """A CUDA driver call failed.

    Attributes
    ----------
    code : int
        The ``CUresult`` value.
    name : str
        Its name, e.g. ``"CUDA_ERROR_ILLEGAL_ADDRESS"``.
    """

    def __init__(self, message: str, location=None, *, code: int = -1, name: str = ""):
        super().__init__(message, location)
        self.code = code
        self.name = name


class NvcompError(HwdecompError):
    """An nvCOMP call failed as a whole (not one page of it)."""


NVCOMP_STATUS = {
    0: ("nvcompSuccess", "success"),
    10: ("nvcompErrorInvalidValue", "an argument is invalid"),
    11: ("nvcompErrorNotSupported", "not supported"),
    12: ("nvcompErrorCannotDecompress", "the stream does not decompress"),
    13: ("nvcompErrorBadChecksum", "a checksum in the stream does not match"),
    14: ("nvcompErrorCannotVerifyChecksums", "checksums cannot be verified"),
    15: ("nvcompErrorOutputBufferTooSmall", "the output is larger than the declared size"),
    16: ("nvcompErrorWrongHeaderLength", "the stream header has the wrong length"),
    17: ("nvcompErrorAlignment", "a buffer is not aligned as required"),
    18: ("nvcompErrorChunkSizeTooLarge", "a chunk is larger than the codec allows"),
    19: ("nvcompErrorCannotCompress", "cannot compress"),
    20: ("nvcompErrorWrongInputLength", "the input length is wrong"),
    21: ("nvcompErrorBatchSizeTooLarge", "the batch has too many chunks"),
    22: ("nvcompErrorSubChunkCountTooLarge", "too many sub-chunks"),
    23: ("nvcompErrorSubChunkCountTooSmall", "too few sub-chunks"),
    24: ("nvcompErrorOutputBufferAlignmentTooSmall", "the output buffer is misaligned"),
    1000: ("nvcompErrorCudaError", "a CUDA error occurred inside nvCOMP"),
    10000: ("nvcompErrorInternal", "an internal nvCOMP error"),
}


def nvcomp_status_text(status: int) -> str:
    """``"NAME: explanation"`` for an ``nvcompStatus_t`` value."""
    name, text = NVCOMP_STATUS.get(int(status), (f"nvcompStatus({int(status)})", "unknown status"))
    return f"{name}: {text}"


class _DriverText(NamedTuple):
    """A ``CUresult`` as a number, its name and the driver's explanation."""

    code: int
    name: str
    text: str


def _driver_text(result) -> _DriverText:
    from cuda.bindings import driver

    code = int(result)
    err, name = driver.cuGetErrorName(result)
    name = name.decode() if err == driver.CUresult.CUDA_SUCCESS and name else f"CUresult({code})"
    err, text = driver.cuGetErrorString(result)
    text = text.decode() if err == driver.CUresult.CUDA_SUCCESS and text else "unknown error"
    return _DriverText(code, name, text)


def check(ret, what: str):
    """Unwrap a ``cuda.bindings.driver`` return tuple, raising on failure.

    Parameters
    ----------
    ret : tuple or CUresult
        What the binding returned: ``(CUresult, *values)`` or a bare result.
    what : str
        What was being done, for the message.

    Returns
    -------
    None, a value, or a tuple of values
        The values after the result.

    Raises
    ------
    CudaError
        The result is not ``CUDA_SUCCESS``.
    """
    if isinstance(ret, tuple):
        result, values = ret[0], ret[1:]
    else:
        result, values = ret, ()
    if int(result) != 0:
        d = _driver_text(result)
        raise CudaError(f"{d.name}: {d.text} (while {what})", code=d.code, name=d.name)
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def check_nvcomp(status: int, what: str) -> None:
    """Raise :class:`NvcompError` unless ``status`` is ``nvcompSuccess``.

    Raises
    ------
    NvcompError
    """
    if int(status) != 0:
        raise NvcompError(f"{nvcomp_status_text(status)} (while {what})")
