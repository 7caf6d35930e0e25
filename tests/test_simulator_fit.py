"""numba's CUDA simulator as the package fits it: threads of a block that ask at once share one array."""

from __future__ import annotations

import sys
import threading

import numpy as np


def test_threads_of_a_block_that_ask_for_a_shared_array_at_once_get_the_same_one():
    from numba.cuda.simulator import kernelapi

    from dask_hwdecomp.gpu import simulator

    before = sys.getswitchinterval()
    simulator.fit()  # done at import where the simulator is on; idempotent
    sys.setswitchinterval(before)
    threads = 4
    barrier = threading.Barrier(threads, timeout=30)

    class AllLookFirst(dict):
        """Every thread finds no array before any of them makes one: the race, made certain."""

        def get(self, key, default=None):
            found = super().get(key, default)
            barrier.wait()
            return found

    shared = kernelapi.FakeCUDAShared(0)
    shared._allocations = AllLookFirst()
    got: list = []

    def ask():
        got.append(shared.array(8, np.int64))  # one source line for every thread, as in a kernel

    workers = [threading.Thread(target=ask) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert len(got) == threads
    assert all(a is got[0] for a in got)
