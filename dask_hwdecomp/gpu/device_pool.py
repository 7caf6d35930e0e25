"""Device memory for numba-cuda in the GPU service: reused, not freed per decode.

numba allocates every device array with ``cuMemAlloc`` and frees it with
``cuMemFree``; both synchronise the whole device, so the decodes of
concurrent clients, each on a stream of its own, would run one after the
other. :class:`PooledDeviceMemory` is a numba External Memory Management
plugin that keeps freed blocks by size class and lends them again, up to a
cap of idle bytes (a request takes the smallest idle block up to twice its
size); in steady state a decode allocates nothing.

A block goes back to the pool when its numba array is collected, and a
kernel may still be using it then: the decode's code drops scratch arrays
as soon as it has queued their kernels. So every block allocated inside
:func:`~.device_hold.holding` is also kept by the decode's holder, a list the decoder
clears only after synchronising the decode's stream.
"""

from __future__ import annotations

import threading
import weakref
from collections import defaultdict

from numba.cuda.cudadrv.driver import (
    GetIpcHandleMixin,
    HostOnlyCUDAMemoryManager,
    MemoryInfo,
    MemoryPointer,
    driver,
)

from .. import timeline
from .device_hold import current_holder
from .pool import size_class

__all__ = ["PooledDeviceMemory", "IDLE_CAP_BYTES"]

# Idle device bytes kept for reuse; blocks freed past it go back to the driver.
IDLE_CAP_BYTES = 16 << 30
_MIN_BLOCK = 64 << 10
class PooledDeviceMemory(GetIpcHandleMixin, HostOnlyCUDAMemoryManager):
    """numba EMM plugin: device blocks reused by size class (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._idle: dict[int, list] = defaultdict(list)
        self._idle_bytes = 0
        self.allocations = 0
        self.reuses = 0

    def initialize(self):
        pass

    def memalloc(self, size):
        want = size_class(max(int(size), 1), minimum=_MIN_BLOCK)
        with self._lock:
            got = self._fitting(want)
            ptr = self._idle[got].pop() if got else None
            if ptr is not None:
                self._idle_bytes -= got
                self.reuses += 1
        if ptr is None:
            got = want
            with timeline.span("device_alloc", nbytes=want):  # synchronises the device
                ptr = self._attempt_allocation(lambda: driver.cuMemAlloc(want))
            with self._lock:
                self.allocations += 1
        ctx = weakref.proxy(self.context)
        mem = MemoryPointer(ctx, ptr, size, finalizer=_giver(self, ptr, got))
        holder = current_holder()
        if holder is not None:
            holder.append(mem)
        return mem

    def _fitting(self, want: int) -> int:
        """The smallest idle size class from ``want`` (a size class) to twice it (0: none; the lock held).

        Merged decodes vary in size from one to the next: an exact class
        alone would rarely be idle, and every ``cuMemAlloc`` synchronises
        the device.
        """
        best = 0
        for size, blocks in self._idle.items():
            if blocks and want <= size <= 2 * want and (not best or size < best):
                best = size
        return best

    def _give_back(self, ptr, nbytes: int) -> None:
        with self._lock:
            if self._idle_bytes + nbytes <= IDLE_CAP_BYTES:
                self._idle[nbytes].append(ptr)
                self._idle_bytes += nbytes
                return
        driver.cuMemFree(ptr)

    def get_memory_info(self):
        free, total = driver.cuMemGetInfo()
        return MemoryInfo(free=free, total=total)

    def reset(self):
        with self._lock:
            idle, self._idle = self._idle, defaultdict(list)
            self._idle_bytes = 0
        for blocks in idle.values():
            for ptr in blocks:
                driver.cuMemFree(ptr)
        super().reset()

    @property
    def interface_version(self):
        return 1


def _giver(pool: PooledDeviceMemory, ptr, nbytes: int):
    ref = weakref.ref(pool)

    def give_back():
        owner = ref()
        if owner is not None:
            owner._give_back(ptr, nbytes)

    return give_back
