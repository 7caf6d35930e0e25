"""Decompressed pages the GPU service keeps on the device between a client's run and its decode.

A client that will decode a batch on the GPU asks its runs to keep their
outputs (``Run.keep``). For such a run the service hands the backend a
:class:`RunKeeper`: every part of its GPU calls whose jobs all succeed has
its outputs copied, on the device, into a block of the decoder's memory
(:class:`~dask_hwdecomp.gpu.stream_runner.Keeper`). When the run succeeds,
the :class:`KeptStore` names its blocks with a token, which the ``Done``
carries. The client's measure names the tokens of its batch: the decoder
reads those pages on the device and uploads only the rest from the
client's shared memory (:mod:`dask_hwdecomp.gpudecode.uploads`). A token is
dropped when its measure has run, when the client drops it (a batch that
decoded nothing on the GPU), or when its connection closes.

Bounds: the store keeps at most ``cap_bytes`` of blocks; a run past it
keeps nothing and its decode uploads everything, as without keeping. A
token is used only by its own connection, and only for a measure over the
same segment whose range holds all of the token's pages (a measure naming
a token otherwise is refused); the pages' bytes are those the client's
buffer received from the same call (only the jobs' outputs are read there,
the rest comes from the host), or, in the run's ``device_only`` ranges,
those the buffer did not receive: only the device holds them.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..gpudecode.uploads import KeptPages, device_address

__all__ = ["KeptStore", "RunKeeper", "KEPT_CAP_BYTES"]

# Device bytes of kept pages the service holds at most (all clients).
KEPT_CAP_BYTES = 4 << 30


@dataclass(frozen=True)
class _Block:
    """A block lent to a keeper: the device array and its address."""

    array: Any
    address: int
    nbytes: int


@dataclass(frozen=True)
class _Entry:
    owner: object
    segment: int
    pages: tuple[KeptPages, ...]

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.pages)


class KeptStore:
    """Kept pages by token, bounded in bytes (see the module docstring).

    Parameters
    ----------
    cap_bytes : int
        Most bytes of blocks lent or kept at once.
    """

    def __init__(self, cap_bytes: int = KEPT_CAP_BYTES):
        self.cap_bytes = cap_bytes
        self._lock = threading.Lock()
        self._entries: dict[int, _Entry] = {}
        self._tokens = itertools.count(1)
        self._bytes = 0
        self.kept_runs = 0
        self.refused_bytes = 0
        self.alloc_failures = 0  # blocks the device could not allocate: their runs were not kept
        self.used = 0
        self.dropped = 0

    def admit(self, nbytes: int) -> bool:
        """Count ``nbytes`` of a new block if they fit under the cap."""
        with self._lock:
            if self._bytes + nbytes > self.cap_bytes:
                self.refused_bytes += nbytes
                return False
            self._bytes += nbytes
            return True

    def give_back(self, nbytes: int) -> None:
        """``nbytes`` of blocks are free again."""
        with self._lock:
            self._bytes -= nbytes

    def put(self, owner: object, segment: int, offset: int, pages: Sequence[KeptPages]) -> int:
        """Keep a run's ``pages`` (offsets in its ``dst``, which starts at ``offset`` of ``segment``); the token."""
        entry = _Entry(owner, segment, tuple(p.shifted(offset) for p in pages))
        with self._lock:
            token = next(self._tokens)
            self._entries[token] = entry
            self.kept_runs += 1
        return token

    def take(self, owner: object, tokens: Sequence[int], segment: int, offset: int, nbytes: int) -> list[KeptPages]:
        """The pages of ``owner``'s ``tokens`` that lie in ``[offset, offset + nbytes)`` of ``segment``.

        Offsets come back relative to ``offset``. The tokens are removed
        (each names one decode); release the pages with :meth:`release`.

        Raises
        ------
        KeyError
            A token is not ``owner``'s or does not lie in the range (nothing
            is taken): a run may have left bytes only there (``device_only``),
            which the host does not hold.
        """
        out: list[KeptPages] = []
        with self._lock:
            for t in tokens:
                entry = self._entries.get(t)
                if entry is None or entry.owner is not owner or entry.segment != segment or not all(
                        p.within(offset, offset + nbytes) for p in entry.pages):
                    raise KeyError(f"kept pages {t}, which this connection does not hold for this range")
            for t in tokens:
                entry = self._entries.pop(t)
                out.extend(p.shifted(-offset) for p in entry.pages)
                self.used += 1
        return out

    def release(self, pages: Sequence[KeptPages]) -> None:
        """Pages from :meth:`take` are read (their decode's stream synchronised)."""
        self.give_back(sum(p.nbytes for p in pages))

    def drop(self, owner: object, tokens: Sequence[int] | None = None) -> None:
        """Drop ``owner``'s ``tokens`` (all of its tokens when None)."""
        with self._lock:
            mine = [t for t, e in self._entries.items()
                    if e.owner is owner and (tokens is None or t in tokens)]
            for t in mine:
                self._bytes -= self._entries.pop(t).nbytes
                self.dropped += 1

    def stats(self) -> dict:
        """``kept_runs`` kept, ``kept_used`` read by a decode, ``kept_dropped`` unread, bytes now and refused.

        ``kept_alloc_failures``: blocks the device could not allocate (those
        runs' pages are uploaded from the host instead).
        """
        with self._lock:
            return {"kept_runs": self.kept_runs, "kept_used": self.used, "kept_dropped": self.dropped,
                    "kept_bytes": self._bytes, "kept_waiting": len(self._entries),
                    "kept_refused_bytes": self.refused_bytes, "kept_alloc_failures": self.alloc_failures}

    def allocation_failed(self, nbytes: int) -> None:
        """A block of ``nbytes`` admitted could not be allocated: given back, and counted."""
        with self._lock:
            self._bytes -= nbytes
            self.alloc_failures += 1


class RunKeeper:
    """The :class:`~dask_hwdecomp.gpu.stream_runner.Keeper` of one run.

    Parameters
    ----------
    store : KeptStore
        Bounds the bytes lent.
    allocate : callable
        ``allocate(nbytes)``: a device array of the decoder's memory.

    device_only : ndarray of int64, shape (n, 2), optional
        Sorted, disjoint ranges of the run's ``dst`` that only the GPU
        decoder reads: not copied back to the client where kept.
    """

    def __init__(self, store: KeptStore, allocate: Callable[[int], Any], device_only: np.ndarray | None = None):
        self._store = store
        self._allocate = allocate
        self._lock = threading.Lock()
        self.pages: list[KeptPages] = []
        self.device_only = np.zeros((0, 2), np.int64) if device_only is None else device_only

    def reserve(self, nbytes: int) -> _Block | None:
        if not self._store.admit(nbytes):
            return None
        try:
            array = self._allocate(nbytes)
        except Exception:  # the device is short of memory: this decode uploads instead (counted)
            self._store.allocation_failed(nbytes)
            return None
        return _Block(array, device_address(array), nbytes)

    def keep(self, block: _Block, spans: np.ndarray, outputs: np.ndarray) -> None:
        with self._lock:
            self.pages.append(KeptPages(block.array, spans.copy(), outputs.copy()))

    def release(self, block: _Block) -> None:
        self._store.give_back(block.nbytes)

    def exclude(self, outputs: np.ndarray) -> None:
        """Outputs the backend rewrote on the host after its call: the decoder reads them from the host."""
        gone = {(int(a), int(n)) for a, n in np.asarray(outputs, dtype=np.int64).reshape(-1, 2).tolist()}
        with self._lock:
            self.pages = [KeptPages(p.array, p.spans, p.outputs[[(int(a), int(n)) not in gone
                                                                  for a, n in p.outputs.tolist()]].reshape(-1, 2))
                          for p in self.pages]

    def release_all(self) -> None:
        """The run failed: nothing it kept is kept."""
        with self._lock:
            pages, self.pages = self.pages, []
        self._store.give_back(sum(p.nbytes for p in pages))
