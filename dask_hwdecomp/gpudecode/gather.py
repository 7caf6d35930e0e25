"""Many copies into a decode's ``data`` as one upload and one launch.

A merged decode's bytes come from many places (:mod:`~.uploads`): pieces of
the blocks the service kept on the device, and small host pieces packed
into one buffer. One copy call a piece cost the service's Python tens of
microseconds each, under its one GIL, and a run has thousands of pieces.
:func:`copy_pieces` instead packs the host pieces into one staging buffer
and writes one int64 copy table of tiles before them (source address,
offset in ``data``, bytes; both compiled:
:mod:`~.gather_tiles`), uploads both in one copy and launches
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
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from numba import config

from .. import timeline
from ..gpu.cuda_jit import cuda
from ..gpu.launch import launch
from .gather_tiles import count_tiles, write_tiles
from .kernels_copy import gather_kernel
from .uploads import device_address, pack_patches

__all__ = ["copy_pieces", "TILE_BYTES"]

# Most bytes one block copies: a large piece spreads over many blocks.
TILE_BYTES = 32 << 10
_SIM = bool(config.ENABLE_CUDASIM)  # type: ignore[attr-defined]
_THREADS = 32 if _SIM else 256
_MAX_BLOCKS = 2 if _SIM else 1 << 16
# The table's place in the staging buffer keeps the packed bytes behind it aligned.
_ALIGN = 256


def copy_pieces(data: Any, sources: np.ndarray, patches: Sequence[tuple[np.ndarray, np.ndarray]],
                stream: Any) -> None:
    """Copy device pieces and small host pieces into ``data``: one upload, one launch, on ``stream``.

    Parameters
    ----------
    data : device array of uint8
        The destination.
    sources : ndarray of int64, shape (n, 3)
        Device address of a piece, its offset in ``data``, bytes.
    patches : sequence of (ndarray of uint8, ndarray of int64)
        Host bytes and rows of pieces of them (source offset, bytes,
        offset in ``data``: :attr:`~.uploads.Uploads.patches`' columns),
        packed behind the copy table and uploaded with it.
    stream : numba stream

    No two pieces may overlap in ``data`` (the kernel copies them in no
    order). Returns once the launch is queued; the caller keeps the sources
    alive until ``stream`` is synchronised.

    Raises
    ------
    ValueError
        A piece that leaves ``data``, or a patch outside its host bytes.
    """
    sources = np.asarray(sources, np.int64).reshape(-1, 3)
    patches = [(host, np.asarray(rows, np.int64).reshape(-1, 3)) for host, rows in patches]
    ends = [sources[:, 1:3]] + [rows[:, 2:0:-1] for _, rows in patches]  # (offset in data, bytes)
    placed = np.concatenate(ends)
    if len(placed) and (placed[:, 0].min() < 0 or (placed[:, 0] + placed[:, 1]).max() > data.shape[0]):
        raise ValueError(f"a piece leaves the decode's data of {data.shape[0]} bytes")
    tiles = int(count_tiles(np.ascontiguousarray(placed[:, 1]), TILE_BYTES))
    if not tiles:
        return
    table_bytes = -(-tiles * 24 // _ALIGN) * _ALIGN
    pack_bytes = int(sum(int(rows[:, 1].sum()) for _, rows in patches))
    host = np.empty(table_bytes + pack_bytes, np.uint8)
    with timeline.span("gather_alloc", nbytes=len(host)):
        staging = cuda.device_array(len(host), np.uint8, stream=stream)
    with timeline.span("gather_table", tiles=tiles):
        cut = _tile_table(staging, sources, patches, host, table_bytes)
    with timeline.span("gather_copy", nbytes=len(host)):
        staging.copy_to_device(host, stream=stream)
    with timeline.span("gather_launch"):
        src8, src64 = _window(cut.base, cut.span)
        dst64 = data[: data.shape[0] // 8 * 8].view(np.uint64)
        blocks = max(1, min(tiles, _MAX_BLOCKS))
        launch(gather_kernel, blocks, _THREADS, stream, src8, src64, data, dst64, staging[: tiles * 24].view(np.int64))


class _Cut(NamedTuple):
    """Where the tiles' sources lie: the window's first (aligned) address and its bytes."""

    base: int
    span: int


def _tile_table(staging, sources: np.ndarray, patches, host: np.ndarray, table_bytes: int) -> _Cut:
    """Pack the patches behind the table in ``host`` and write the tiles (relative to the window) before them."""
    address = device_address(staging)
    packed, at = [sources], table_bytes
    for src, rows in patches:
        _, where = pack_patches(src, rows, host, at)
        where[:, 0] += address
        packed.append(where)
        at += int(rows[:, 1].sum())
    table = host[:table_bytes].view(np.int64)
    base, span, _ = write_tiles(np.ascontiguousarray(np.concatenate(packed)), TILE_BYTES, _ALIGN, table)
    return _Cut(int(base), int(span))


def _window(address: int, nbytes: int) -> tuple[Any, Any]:
    """``nbytes`` from ``address`` (aligned), rounded up to whole words, as borrowed uint8 and uint64 arrays."""
    words = -(-nbytes // 8)
    if _SIM:
        from numba.cuda.cudadrv.devicearray import FakeCUDAArray  # type: ignore[attr-defined]  # the simulator's

        host = np.ctypeslib.as_array(ctypes.cast(address, ctypes.POINTER(ctypes.c_uint64)), shape=(words,))
        return FakeCUDAArray(host.view(np.uint8)), FakeCUDAArray(host)
    return tuple(cuda.from_cuda_array_interface({"shape": (words * 8 // size,), "typestr": typestr,
                                                 "data": (address, False), "version": 3, "strides": None},
                                                owner=None, sync=False)
                 for size, typestr in ((1, "|u1"), (8, "<u8")))
