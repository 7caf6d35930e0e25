"""What the command line reports as one line instead of a traceback."""

from __future__ import annotations

import pyarrow as pa

from ..errors import HwdecompError

__all__ = ["UsageError", "InputError", "USER_ERRORS"]


class UsageError(Exception):
    """A command line that cannot be run as given (a path naming nothing, a backend absent here)."""


class InputError(Exception):
    """Broken input whose reader's error does not say where it is (pyarrow's "Corrupt snappy compressed data.").

    Parameters
    ----------
    where : str
        What was being read: the file, directory or glob the user gave.
    error : BaseException
        The reader's error, named in the message after ``where``.
    """

    def __init__(self, where: str, error: BaseException):
        super().__init__(f"{where}: {type(error).__name__}: {error}")


# A user's mistake, a user's broken file (the project's errors, or pyarrow's
# from dask's footer pass), or the machine refusing a file: the message
# says all there is to say. Anything else is a bug and keeps its traceback.
USER_ERRORS = (UsageError, InputError, HwdecompError, pa.ArrowInvalid, OSError)
