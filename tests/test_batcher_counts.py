"""The batcher's counts, as a caller sees them when its call returns (CI, no GPU)."""

from __future__ import annotations

import threading

from dask_hwdecomp.gpu.batcher import Batcher

from pagegen import make_part


class _NoContext:
    """No GPU context to make current: the runner below needs none."""

    def activate(self) -> None:
        pass


class _SeeingRunner:
    """A stream runner that reports no failures and, as each part's result is set, reads the batcher's counts.

    A future's done-callback runs inside ``set_result``: what it reads is what
    the waiting caller can read first.
    """

    def __init__(self):
        self.batcher: Batcher | None = None
        self.seen: list[int] = []
        self.lock = threading.Lock()

    def run(self, call):
        for part in call:
            part.owner.future.add_done_callback(self._see)
        return [[] for _ in call]

    def _see(self, _future):
        with self.lock:
            self.seen.append(self.batcher.stats()["calls"])

    def stats(self):
        return {}

    def close(self):
        pass


def test_a_caller_woken_by_its_call_finds_that_call_counted():
    runner = _SeeingRunner()
    batcher = Batcher([runner], _NoContext(), budget_bytes=1 << 20, latency_s=0.0)
    runner.batcher = batcher
    try:
        for k in range(3):
            batcher.run([make_part(k)])
    finally:
        batcher.close()
    assert runner.seen == [1, 2, 3]
    assert batcher.stats()["calls"] == 3 and batcher.stats()["pages"] == 6
