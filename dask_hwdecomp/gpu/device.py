"""The CUDA device and its primary context.

The primary context is the one the CUDA runtime (and so nvCOMP, CuPy,
PyTorch) uses too: sharing it means pointers pass between them freely. A
:class:`Device` retains it on creation and releases it on :meth:`close`.
Every thread that issues driver calls makes it current first
(:meth:`Device.activate`): contexts are per thread in the driver API.
Inside :meth:`Device.held` it stays current and ``activate`` makes no
driver call: every driver call releases the GIL, and a busy thread of the
GPU service then waits to take it back (see :func:`~.cuda_jit.held_context`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import CudaError, check

__all__ = ["Device", "bindings_installed", "device_count", "device_properties", "device_uuid"]


def _driver():
    from cuda.bindings import driver

    return driver


def _init(driver):
    """``cuInit(0)``; a missing driver library is a failed init, not an exception.

    cuda-bindings loads ``libcuda`` on first use and raises a
    ``RuntimeError`` when the machine has no NVIDIA driver (the gpu extra
    installed on a machine without a GPU).

    Raises
    ------
    CudaError
        Only from :func:`~dask_hwdecomp.gpu.errors.check` at the callers.
    """
    try:
        return driver.cuInit(0)
    except RuntimeError as exc:
        raise CudaError(f"the CUDA driver library cannot be loaded: {exc}",
                        code=int(driver.CUresult.CUDA_ERROR_NO_DEVICE), name="CUDA_ERROR_NO_DEVICE") from None


def _initialised(driver) -> bool:
    """Whether the driver initialises here (False without a driver or device)."""
    try:
        (err,) = _init(driver)
    except CudaError:
        return False
    return int(err) == 0


def bindings_installed() -> bool:
    """Whether cuda-bindings can be imported (the gpu extra is installed); never raises."""
    try:
        import cuda.bindings.driver  # noqa: F401
    except ImportError:
        return False
    return True


def device_uuid(ordinal: int) -> str | None:
    """``GPU-<uuid>`` of a device, as ``CUDA_VISIBLE_DEVICES`` names it, without a context.

    None when cuda-bindings, the driver or the device is absent.
    """
    if not bindings_installed():
        return None
    driver = _driver()
    if not _initialised(driver):
        return None
    err, dev = driver.cuDeviceGet(ordinal)
    if int(err) != 0:
        return None
    err, uuid = driver.cuDeviceGetUuid(dev)
    if int(err) != 0:
        return None
    h = bytes(uuid.bytes)[:16].hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def device_count() -> int:
    """Number of CUDA devices (0 when the driver cannot be initialised).

    Raises
    ------
    CudaError
        The driver initialised but cannot count its devices.
    """
    driver = _driver()
    if not _initialised(driver):
        return 0
    return check(driver.cuDeviceGetCount(), "counting CUDA devices")


def device_properties(ordinal: int, attrs) -> tuple[str, list[int]]:
    """(name, [values of ``attrs``]) of a device, without creating a context.

    Probes use this: the process that reads must never hold a CUDA context
    (its GPU work runs in the node's GPU service, see ``service/server.py``).

    Raises
    ------
    CudaError
    """
    driver = _driver()
    check(_init(driver), "initialising the CUDA driver")
    handle = check(driver.cuDeviceGet(ordinal), f"getting device {ordinal}")
    name = check(driver.cuDeviceGetName(256, handle), "reading the device name")
    values = [int(check(driver.cuDeviceGetAttribute(a, handle), f"reading {a!r}")) for a in attrs]
    return bytes(name).split(b"\0", 1)[0].decode(errors="replace"), values


# The context each thread holds current inside Device.held (none outside).
_held = threading.local()


class Device:
    """One CUDA device with its primary context retained.

    Parameters
    ----------
    ordinal : int
        The device number (``CUDA_VISIBLE_DEVICES`` applies).

    Raises
    ------
    CudaError
        The driver or the device cannot be initialised.
    """

    def __init__(self, ordinal: int = 0):
        driver = _driver()
        check(_init(driver), "initialising the CUDA driver")
        self.ordinal = ordinal
        self.handle = check(driver.cuDeviceGet(ordinal), f"getting device {ordinal}")
        name = check(driver.cuDeviceGetName(256, self.handle), "reading the device name")
        self.name = bytes(name).split(b"\0", 1)[0].decode(errors="replace")
        # Wait for the GPU by sleeping on the driver, not by spinning: a spin
        # burns a core per waiting thread, which is the CPU time this
        # project exists to give back. Refused (and harmless) if another
        # library in the process already made the primary context active.
        driver.cuDevicePrimaryCtxSetFlags(self.handle, driver.CUctx_flags.CU_CTX_SCHED_BLOCKING_SYNC)
        self.context = check(
            driver.cuDevicePrimaryCtxRetain(self.handle), f"retaining the primary context of device {ordinal}"
        )
        self._closed = False

    def activate(self) -> None:
        """Make this device's primary context current in the calling thread.

        Raises
        ------
        CudaError
        """
        if getattr(_held, "context", None) is self.context:
            return
        check(_driver().cuCtxSetCurrent(self.context), f"making device {self.ordinal} current")

    @contextmanager
    def held(self) -> Iterator[None]:
        """This device's context current on the calling thread for the block, made current once.

        :meth:`activate` inside the block returns at once. Nothing inside
        may make another context current on this thread.

        Raises
        ------
        CudaError
            The context cannot be made current.
        """
        self.activate()
        prior = getattr(_held, "context", None)
        _held.context = self.context
        try:
            yield
        finally:
            _held.context = prior

    def attribute(self, attr) -> int:
        """The value of a ``CUdevice_attribute`` for this device.

        Raises
        ------
        CudaError
        """
        return int(check(_driver().cuDeviceGetAttribute(attr, self.handle), f"reading {attr!r}"))

    def describe(self) -> str:
        return f"device {self.ordinal} ({self.name})"

    def close(self) -> None:
        """Release the primary context (idempotent).

        The calling thread no longer has it current afterwards: a released
        context left current would be used, or reported, by whatever runs
        on that thread next.
        """
        if self._closed:
            return
        self._closed = True
        driver = _driver()
        current = check(driver.cuCtxGetCurrent(), "reading the current context")
        if int(current) == int(self.context):
            check(driver.cuCtxSetCurrent(driver.CUcontext(0)), "leaving the primary context")
        check(driver.cuDevicePrimaryCtxRelease(self.handle), "releasing the primary context")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
