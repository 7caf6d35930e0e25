"""Many copies into a decode's ``data`` as one upload and one launch.

A merged decode's bytes come from many places (:mod:`~.uploads`): pieces of
the blocks the service kept on the device, and small host pieces packed
into one buffer. One copy call a piece cost the service's Python tens of
microseconds each, under its one GIL, and a run has thousands of pieces.
:func:`copy_pieces` instead builds one int64 copy table in numpy (source
address, offset in ``data``, bytes), cuts it into tiles, uploads the tiles
and the packed bytes together in one copy and launches
:func:`~.kernels_copy.gather_kernel` once.

The kernel reads every source through one *window*: a device array that
borrows the address range from the lowest source to the end of the
highest, so sources in separate allocations are offsets in one array. The
window owns nothing and the kernel reads only the pieces' bytes; the
caller keeps every source alive until the stream is synchronised. Under
numba's CUDA simulator device arrays are host memory, so there the window
is a NumPy view of the same host range.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
from numba import config

from .cuda_jit import cuda
from .kernels_copy import gather_kernel
from .uploads import device_address

__all__ = ["copy_pieces", "tile_rows", "TILE_BYTES"]

# Most bytes one block copies: a large piece spreads over many blocks.
TILE_BYTES = 32 << 10
_SIM = bool(config.ENABLE_CUDASIM)  # type: ignore[attr-defined]
_THREADS = 32 if _SIM else 256
_MAX_BLOCKS = 2 if _SIM else 1 << 16
# The table's place in the staging buffer keeps the packed bytes behind it aligned.
_ALIGN = 256


def tile_rows(rows: np.ndarray, tile_bytes: int = TILE_BYTES) -> np.ndarray:
    """``rows`` (source, destination, bytes) cut into tiles of at most ``tile_bytes``, the same columns.

    Rows of no bytes give no tile; the tiles of a row follow each other.
    """
    rows = np.asarray(rows, np.int64).reshape(-1, 3)
    rows = rows[rows[:, 2] > 0]
    counts = -(-rows[:, 2] // tile_bytes)
    first = np.cumsum(counts) - counts
    row = np.repeat(np.arange(len(rows)), counts)
    skip = (np.arange(len(row)) - first[row]) * tile_bytes
    return np.stack([rows[row, 0] + skip, rows[row, 1] + skip, np.minimum(rows[row, 2] - skip, tile_bytes)],
                    axis=1).astype(np.int64)


def copy_pieces(data: Any, sources: np.ndarray, pack: np.ndarray, packed: np.ndarray, stream: Any) -> None:
    """Copy device pieces and packed host bytes into ``data``: one upload, one launch, on ``stream``.

    Parameters
    ----------
    data : device array of uint8
        The destination.
    sources : ndarray of int64, shape (n, 3)
        Device address of a piece, its offset in ``data``, bytes.
    pack : ndarray of uint8
        Host bytes, uploaded with the table.
    packed : ndarray of int64, shape (m, 3)
        Offset in ``pack``, offset in ``data``, bytes.
    stream : numba stream

    No two pieces may overlap in ``data`` (the kernel copies them in no
    order). Returns once the launch is queued; the caller keeps the sources
    alive until ``stream`` is synchronised.

    Raises
    ------
    ValueError
        A piece that leaves ``data``.
    """
    sources = np.asarray(sources, np.int64).reshape(-1, 3)
    packed = np.asarray(packed, np.int64).reshape(-1, 3)
    for name, rows in (("a device piece", sources), ("a packed piece", packed)):
        if len(rows) and (rows[:, 1].min() < 0 or (rows[:, 1] + rows[:, 2]).max() > data.shape[0]):
            raise ValueError(f"{name} leaves the decode's data of {data.shape[0]} bytes")
    sizes = np.concatenate([sources[:, 2], packed[:, 2]])
    tiles = int((-(-sizes[sizes > 0] // TILE_BYTES)).sum())
    if not tiles:
        return
    table_bytes = -(-tiles * 24 // _ALIGN) * _ALIGN
    staging = cuda.device_array(table_bytes + len(pack), np.uint8, stream=stream)
    pack_at = device_address(staging) + table_bytes
    rows = np.concatenate([sources, np.stack([packed[:, 0] + pack_at, packed[:, 1], packed[:, 2]], axis=1)])
    live = rows[rows[:, 2] > 0]
    base = int(live[:, 0].min()) & ~(_ALIGN - 1)
    span = int((live[:, 0] + live[:, 2]).max()) - base
    cut = tile_rows(live)
    cut[:, 0] -= base
    host = np.empty(table_bytes + len(pack), np.uint8)
    host[: tiles * 24].view(np.int64)[:] = cut.reshape(-1)
    host[table_bytes:] = pack
    staging.copy_to_device(host, stream=stream)
    src8, src32, src64 = _window(base, span)
    n = data.shape[0]
    dst32, dst64 = data[: n // 4 * 4].view(np.uint32), data[: n // 8 * 8].view(np.uint64)
    blocks = max(1, min(tiles, _MAX_BLOCKS))
    gather_kernel[blocks, _THREADS, stream](src8, src32, src64, data, dst32, dst64,
                                            staging[: tiles * 24].view(np.int64))


def _window(address: int, nbytes: int) -> tuple[Any, Any, Any]:
    """``nbytes`` from ``address`` (aligned) as borrowed uint8, uint32 and uint64 device arrays."""
    words = -(-nbytes // 8)
    if _SIM:
        from numba.cuda.cudadrv.devicearray import FakeCUDAArray  # the simulator's

        host = np.ctypeslib.as_array(ctypes.cast(address, ctypes.POINTER(ctypes.c_uint64)), shape=(words,))
        return FakeCUDAArray(host.view(np.uint8)), FakeCUDAArray(host.view(np.uint32)), FakeCUDAArray(host)
    return tuple(cuda.from_cuda_array_interface({"shape": (words * 8 // size,), "typestr": typestr,
                                                 "data": (address, False), "version": 3, "strides": None},
                                                owner=None, sync=False)
                 for size, typestr in ((1, "|u1"), (4, "<u4"), (8, "<u8")))
