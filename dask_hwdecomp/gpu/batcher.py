"""Merging the parts of concurrent threads into one GPU call per stream.

GPU throughput depends on pages per call (nvCOMP gives each page to one
warp-level worker: on an H200, Snappy ran at 31 GB/s with 256 pages per call
and 155 GB/s with 4096), so the parts
that concurrent readers submit are merged: each stream has a dispatcher
thread that takes the oldest waiting part, waits up to ``latency_s`` for
others to join (not at all when every thread that recently used the
batcher is already waiting), takes parts in arrival order up to
``budget_bytes`` of output (:func:`~dask_hwdecomp.budget.take_within_budget`),
and runs them as one *call* on its stream runner. While one stream's call runs, the
next dispatcher gathers the next call, so copies, decompression and the
callers' decoding overlap.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import NamedTuple

from .. import timeline
from ..budget import take_within_budget
from .staging import Part

__all__ = ["Batcher"]

_RECENT = 64


class _Waiter(NamedTuple):
    """Who waits for a part: its future, the submitting thread, since when."""

    future: Future
    thread: int
    since: float


class Batcher:
    """Dispatcher threads, one per stream runner, over one queue of parts.

    Parameters
    ----------
    runners : list of StreamRunner
        Owned: closed by :meth:`close`.
    ops : CudaOps or stand-in
        To make the context current in the dispatcher threads.
    budget_bytes : int
        Most output bytes merged into one call (one part may exceed it).
    latency_s : float
        Longest wait for more parts once one is queued.
    """

    def __init__(self, runners, ops, budget_bytes: int, latency_s: float):
        self._runners = list(runners)
        self._ops = ops
        self.budget_bytes = budget_bytes
        self.latency_s = latency_s
        self._cond = threading.Condition()
        self._queue: collections.deque = collections.deque()
        self._recent: collections.deque = collections.deque(maxlen=_RECENT)
        self._closed = False
        self.calls = 0
        self.parts = 0
        self.pages = 0
        self._threads = [
            threading.Thread(target=self._serve, args=(i, runner), name=f"hwdecomp-stream-{i}", daemon=True)
            for i, runner in enumerate(self._runners)
        ]
        for t in self._threads:
            t.start()

    def run(self, parts: Sequence[Part]) -> list:
        """Submit ``parts`` and wait; per part, its list of failures.

        Raises
        ------
        CudaError, NvcompError
            A call holding one of the parts failed as a whole.
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
        count = take_within_budget((p.out_bytes for p in self._queue), self.budget_bytes)
        return [self._queue.popleft() for _ in range(count)]

    def _serve(self, stream: int, runner) -> None:
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
                call = self._take()
            self._run_call(stream, runner, call, activation_error)
            # Not held while waiting for the next call: the parts' views keep
            # their readers' segments mapped (a reader that died included).
            del call

    def _run_call(self, stream: int, runner, call: list[Part], activation_error: BaseException | None) -> None:
        """Run one call on the ``stream``-th runner and settle its parts' futures (its locals die with it)."""
        began, cpu = time.perf_counter(), timeline.thread_cpu()
        results: list | None = None
        error: BaseException | None = None
        try:
            if activation_error is not None:
                raise activation_error
            held = getattr(self._ops, "held", None)  # the real device's: fewer GIL hand-offs in the call
            results = held(runner.run, call) if held is not None else runner.run(call)
        except BaseException as exc:
            error = exc
        # Counted before any caller returns, so a caller's stats() includes its call.
        with self._cond:
            self.calls += 1
            self.parts += len(call)
            self.pages += sum(len(part.jobs) for part in call)
        if error is not None:
            for part in call:
                part.owner.future.set_exception(error)
        else:
            assert results is not None
            for part, failures in zip(call, results):
                part.owner.future.set_result(failures)
        # Only a call that began with the timeline on (its CPU clock read): one that began
        # before it was set would be recorded without its CPU seconds.
        if cpu is not None and timeline.enabled():
            # The oldest part's wait: the time.monotonic() clock, taken to perf_counter's.
            waited = time.monotonic() - call[0].owner.since
            ended = time.perf_counter()
            # gpu_s: the GPU's own seconds of the call, where the runner timed it
            timeline.record("gpu_call", began, ended, cpu, stream=stream, parts=len(call),
                            pages=sum(len(part.jobs) for part in call),
                            nbytes=sum(part.out_bytes for part in call),
                            waited_s=waited - (ended - began), gpu_s=getattr(runner, "gpu_s", None))

    def stats(self) -> dict:
        out = {"calls": self.calls, "parts": self.parts, "pages": self.pages, "device_only_bytes": 0}
        for i, runner in enumerate(self._runners):
            for k, v in runner.stats().items():
                out[f"stream{i}_{k}"] = v
                if k == "device_only_bytes":  # summed over the streams too
                    out[k] += v
        return out

    def close(self) -> None:
        """Finish queued parts, stop the dispatchers, close the stream runners."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            t.join()
        errors = []
        for runner in self._runners:
            try:
                runner.close()
            except BaseException as exc:  # close the others, then report
                errors.append(exc)
        if errors:
            raise errors[0]
