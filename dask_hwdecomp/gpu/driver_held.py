"""Kernel launches that keep the GIL: ``cuLaunchKernel`` through ``ctypes.PyDLL``.

cuda-bindings, and numba-cuda through it, releases the GIL around every
driver call. In the GPU service a thread that lets the GIL go waits to take
it back while another thread runs Python, up to the switch interval: a
launch that itself takes microseconds then costs its thread milliseconds
(``benchmarks/launch_cost_gpu.py``: about 1 ms a launch beside four busy
threads with numba's context held, 17 ms without). A launch only queues
work, so keeping the GIL through it costs the other threads nothing they
would notice. ``ctypes.PyDLL`` calls a C function without releasing the
GIL; this module loads the driver library that way and calls
``cuLaunchKernel`` alone through it.

The caller's thread must have the kernel's context current
(:func:`current_context` says; the service's threads hold theirs).
"""

from __future__ import annotations

import ctypes
import threading

from .errors import CudaError

__all__ = ["available", "current_context", "launch"]

_lock = threading.Lock()
_launch = None
_current = None
_tried = False


def _load():
    """``cuLaunchKernel`` of the driver library loaded with the GIL kept, or None where it cannot load."""
    global _launch, _current, _tried
    with _lock:
        if not _tried:
            _tried = True
            try:
                lib = ctypes.PyDLL("libcuda.so.1")
                launch_fn, current_fn = lib.cuLaunchKernel, lib.cuCtxGetCurrent
            except (OSError, AttributeError):
                return None
            launch_fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
            launch_fn.restype = ctypes.c_int
            current_fn.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
            current_fn.restype = ctypes.c_int
            _launch, _current = launch_fn, current_fn
    return _launch


def available() -> bool:
    """Whether the driver library loads here with the GIL kept (never raises)."""
    return _load() is not None


def current_context() -> int:
    """The address of the calling thread's current context, 0 where none is (or the driver cannot load)."""
    if _load() is None or _current is None:
        return 0
    handle = ctypes.c_void_p()
    if _current(ctypes.byref(handle)):
        return 0
    return handle.value or 0


def launch(function: int, grid: tuple[int, int, int], block: tuple[int, int, int], shared: int, stream: int,
           params: int) -> None:
    """Queue ``function`` (a ``CUfunction`` or ``CUkernel`` address) on ``stream``, the GIL kept.

    Parameters
    ----------
    function : int
        The kernel's handle, as an address.
    grid, block : tuple of 3 int
    shared : int
        Dynamic shared memory, bytes.
    stream : int
        The stream's handle (0: the default stream).
    params : int
        Address of the array of pointers to each kernel parameter
        (``kernelParams`` of ``cuLaunchKernel``); the values are read
        during the call.

    Raises
    ------
    CudaError
        The driver refused the launch, or it cannot be loaded here.
    """
    fn = _load()
    if fn is None:
        raise CudaError("the CUDA driver library cannot be loaded with the GIL kept", code=-1, name="")
    err = fn(function, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, stream, params, None)
    if err:
        try:
            from cuda.bindings import driver

            name = driver.CUresult(err).name
        except (ImportError, ValueError):
            name = ""
        raise CudaError(f"launching a kernel failed ({name or 'CUresult'} {err})", code=int(err), name=name)
