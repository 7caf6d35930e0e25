"""Which decode the device memory a thread allocates belongs to.

Kept apart from :mod:`~.device_pool` (which imports numba's driver) so that
the decoder also runs under numba's CUDA simulator, where there is no pool.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["holding", "current_holder"]

_local = threading.local()


@contextlib.contextmanager
def holding(holder: list) -> Iterator[None]:
    """Inside the block, device memory this thread allocates is also appended to ``holder``.

    Clear ``holder`` only once the work that uses the memory is done (its
    stream synchronised).
    """
    saved = getattr(_local, "holder", None)
    _local.holder = holder
    try:
        yield
    finally:
        _local.holder = saved


def current_holder() -> list | None:
    """The holder of this thread's allocations, if inside :func:`holding`."""
    return getattr(_local, "holder", None)
