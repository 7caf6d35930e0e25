"""Pinned host buffers from a capped, reused pool; grow-only device arenas.

Pinned allocation is slow (milliseconds per call) and pageable copies run
at a sixth of the speed (on an H200: 7 to 9.5 GB/s pageable, 55 GB/s
pinned, each way), so host buffers are pinned once
and reused: in steady state a read allocates nothing. The pool is capped;
past the cap it hands out ordinary (pageable) memory rather than block a
reader that already holds buffers, and counts it in ``stats()``.
"""

from __future__ import annotations

import ctypes

import numpy as np

from .pool import CappedPool, size_class

__all__ = ["PinnedPool", "PinnedBuffer", "DeviceArena", "size_class", "host_view", "address_of"]

def host_view(ptr: int, nbytes: int) -> memoryview:
    """A writable byte memoryview over ``nbytes`` of host memory at ``ptr``."""
    return memoryview((ctypes.c_char * nbytes).from_address(ptr)).cast("B")


def address_of(view) -> int:
    """The address of the first byte of a buffer-protocol object (read-only allowed)."""
    arr = np.frombuffer(view, dtype=np.uint8)
    return int(arr.__array_interface__["data"][0])


class _Block:
    def __init__(self, alloc):
        self.alloc = alloc
        self.nbytes = alloc.nbytes
        self.view = host_view(alloc.ptr, alloc.nbytes)


class PinnedBuffer:
    """A pinned host buffer lent by a :class:`PinnedPool`; ``close()`` gives it back.

    Attributes
    ----------
    view : memoryview
        Writable bytes, exactly the size asked for.
    ptr : int
        Address of ``view``.
    pinned : bool
        False when the pool was at its cap and this is pageable memory.
    """

    def __init__(self, pool, block, nbytes: int):
        self._pool = pool
        self._block = block
        self._array: np.ndarray | None
        self.view: memoryview | None
        if block is None:
            self._array = np.empty(max(nbytes, 1), dtype=np.uint8)
            self.view = self._array.data[:nbytes]
            self.ptr = int(self._array.ctypes.data)
            self.pinned = False
        else:
            self._array = None
            self.view = block.view[:nbytes]
            self.ptr = block.alloc.ptr
            self.pinned = True

    def close(self) -> None:
        """Give the memory back to the pool (idempotent)."""
        block, self._block = self._block, None
        self.view = None
        self._array = None
        if block is not None:
            self._pool._give_back(block)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class PinnedPool(CappedPool):
    """A capped pool of pinned host blocks, reused by size.

    Parameters
    ----------
    alloc_host : callable
        ``alloc_host(nbytes)`` returning an allocation with ``ptr``,
        ``nbytes`` and ``close()`` (``CudaOps.alloc_host``).
    cap_bytes : int
        Most pinned bytes held at once, lent and idle together. Past it the
        pool lends pageable memory (counted in ``stats()["overflows"]``).
    """

    what = "pinned pool"

    def __init__(self, alloc_host, cap_bytes: int):
        super().__init__(cap_bytes)
        self._alloc = alloc_host

    def get(self, nbytes: int) -> PinnedBuffer:
        """A buffer of ``nbytes`` (pinned unless the cap forbids it).

        Raises
        ------
        CudaError
            Pinned allocation failed.
        RuntimeError
            The pool is closed.
        """
        taken = self._take(nbytes)
        if taken.block is not None:
            return PinnedBuffer(self, taken.block, nbytes)
        if not taken.keep:
            return PinnedBuffer(self, None, nbytes)
        try:
            block = _Block(self._alloc(taken.want))
        except BaseException:
            self._create_failed(taken.want, taken.keep)
            raise
        self._created(taken.keep)
        return PinnedBuffer(self, block, nbytes)

    def _destroy(self, block: _Block) -> None:
        block.alloc.close()


class _GrowOnly:
    """One allocation that is replaced only by a bigger one (freed on :meth:`close`).

    ``make(nbytes)`` allocates; sizes are rounded up to a size class (at
    least ``minimum`` bytes) so that a slowly growing need does not
    reallocate every call.
    """

    def __init__(self, make, minimum: int | None = None):
        self._make = make
        self._minimum = minimum
        self._mem = None
        self.allocations = 0

    @property
    def nbytes(self) -> int:
        return 0 if self._mem is None else self._mem.nbytes

    def _grown(self, nbytes: int):
        if self._mem is None or self._mem.nbytes < nbytes:
            old, self._mem = self._mem, None
            if old is not None:
                old.close()
            size = size_class(nbytes) if self._minimum is None else size_class(nbytes, self._minimum)
            self._mem = self._make(size)
            self.allocations += 1
        return self._mem

    def close(self) -> None:
        mem, self._mem = self._mem, None
        if mem is not None:
            mem.close()


class DeviceArena(_GrowOnly):
    """One grow-only device allocation, carved per call by its owner.

    A stream's calls reuse it; it is replaced by a bigger one only when a
    call needs more, so steady state allocates nothing.

    Parameters
    ----------
    alloc_device : callable
        ``alloc_device(nbytes, stream)`` (``ops.alloc_device``).
    stream : Stream
        The stream allocations are ordered on.
    """

    def __init__(self, alloc_device, stream):
        super().__init__(lambda n: alloc_device(n, stream))

    def ensure(self, nbytes: int) -> int:
        """The arena's base address, grown to at least ``nbytes`` first.

        Raises
        ------
        CudaError
        """
        return self._grown(nbytes).ptr


class HostScratch(_GrowOnly):
    """A grow-only pinned host block for a stream's per-call metadata."""

    def __init__(self, alloc_host):
        super().__init__(alloc_host, minimum=1 << 16)

    def ensure(self, nbytes: int) -> tuple[int, memoryview]:
        """(address, view) of at least ``nbytes`` of pinned memory.

        Raises
        ------
        CudaError
        """
        mem = self._grown(nbytes)
        return mem.ptr, host_view(mem.ptr, mem.nbytes)
