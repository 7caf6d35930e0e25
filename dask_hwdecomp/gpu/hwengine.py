"""The CUDA hardware decompression engine, exactly per its documented contract.

Everything about ``cuMemBatchDecompressAsync`` lives here:

* the call: ``cuda.bindings._v2.driver.mem_batch_decompress_async(params,
  count, flags, stream)`` where ``_v2`` exists (cuda-bindings >= 13.5; plain
  ints, failures raise ``DriverError`` subclasses; the returned error index
  is not used, and a failure carries none, so a failed call is made again
  through the classic entry point to learn it), else the classic
  ``cuda.bindings.driver.cuMemBatchDecompressAsync`` over a
  ``CUmemDecompressParams`` view of the same array (returns ``(CUresult,
  errorIndex)``; the index, unless ``SIZE_MAX``, names the operation the
  error pertains to and is raised as :attr:`EngineCallError.index`);
* the params: a host numpy array of :data:`PARAMS_DTYPE` (64 bytes each:
  ``src_num_bytes`` u8, ``dst_num_bytes`` u8, ``dst_act_bytes`` (device
  pointer to a u32), ``src``, ``dst``, ``algo`` i4, 20 bytes padding),
  checked field by field against the module's ``mem_decompress_params_dtype``
  when the driver is created (:func:`check_params_dtype`); the ``_v2`` module
  is private, so the gpu extra pins cuda-bindings to the tested 13.5 series;
* the capability: ``MEM_DECOMPRESS_ALGORITHM_MASK`` (DEFLATE=1, SNAPPY=2,
  LZ4=4) and ``MEM_DECOMPRESS_MAXIMUM_LENGTH`` per device; the mask, not the
  pointer attribute, says whether the engine exists (the H200 reads 0);
* the memory: a device pool created with the HW_DECOMPRESS usage, capped.

:class:`EngineDriver` is the real driver object the ``hardware`` backend
takes; CI passes a stand-in with the same methods (``tests/standin_hwengine.py``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import BackendUnavailableError
from ..jobs import Algo
from .device import Device, device_properties
from .errors import CudaError, check
from .ops import CudaOps, DeviceAllocation

__all__ = ["EngineDriver", "EngineCallError", "PARAMS_DTYPE", "ALGO_BIT", "engine_capabilities",
           "EngineProperties", "engine_properties", "check_params_dtype", "TESTED_BINDINGS"]

# The cuda-bindings series whose private ``_v2`` module this was written
# against (its signature changed before 13.5); pyproject's gpu extra pins it.
TESTED_BINDINGS = "13.5"
_SIZE_MAX = (1 << 64) - 1

# CUmemDecompressAlgorithm: the bit of each bitstream in the params' algo
# field and in MEM_DECOMPRESS_ALGORITHM_MASK.
ALGO_BIT = {Algo.DEFLATE: 1, Algo.SNAPPY: 2, Algo.LZ4: 4}

# The layout of CUmemDecompressParams; equal to the _v2 module's
# mem_decompress_params_dtype (asserted when that exists).
PARAMS_DTYPE = np.dtype(
    [
        ("src_num_bytes", "<u8"),
        ("dst_num_bytes", "<u8"),
        ("dst_act_bytes", "<i8"),
        ("src", "<i8"),
        ("dst", "<i8"),
        ("algo", "<i4"),
        ("padding", "u1", (20,)),
    ]
)
assert PARAMS_DTYPE.itemsize == 64


class EngineCallError(CudaError):
    """The engine call itself failed (nothing of the batch was queued).

    Attributes
    ----------
    index : int or None
        The operation the error pertains to, where the driver says (the
        classic entry point's ``errorIndex``); None for a general error or
        where the entry point does not report it (``_v2``).
    """

    def __init__(self, message: str, *, code: int = -1, name: str = "", index: int | None = None):
        super().__init__(message, code=code, name=name)
        self.index = index


class _Layout(NamedTuple):
    """A structured dtype's C layout: ``(name, offset, size)`` per field, and its itemsize."""

    fields: tuple[tuple[str, int, int], ...]
    itemsize: int


def _layout(dtype: np.dtype) -> _Layout:
    fields, names = dtype.fields, dtype.names
    if fields is None or names is None:
        raise TypeError(f"{dtype} is not a structured dtype")
    return _Layout(tuple((name, fields[name][1], fields[name][0].itemsize) for name in names), dtype.itemsize)


def check_params_dtype(dtype, version: str) -> None:
    """Raise unless ``dtype`` has :data:`PARAMS_DTYPE`'s names, offsets, sizes and itemsize.

    The trailing ``padding`` field may be absent (the same C layout).

    Parameters
    ----------
    dtype : numpy.dtype
        ``cuda.bindings._v2.driver.mem_decompress_params_dtype``.
    version : str
        The installed cuda-bindings version, named in the error.

    Raises
    ------
    BackendUnavailableError
    """
    got, want = _layout(np.dtype(dtype)), _layout(PARAMS_DTYPE)
    # The same C layout, whether or not the bindings name the trailing padding.
    unnamed = _Layout(want.fields[:-1], want.itemsize)
    if got not in (want, unnamed):
        raise BackendUnavailableError(
            f"cuda-bindings {version}: mem_decompress_params_dtype is {got}, this package writes {want} "
            f'(tested with cuda-bindings {TESTED_BINDINGS}.x; the gpu extra installs it, in a checkout: pip install -e ".[gpu]")'
        )


def _bindings_version() -> str:
    try:
        from importlib.metadata import version

        return version("cuda-bindings")
    except Exception:  # only named in a message
        return "(unknown version)"


def _v2_driver():
    try:
        from cuda.bindings._v2 import driver as v2
    except ImportError:
        return None
    if not hasattr(v2, "mem_batch_decompress_async"):
        return None
    return v2


def engine_capabilities(device: Device) -> tuple[int, int]:
    """(algorithm mask, maximum length in bytes) of ``device``'s engine.

    Raises
    ------
    CudaError
    """
    from cuda.bindings import driver

    attr = driver.CUdevice_attribute
    mask = device.attribute(attr.CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK)
    length = device.attribute(attr.CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH)
    return mask, length


class EngineProperties(NamedTuple):
    """A device's name and its engine's capability attributes."""

    name: str
    algorithm_mask: int  # MEM_DECOMPRESS_ALGORITHM_MASK: 0 where there is no engine
    maximum_length: int  # MEM_DECOMPRESS_MAXIMUM_LENGTH: bytes per operation


def engine_properties(ordinal: int) -> EngineProperties:
    """The engine's attributes of device ``ordinal``, without creating a context.

    Probes use this: the process that reads must never hold a CUDA context.

    Raises
    ------
    CudaError
    """
    from cuda.bindings import driver

    attr = driver.CUdevice_attribute
    name, (mask, length) = device_properties(ordinal, [
        attr.CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_ALGORITHM_MASK,
        attr.CU_DEVICE_ATTRIBUTE_MEM_DECOMPRESS_MAXIMUM_LENGTH,
    ])
    return EngineProperties(name, mask, length)


class EngineDriver(CudaOps):
    """Memory operations plus the engine call, on one device.

    Parameters
    ----------
    device : Device
        Not owned.
    pool_bytes : int
        Cap of the HW_DECOMPRESS device pool (its ``maxSize``).

    Raises
    ------
    CudaError
        The pool cannot be created.
    """

    params_dtype = PARAMS_DTYPE

    def __init__(self, device: Device, pool_bytes: int):
        super().__init__(device)
        from cuda.bindings import driver

        self.mask, self.max_length = engine_capabilities(device)
        self._v2 = _v2_driver()
        if self._v2 is not None:
            check_params_dtype(self._v2.mem_decompress_params_dtype, _bindings_version())
        self.entry_point = "cuda.bindings._v2.driver.mem_batch_decompress_async" if self._v2 else (
            "cuda.bindings.driver.cuMemBatchDecompressAsync"
        )
        props = driver.CUmemPoolProps()
        props.allocType = driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.handleTypes = driver.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
        props.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = device.ordinal
        props.maxSize = pool_bytes
        props.usage = driver.CU_MEM_POOL_CREATE_USAGE_HW_DECOMPRESS
        device.activate()
        self._pool = check(driver.cuMemPoolCreate(props), "creating the HW_DECOMPRESS memory pool")

    def alloc_device(self, nbytes: int, stream) -> DeviceAllocation:
        """``nbytes`` from the HW_DECOMPRESS pool, ordered on ``stream``.

        Raises
        ------
        CudaError
        """
        from cuda.bindings import driver

        self.device.activate()
        ptr = int(check(driver.cuMemAllocFromPoolAsync(nbytes, self._pool, stream.native),
                        f"allocating {nbytes} bytes from the HW_DECOMPRESS pool"))

        def free(p):
            check(driver.cuMemFreeAsync(p, stream.native), "freeing HW_DECOMPRESS memory")

        return DeviceAllocation(ptr, nbytes, free)

    def batch_decompress(self, params: np.ndarray, stream) -> None:
        """Queue ``len(params)`` engine decompressions on ``stream``.

        Parameters
        ----------
        params : numpy.ndarray of PARAMS_DTYPE
            Kept alive by the caller until the stream is synchronised.

        Raises
        ------
        EngineCallError
            Nothing was queued; ``index`` names the operation at fault
            where the driver says which.
        """
        count = len(params)
        addr = int(params.ctypes.data)
        what = f"while submitting {count} engine decompressions"
        if self._v2 is not None:
            try:
                self._v2.mem_batch_decompress_async(addr, count, 0, stream.handle)
                return
            except self._v2.DriverError:
                # _v2 drops the error index: the classic entry point, given
                # the same call, either queues it or says which operation failed.
                pass
        from cuda.bindings import driver

        ret = driver.cuMemBatchDecompressAsync(driver.CUmemDecompressParams(_ptr=addr), count, 0, stream.native)
        try:
            check(ret[0], what.removeprefix("while "))
        except CudaError as exc:
            # The bindings give None for the index when the driver wrote none.
            raw = ret[1] if len(ret) > 1 else None
            index = int(raw) if raw is not None and int(raw) != _SIZE_MAX else None
            raise EngineCallError(exc.reason, code=exc.code, name=exc.name, index=index) from None

    def close(self) -> None:
        """Destroy the pool (idempotent; allocations must be freed first)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            from cuda.bindings import driver

            check(driver.cuMemPoolDestroy(pool), "destroying the HW_DECOMPRESS pool")
