"""What the command line reports as one line instead of a traceback."""

from __future__ import annotations

import pyarrow as pa

from ..errors import HwdecompError

__all__ = ["UsageError", "USER_ERRORS"]


class UsageError(Exception):
    """A command line that cannot be run as given (a path naming nothing, a backend absent here)."""


# A user's mistake, a user's broken file (the project's errors, or pyarrow's
# from dask's footer pass), or the machine refusing a file: the message
# says all there is to say. Anything else is a bug and keeps its traceback.
USER_ERRORS = (UsageError, HwdecompError, pa.ArrowInvalid, OSError)
