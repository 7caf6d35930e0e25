"""Kernel launches packed here (gpu/launch.py): the parameter layout, and numba's own launch where it must (CI, no GPU)."""

from __future__ import annotations

import ctypes
import struct

import numpy as np
import pytest
from numba.cuda import types

from dask_hwdecomp.gpu import launch as launching
from dask_hwdecomp.gpu.cuda_jit import cuda


class _DeviceArrayShape:
    """What ``pack`` reads of a numba device array: its sizes, strides and data address.

    A GPU-side array cannot be made here (no device); the GPU suite packs
    real ones (``tests/gpu/test_launch_gpu.py``).
    """

    def __init__(self, address: int, array: np.ndarray):
        self.device_ctypes_pointer = ctypes.c_void_p(address or None)
        self.size, self.dtype, self.shape, self.strides = array.size, array.dtype, array.shape, array.strides


def test_an_array_packs_as_numba_lays_it_out():
    a = _DeviceArrayShape(0x7F0000001000, np.zeros(300, np.int32))
    assert launching.pack((types.Array(types.int32, 1, "C"),), (a,)) == [0, 0, 300, 4, 0x7F0000001000, 300, 4]
    b = _DeviceArrayShape(0x2000, np.zeros((3, 5), np.float64))
    assert launching.pack((types.Array(types.float64, 2, "C"),), (b,)) == [0, 0, 15, 8, 0x2000, 3, 5, 40, 8]


def test_an_empty_array_packs_a_null_address():
    a = _DeviceArrayShape(0, np.zeros(0, np.uint8))
    assert launching.pack((types.Array(types.uint8, 1, "C"),), (a,)) == [0, 0, 0, 1, 0, 0, a.strides[0]]


def test_scalars_pack_as_the_words_the_kernel_reads_the_low_bytes_of():
    argtypes = (types.int64, types.int32, types.uint64, types.float64, types.float32, types.boolean)
    words = launching.pack(argtypes, (-2, 7, np.uint64(0xFFFFFFFFFFFFFFFF), 1.5, 0.25, True))
    assert words == [(1 << 64) - 2, 7, (1 << 64) - 1, struct.unpack("<Q", struct.pack("<d", 1.5))[0],
                     struct.unpack("<I", struct.pack("<f", 0.25))[0], 1]
    # an int32 -1 read from the low four bytes of its word
    word = launching.pack((types.int32,), (-1,))[0]
    assert struct.unpack("<i", struct.pack("<Q", word)[:4])[0] == -1


def test_types_not_packed_here_are_left_to_numba():
    assert launching.pack((types.complex128,), (1 + 2j,)) is None
    host = np.zeros(4, np.int32)  # numba's launch copies a host array to the device
    assert launching.pack((types.Array(types.int32, 1, "C"),), (host,)) is None
    assert launching.pack((types.int64, types.UniTuple(types.int64, 2)), (1, (2, 3))) is None


@pytest.mark.parametrize(("given", "dims"), [(5, (5, 1, 1)), (np.int64(7), (7, 1, 1)), ((2, 3), (2, 3, 1)),
                                             ((4, 5, 6), (4, 5, 6))])
def test_launch_dimensions(given, dims):
    assert launching._dims(given) == dims


def test_no_held_launch_under_the_simulator_or_when_turned_off(monkeypatch):
    assert launching.held_launches() is False  # CI runs numba's simulator
    monkeypatch.setenv(launching.HELD_ENV, "0")
    assert launching.held_launches() is False


@cuda.jit
def _axpy(out, x, a, b):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = a * x[i] + b


def test_a_launch_where_none_is_held_is_numbas_own_and_right():
    x = cuda.to_device(np.arange(10, dtype=np.int64))
    out = cuda.device_array(10, np.int64)
    launching.launch(_axpy, 1, 16, 0, out, x, 3, -1)
    assert out.copy_to_host().tolist() == [3 * i - 1 for i in range(10)]
