"""The bookkeeping shared by the host-memory pools: reuse by size, a byte cap.

:class:`CappedPool` keeps idle blocks and lends the smallest one that fits
(within twice the request's size class); a new block is created only when
none fits, after idle blocks that do not fit are freed to stay under the
cap. Past the cap a subclass decides what to lend (pageable memory, or a
block freed on return). Subclasses say how a block is made and freed.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

__all__ = ["CappedPool", "Taken", "size_class"]

_MIN_BLOCK = 1 << 20


def size_class(nbytes: int, minimum: int = _MIN_BLOCK) -> int:
    """``nbytes`` rounded up to one of 8 steps per power of two (waste < 12.5%)."""
    n = max(nbytes, minimum)
    top = 1 << (n - 1).bit_length()
    step = max(top // 16, 1)
    return (n + step - 1) // step * step


class Taken(NamedTuple):
    """What :meth:`CappedPool._take` decided for a request."""

    block: Any  # an idle block that fits, or None: create one
    want: int  # bytes of the block to create (0 when one was found)
    keep: bool  # whether the pool keeps the block (counted against the cap)


class CappedPool:
    """Idle blocks (objects with ``nbytes``) reused by size, at most ``cap_bytes`` held.

    Subclasses implement :meth:`_destroy` and call :meth:`_take`,
    :meth:`_created`, :meth:`_create_failed` and :meth:`_give_back`.
    """

    what = "pool"

    def __init__(self, cap_bytes: int):
        self.cap_bytes = cap_bytes
        self._lock = threading.Lock()
        self._idle: list = []
        self._held = 0  # bytes of kept blocks, lent and idle
        self._closed = False
        self.allocations = 0
        self.reuses = 0
        self.overflows = 0

    def _round(self, nbytes: int) -> int:
        return size_class(nbytes)

    def _destroy(self, block) -> None:
        raise NotImplementedError

    def _take(self, nbytes: int) -> Taken:
        """An idle block that fits, or how large a block to create and whether to keep it.

        Raises
        ------
        RuntimeError
            The pool is closed.
        """
        freed = []
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the {self.what} is closed")
            fits = [b for b in self._idle if nbytes <= b.nbytes <= 2 * size_class(nbytes)]
            if fits:
                block = min(fits, key=lambda b: b.nbytes)
                self._idle.remove(block)
                self.reuses += 1
                return Taken(block, 0, True)
            want = self._round(nbytes)
            # Free idle blocks that do not fit until the new one is under the cap.
            for block in sorted(self._idle, key=lambda b: -b.nbytes):
                if self._held + want <= self.cap_bytes:
                    break
                self._idle.remove(block)
                self._held -= block.nbytes
                freed.append(block)
            keep = self._held + want <= self.cap_bytes
            if keep:
                self._held += want
            else:
                self.overflows += 1
        for block in freed:
            self._destroy(block)
        return Taken(None, want, keep)

    def _created(self, keep: bool) -> None:
        if keep:
            with self._lock:
                self.allocations += 1

    def _create_failed(self, want: int, keep: bool) -> None:
        if keep:
            with self._lock:
                self._held -= want

    def _give_back(self, block, keep: bool = True) -> None:
        with self._lock:
            if keep and not self._closed:
                self._idle.append(block)
                return
            if keep:
                self._held -= block.nbytes
        self._destroy(block)

    def stats(self) -> dict:
        """Counters: ``held_bytes``, ``idle_blocks``, ``allocations``, ``reuses``, ``overflows``."""
        with self._lock:
            return {
                "held_bytes": self._held,
                "idle_blocks": len(self._idle),
                "allocations": self.allocations,
                "reuses": self.reuses,
                "overflows": self.overflows,
            }

    def close(self) -> None:
        """Free idle blocks now; blocks still lent are freed when given back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            for block in idle:
                self._held -= block.nbytes
        for block in idle:
            self._destroy(block)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
