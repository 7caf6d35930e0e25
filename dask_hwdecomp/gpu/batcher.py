"""Merging the decompression calls of concurrent threads into one call per stream.

GPU throughput depends on pages per call (nvCOMP gives each page to one
warp-level worker: on an H200, Snappy ran at 31 GB/s with 256 pages per call
and 155 GB/s with 4096), so the parts
that concurrent readers submit are merged: each stream has a dispatcher
thread that takes the oldest waiting part, waits up to ``latency_s`` for
others to join (not at all when every thread that recently used the
batcher is already waiting), takes parts in arrival order up to
``budget_bytes`` of output, and runs them as one batch on its slot. While
one stream's batch runs, the next dispatcher gathers the next batch, so
copies, decompression and the callers' decoding overlap.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import NamedTuple

from .staging import Part

__all__ = ["Batcher"]

_RECENT = 64


class _Waiter(NamedTuple):
    """Who waits for a part: its future, the submitting thread, since when."""

    future: Future
    thread: int
    since: float


class Batcher:
    """Dispatcher threads, one per slot, over one queue of parts.

    Parameters
    ----------
    slots : list of Slot
        Owned: closed by :meth:`close`.
    ops : CudaOps or stand-in
        To make the context current in the dispatcher threads.
    budget_bytes : int
        Most output bytes merged into one batch (one part may exceed it).
    latency_s : float
        Longest wait for more parts once one is queued.
    """

    def __init__(self, slots, ops, budget_bytes: int, latency_s: float):
        self._slots = list(slots)
        self._ops = ops
        self.budget_bytes = budget_bytes
        self.latency_s = latency_s
        self._cond = threading.Condition()
        self._queue: collections.deque = collections.deque()
        self._recent: collections.deque = collections.deque(maxlen=_RECENT)
        self._closed = False
        self.batches = 0
        self.parts = 0
        self.pages = 0
        self._threads = [
            threading.Thread(target=self._serve, args=(slot,), name=f"hwdecomp-stream-{i}", daemon=True)
            for i, slot in enumerate(self._slots)
        ]
        for t in self._threads:
            t.start()

    def run(self, parts: Sequence[Part]) -> list:
        """Submit ``parts`` and wait; per part, its list of failures.

        Raises
        ------
        CudaError, NvcompError
            A batch holding one of the parts failed as a whole.
        RuntimeError
            The batcher is closed.
        """
        futures = []
        me = threading.get_ident()
        with self._cond:
            if self._closed:
                raise RuntimeError("the GPU batcher is closed")
            now = time.monotonic()
            for part in parts:
                fut: Future = Future()
                part.owner = _Waiter(fut, me, now)
                self._queue.append(part)
                futures.append(fut)
            self._recent.append(me)
            self._cond.notify_all()
        return [f.result() for f in futures]

    def _ready(self) -> bool:
        waiting = {p.owner.thread for p in self._queue}
        if set(self._recent) <= waiting:
            return True
        size = 0
        for p in self._queue:
            size += p.out_bytes
            if size >= self.budget_bytes:
                return True
        return time.monotonic() >= self._queue[0].owner.since + self.latency_s

    def _take(self) -> list[Part]:
        taken = [self._queue.popleft()]
        size = taken[0].out_bytes
        while self._queue and size + self._queue[0].out_bytes <= self.budget_bytes:
            part = self._queue.popleft()
            size += part.out_bytes
            taken.append(part)
        return taken

    def _serve(self, slot) -> None:
        try:
            self._ops.activate()
        except BaseException as exc:  # no context: fail whatever comes
            activation_error: BaseException | None = exc
        else:
            activation_error = None
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                while not self._ready():
                    left = self._queue[0].owner.since + self.latency_s - time.monotonic()
                    self._cond.wait(timeout=max(left, 0.0001))
                    if not self._queue:
                        break
                if not self._queue:
                    continue
                batch = self._take()
            try:
                if activation_error is not None:
                    raise activation_error
                results = slot.run(batch)
            except BaseException as exc:
                for part in batch:
                    part.owner.future.set_exception(exc)
            else:
                for part, failures in zip(batch, results):
                    part.owner.future.set_result(failures)
            with self._cond:
                self.batches += 1
                self.parts += len(batch)
                self.pages += sum(len(part.jobs) for part in batch)

    def stats(self) -> dict:
        out = {"batches": self.batches, "parts": self.parts, "pages": self.pages}
        for i, slot in enumerate(self._slots):
            for k, v in slot.stats().items():
                out[f"stream{i}_{k}"] = v
        return out

    def close(self) -> None:
        """Finish queued parts, stop the dispatchers, close the slots."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            t.join()
        errors = []
        for slot in self._slots:
            try:
                slot.close()
            except BaseException as exc:  # close the others, then report
                errors.append(exc)
        if errors:
            raise errors[0]
