"""Ordinary memory that GPU-decoded outputs are copied into, reused once their arrays are gone.

Outputs past the zero-copy share of the shared pool are copied out of shared
memory (:mod:`~dask_hwdecomp.service.decoding`). A copy into fresh memory
faults every page in: at scale such a copy ran at about 2.3 GB/s, against
about 12 GB/s into memory already faulted in (``benchmarks/copy_faults.py``).
:class:`Spares` keeps the buffers of copied outputs whose arrays are gone, up
to ``max_bytes``, and hands them to the next copies of about their size; past
that bound a buffer is freed as before.

A buffer is handed out with an owner: keep the owner alive as long as any
array over the buffer (the base of every ``pa.foreign_buffer``). Its
finalizer may run inside any code (the cyclic garbage collector), so it only
queues the buffer; the queue is drained at the next :meth:`Spares.take`.
"""

from __future__ import annotations

import collections
import threading
import weakref

import numpy as np

from ..gpu.pool import size_class

__all__ = ["Spares", "SpareOwner", "spares_for", "spare_stats", "SMALLEST"]

SMALLEST = 1 << 12  # the smallest buffer kept: a page


class SpareOwner:
    """Holds a spare buffer while arrays use it; queued back to its :class:`Spares` when collected."""

    __slots__ = ("__weakref__",)

    def __init__(self, array: np.ndarray, spares: Spares):
        weakref.finalize(self, spares._returned.append, array)


class Spares:
    """Buffers of copied outputs, kept for reuse (see the module docstring).

    Parameters
    ----------
    max_bytes : int
        The most bytes kept while unused; a buffer returned past it is freed.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self._free: dict[int, list[np.ndarray]] = {}
        self._returned: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self.kept_bytes = 0
        self.reused = 0
        self.fresh = 0

    def take(self, nbytes: int) -> tuple[memoryview, SpareOwner]:
        """A buffer of at least ``nbytes`` (its first ``nbytes`` as a view) and the owner to keep with it."""
        cls = size_class(nbytes, minimum=SMALLEST)
        with self._lock:
            self._drain()
            stack = self._free.get(cls)
            array = stack.pop() if stack else None
            if array is not None:
                self.kept_bytes -= array.nbytes
                self.reused += 1
            else:
                self.fresh += 1
        if array is None:
            array = np.empty(cls, dtype=np.uint8)
        return array.data[:nbytes], SpareOwner(array, self)

    def _drain(self) -> None:
        while True:
            try:
                array = self._returned.popleft()
            except IndexError:
                return
            if self.kept_bytes + array.nbytes <= self.max_bytes:
                self._free.setdefault(array.nbytes, []).append(array)
                self.kept_bytes += array.nbytes

    def stats(self) -> dict:
        """Buffers handed out reused or fresh, and the bytes kept unused."""
        with self._lock:
            self._drain()
            return {"spare_reused": self.reused, "spare_fresh": self.fresh, "spare_kept_bytes": self.kept_bytes}


_spares: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_spares_lock = threading.Lock()


def spares_for(client, max_bytes: int) -> Spares:
    """The :class:`Spares` of a client (a ``ServiceClient``), made on first use with ``max_bytes``."""
    with _spares_lock:
        s = _spares.get(client)
        if s is None:
            s = _spares[client] = Spares(max_bytes)
        return s


def spare_stats(client) -> dict:
    """:meth:`Spares.stats` of a client's spares (zeros where it copied nothing yet)."""
    with _spares_lock:
        s = _spares.get(client)
    return s.stats() if s is not None else {"spare_reused": 0, "spare_fresh": 0, "spare_kept_bytes": 0}
