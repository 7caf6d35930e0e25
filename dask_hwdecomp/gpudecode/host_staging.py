"""Page-locked host memory a decoder runner stages its small copies through, reused run after run.

A copy between the device and pageable host memory goes through the
driver's own staging buffers: CUDA documents that it may first wait for
the stream's earlier work, and that it returns to the host only once
staged or done. In the GPU service a runner makes three such copies a run
(its copy table and records in, the records out), so the host stood still
while the device worked and the device while the host planned: the
profile at scale showed each run as a lock-step of the two. From
page-locked memory the same copies are queued like kernels.

A :class:`HostStaging` lends views of one page-locked buffer, one after the
other (:meth:`take`), until :meth:`reset`, which the runner calls only once
its stream is synchronised: a view is never reused while a queued copy may
still read or fill it. A take that does not fit gets a new, larger buffer;
the old one stays alive until that reset, so its queued copies stay valid.
Page-locking is slow (milliseconds), so in steady state nothing is
allocated. Under numba's CUDA simulator the buffer is ordinary memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["HostStaging", "ALIGN"]

# Every view starts on this boundary (any record dtype's alignment).
ALIGN = 256


class HostStaging:
    """Views of a page-locked host buffer, lent one after the other until :meth:`reset`.

    Parameters
    ----------
    cuda : module
        numba's ``cuda`` (its ``pinned_array`` allocates the buffer).
    nbytes : int
        The first buffer's size; it grows to what a run needs.
    """

    def __init__(self, cuda: Any, nbytes: int = 4 << 20) -> None:
        self._cuda = cuda
        self._buffer = self._allocate(max(ALIGN, int(nbytes)))
        self._used = 0
        self._retired: list[np.ndarray] = []
        self.allocations = 1

    @property
    def nbytes(self) -> int:
        """The current buffer's size."""
        return len(self._buffer)

    def take(self, nbytes: int, dtype: Any = np.uint8) -> np.ndarray:
        """``nbytes`` of page-locked memory as a 1-D array of ``dtype`` (contents undefined).

        Valid until :meth:`reset`; ``nbytes`` must be a multiple of the
        dtype's size.
        """
        dtype = np.dtype(dtype)
        nbytes = int(nbytes)
        if nbytes < 0 or nbytes % dtype.itemsize:
            raise ValueError(f"{nbytes} bytes is no whole number of {dtype} items")
        at = -(-self._used // ALIGN) * ALIGN
        if at + nbytes > len(self._buffer):
            # Queued copies may still use the old buffer: keep it until reset.
            self._retired.append(self._buffer)
            self._buffer = self._allocate(max(2 * len(self._buffer), -(-nbytes // ALIGN) * ALIGN))
            self.allocations += 1
            at = 0
        self._used = at + nbytes
        return self._buffer[at : at + nbytes].view(dtype)

    def put(self, array: np.ndarray) -> np.ndarray:
        """A page-locked copy of ``array`` (made contiguous), valid until :meth:`reset`."""
        array = np.ascontiguousarray(array)
        view = self.take(array.nbytes, array.dtype).reshape(array.shape)
        view[...] = array
        return view

    def reset(self) -> None:
        """Every view lent so far is free again (call only once no queued copy uses them)."""
        self._used = 0
        self._retired.clear()

    def _allocate(self, nbytes: int) -> np.ndarray:
        # Page-locked memory starts on a page; the simulator's ordinary
        # memory may not, so the buffer starts at its first aligned byte.
        raw = self._cuda.pinned_array(nbytes + ALIGN, dtype=np.uint8)
        skip = -raw.ctypes.data % ALIGN
        return raw[skip : skip + nbytes]
