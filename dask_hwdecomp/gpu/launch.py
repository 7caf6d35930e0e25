"""numba-cuda kernels launched with their arguments packed here and the GIL kept.

``launch(kernel, grid, block, stream, *args)`` does what
``kernel[grid, block, stream](*args)`` does: the same compiled overload,
the same arguments, in stream order. numba's dispatch types every argument,
looks the overload up, wraps every array and lets the GIL go at the launch
(about 100 µs of Python for ten arrays, and a wait for the GIL after it).
Here an overload is looked up once per kernel and argument types (numba
compiles it on the first launch of those types, through its own dispatch),
each argument is packed as numba packs it for a kernel (an array as its
meminfo, parent, size, item size, data pointer, shape and strides; a scalar
as its value), and :func:`.driver_held.launch` queues it with the GIL kept.

Under numba's simulator, where the driver is absent, on a thread with no
context current (numba's launch makes one current), and for argument types
this module does not pack (tuples, complex numbers, host arrays), the
launch is numba's own dispatch. ``HWDECOMP_HELD_LAUNCHES=0`` makes every
launch numba's own (a profiling knob).
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
from typing import Any

import numpy as np
from numba.cuda import types as _cuda_types
from numba.cuda.typing.typeof import Purpose, typeof

from . import driver_held
from .simulator import simulated

__all__ = ["launch", "pack", "HELD_ENV", "held_launches"]

HELD_ENV = "HWDECOMP_HELD_LAUNCHES"

# numba-cuda's own types and typing, which its dispatch keys overloads by
# (filled in when imported: nothing for a type checker to read).
types: Any = _cuda_types

_MASK = (1 << 64) - 1


def held_launches() -> bool:
    """Whether launches here keep the GIL: on a real device, unless :data:`HELD_ENV` is ``0``."""
    return os.environ.get(HELD_ENV, "").strip() != "0" and not simulated() and driver_held.available()


def _arg_type(value: Any):
    """numba's type of a kernel argument, as its dispatch types it."""
    ty = getattr(value, "_numba_type_", None)  # a numba device array (cached on the array)
    return ty if ty is not None else typeof(value, Purpose.argument)


def _scalar_bits(ty, value) -> int | None:
    """A scalar argument as the 64-bit word whose low bytes the kernel reads, or None if not packed here."""
    if isinstance(ty, types.Boolean):
        return int(bool(value))
    if isinstance(ty, types.Integer):
        return int(value) & _MASK
    if ty == types.float64:
        return struct.unpack("<Q", struct.pack("<d", float(value)))[0]
    if ty == types.float32:
        return struct.unpack("<I", struct.pack("<f", float(value)))[0]
    return None


def pack(argtypes, args) -> list[int] | None:
    """The kernel parameters of ``args`` as numba lays them out, each a 64-bit word; None if one is not packed here.

    An array of ``ndim`` dimensions is ``5 + 2 * ndim`` parameters: meminfo
    and parent (0), its size, item size, data address, shape and strides in
    bytes. A scalar is one parameter; the kernel reads the low bytes of its
    word (little-endian).
    """
    words: list[int] = []
    for ty, value in zip(argtypes, args):
        if isinstance(ty, types.Array):
            device = getattr(value, "device_ctypes_pointer", None)
            if device is None:  # a host array, which numba's launch copies to the device
                return None
            pointer = device.value or 0
            words += [0, 0, int(value.size), int(value.dtype.itemsize), pointer]
            words += [int(n) for n in value.shape]
            words += [int(s) & _MASK for s in value.strides]
            continue
        bits = _scalar_bits(ty, value)
        if bits is None:
            return None
        words.append(bits)
    return words


class _Prepared:
    """One compiled overload: its function handle and a parameter buffer per thread."""

    def __init__(self, function: int):
        self.function = function
        self._local = threading.local()

    def buffers(self, n: int):
        """This thread's buffers for ``n`` parameters: the values, and the pointers to each."""
        held = getattr(self._local, "buffers", None)
        if held is None or len(held[0]) != n:
            values = (ctypes.c_uint64 * n)()
            base = ctypes.addressof(values)
            pointers = (ctypes.c_void_p * max(1, n))(*[base + 8 * i for i in range(n)])
            held = self._local.buffers = (values, pointers)
        return held


# (kernel, argument types) -> _Prepared, or None where numba's own dispatch launches it
_prepared: dict[tuple, _Prepared | None] = {}
_prepared_lock = threading.Lock()


def _dims(d) -> tuple[int, int, int]:
    if isinstance(d, (int, np.integer)):
        return (int(d), 1, 1)
    d = tuple(int(x) for x in d)
    return (d[0] if d else 1, d[1] if len(d) > 1 else 1, d[2] if len(d) > 2 else 1)


def _stream_handle(stream) -> int:
    if not stream:
        return 0
    handle = getattr(stream, "handle", stream)
    value = getattr(handle, "value", None)  # a ctypes handle
    return int(value if value is not None else handle)


def launch(kernel, griddim, blockdim, stream, *args) -> None:
    """``kernel[griddim, blockdim, stream](*args)``, packed here and launched with the GIL kept.

    Parameters
    ----------
    kernel : numba-cuda dispatcher
    griddim, blockdim : int or tuple of int
    stream : numba stream or 0
    *args : numba device arrays and scalars

    Raises
    ------
    CudaError
        The driver refused the launch.
    """
    if not held_launches() or not driver_held.current_context():  # numba's launch makes one current
        kernel[griddim, blockdim, stream](*args)
        return
    argtypes = tuple(_arg_type(a) for a in args)
    key = (kernel, argtypes)
    if key not in _prepared:
        overload = kernel.overloads.get(argtypes)
        if overload is None:  # numba compiles (or loads) it: its own launch this once
            kernel[griddim, blockdim, stream](*args)
            return
        made = None
        if pack(argtypes, args) is not None:
            made = _Prepared(int(overload._codelibrary.get_cufunc().handle))
        with _prepared_lock:
            _prepared[key] = made
    prepared = _prepared[key]
    if prepared is None:
        kernel[griddim, blockdim, stream](*args)
        return
    words = pack(argtypes, args)
    assert words is not None  # the same types pack the same way
    values, pointers = prepared.buffers(len(words))
    values[:] = words
    driver_held.launch(prepared.function, _dims(griddim), _dims(blockdim), 0, _stream_handle(stream),
                       ctypes.addressof(pointers))
