"""Copies, allocations and synchronisation behind one small object.

The staging and batching code issues every memory operation through an
"ops" object, so that the hardware-engine backend can run in CI against a
stand-in that keeps "device" memory on the host (``tests/standin_hwengine.py``).
:class:`CudaOps` is the real one. An ops object provides:

``activate()``, ``new_stream()``, ``alloc_device(nbytes, stream)``,
``alloc_host(nbytes)`` (pinned), ``htod(dst, src, n, stream)``,
``dtoh(dst, src, n, stream)``, ``memset_d32(dst, value, count, stream)``,
``synchronize(stream)``, ``describe()``, and
optionally ``register_host(ptr, n)`` (page-lock memory mapped elsewhere),
``launch_kernel(kernel, blocks, threads, stream, *args)`` with
``device_array(address, count, dtype)`` (numba-cuda kernels in stream
order over borrowed device memory; without them work meant for a kernel
runs on the host),
``checksummer`` (an object with ``crc32_batch``, see
:mod:`dask_hwdecomp.gpu.checksums`; None: CRCs are computed on the host) and
``held(fn, *args)`` (``fn`` called with the device current and numba's
context looked up once for the whole call, not once per driver or numba
call inside it; without it ``fn`` is called as it is),
``event_pair()`` (an :class:`~dask_hwdecomp.gpu.events.EventPair`, the GPU's
own time of a call for the profiling timeline; without it a call's GPU time
is not known) and ``stream_fork()`` (a :class:`~dask_hwdecomp.gpu.events.StreamFork`:
work beside a call on a side stream; without it that work is queued on the
call's own stream).
Pointers are plain ints; allocations have ``ptr``, ``nbytes`` and ``close()``.
"""

from __future__ import annotations

import threading

import numpy as np

from .device import Device
from .errors import check
from .events import EventPair, StreamFork
from .stream import Stream

__all__ = ["CudaOps", "DeviceAllocation", "HostAllocation"]

# numba-cuda loads a kernel's module into the context at its first launch
# without a lock: two threads launching a kernel first at once failed
# ("key already in dictionary: <CUlibrary ...>", the Zstd stream walk on the
# H100, 2026-12-07). Launches are queued one thread at a time.
_LAUNCHES = threading.Lock()


class DeviceAllocation:
    """Device memory from ``cuMemAlloc`` (or a pool, see ``gpu/hwengine.py``), owned."""

    def __init__(self, ptr: int, nbytes: int, free):
        self.ptr = ptr
        self.nbytes = nbytes
        self._free = free

    def close(self) -> None:
        """Free the memory (idempotent)."""
        free, self._free = self._free, None
        if free is not None:
            free(self.ptr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class HostAllocation(DeviceAllocation):
    """Pinned host memory from ``cuMemHostAlloc``, owned."""


def _nvcomp_or_none():
    """nvCOMP's bindings where the library loads, else None (CRCs then run on the host)."""
    from .nvcomp_lib import NvcompLib, find_library

    path = find_library()
    if path is None:
        return None
    try:
        return NvcompLib(path)
    except (OSError, AttributeError):  # not loadable, or an nvCOMP without the batched CRC-32
        return None


class CudaOps:
    """Memory operations on one CUDA device, through the driver API.

    Parameters
    ----------
    device : Device
        Not owned: the caller closes it after this object.
    checksummer : NvcompLib, optional
        Runs a batch's CRC-32s on the device; by default nvCOMP's where it
        is installed (None without it: the CRCs are computed on the host).
    """

    def __init__(self, device: Device, checksummer=None):
        self.device = device
        if checksummer is None:
            checksummer = _nvcomp_or_none()
        self.checksummer = checksummer

    def describe(self) -> str:
        return self.device.describe()

    def activate(self) -> None:
        self.device.activate()

    def held(self, fn, *args):
        """``fn(*args)`` with this device's context made current once and numba's looked up once.

        A GPU call's dispatcher runs its call inside (see
        :func:`~.cuda_jit.held_context`): each driver call releases the GIL,
        so fewer of them means fewer waits to take it back.
        """
        from .cuda_jit import held_context

        with self.device.held():
            return held_context(fn, *args)

    def new_stream(self) -> Stream:
        self.device.activate()
        return Stream()

    def alloc_device(self, nbytes: int, stream: Stream) -> DeviceAllocation:
        """``nbytes`` of device memory (``stream`` unused: cuMemAlloc is synchronous).

        Raises
        ------
        CudaError
        """
        from cuda.bindings import driver

        self.device.activate()
        ptr = int(check(driver.cuMemAlloc(nbytes), f"allocating {nbytes} bytes on {self.describe()}"))

        def free(p):
            check(driver.cuMemFree(p), "freeing device memory")

        return DeviceAllocation(ptr, nbytes, free)

    def alloc_host(self, nbytes: int) -> HostAllocation:
        """``nbytes`` of pinned, portable host memory.

        Raises
        ------
        CudaError
        """
        from cuda.bindings import driver

        self.device.activate()
        ptr = int(
            check(
                driver.cuMemHostAlloc(nbytes, driver.CU_MEMHOSTALLOC_PORTABLE),
                f"allocating {nbytes} bytes of pinned host memory",
            )
        )

        def free(p):
            check(driver.cuMemFreeHost(p), "freeing pinned host memory")

        return HostAllocation(ptr, nbytes, free)

    def register_host(self, ptr: int, nbytes: int) -> HostAllocation:
        """Page-lock ``nbytes`` of existing host memory at ``ptr`` (portable).

        The GPU service registers its clients' shared segments once each, so
        copies from and to them run at pinned speed. ``close()`` unregisters.

        Raises
        ------
        CudaError
        """
        from cuda.bindings import driver

        self.device.activate()
        check(
            driver.cuMemHostRegister(ptr, nbytes, driver.CU_MEMHOSTREGISTER_PORTABLE),
            f"registering {nbytes} bytes of shared host memory",
        )

        def unregister(p):
            self.device.activate()
            check(driver.cuMemHostUnregister(p), "unregistering shared host memory")

        return HostAllocation(ptr, nbytes, unregister)

    def htod(self, dst: int, src: int, nbytes: int, stream: Stream) -> None:
        from cuda.bindings import driver

        check(driver.cuMemcpyHtoDAsync(dst, src, nbytes, stream.native), "copying to the device")

    def dtoh(self, dst: int, src: int, nbytes: int, stream: Stream) -> None:
        from cuda.bindings import driver

        check(driver.cuMemcpyDtoHAsync(dst, src, nbytes, stream.native), "copying from the device")

    def dtod(self, dst: int, src: int, nbytes: int, stream: Stream) -> None:
        from cuda.bindings import driver

        check(driver.cuMemcpyDtoDAsync(dst, src, nbytes, stream.native), "copying on the device")

    def memset_d32(self, dst: int, value: int, count: int, stream: Stream) -> None:
        """Set ``count`` 32-bit words at device address ``dst`` to ``value``, in stream order."""
        from cuda.bindings import driver

        check(driver.cuMemsetD32Async(dst, value, count, stream.native), "setting device memory")

    def device_array(self, address: int, count: int, dtype):
        """``count`` elements of ``dtype`` at device ``address`` as a numba device array (borrowed, not owned)."""
        from .cuda_jit import cuda

        self.device.activate()  # numba wraps the thread's current context: the primary one
        face = {"shape": (count,), "typestr": np.dtype(dtype).str, "data": (address, False), "version": 3,
                "strides": None}
        return cuda.from_cuda_array_interface(face, owner=None, sync=False)

    def launch_kernel(self, kernel, blocks: int, threads: int, stream: Stream, *args) -> None:
        """Launch a numba-cuda ``kernel`` on ``blocks`` x ``threads`` in ``stream``'s order."""
        from .cuda_jit import cuda

        self.device.activate()
        with _LAUNCHES:
            kernel[blocks, threads, cuda.external_stream(stream.handle)](*args)

    def synchronize(self, stream: Stream) -> None:
        stream.synchronize()

    def stream_fork(self) -> StreamFork:
        """A side stream of this device with its fork and join events (the caller closes it).

        Raises
        ------
        CudaError
        """
        side = self.new_stream()
        try:
            return StreamFork(side)
        except BaseException:
            side.close()
            raise

    def event_pair(self) -> EventPair:
        """Two timing events on this device (the caller closes them).

        Raises
        ------
        CudaError
        """
        self.device.activate()
        return EventPair()
