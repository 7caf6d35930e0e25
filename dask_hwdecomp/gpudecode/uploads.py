"""Where the bytes of a decode come from: pages kept on the device, or the client's host memory.

A decode plan names the byte ranges of a client's images the decoder needs
(``ranges``: source offset, bytes, offset in the device copy ``data``).
When the GPU service decompressed those images it may have kept the
decompressed pages on the device (:class:`KeptPages`, one per part of a
GPU call): then :func:`plan_uploads` takes every byte it can from there (a
copy on the device) and only the rest from the host, which are the page
headers written after decompression, pages stored uncompressed, and
anything another backend decompressed.

A kept block holds *spans* of the client's buffer copied as the call copied
them back, the bytes between outputs included; only the jobs' *outputs*
among them are right. So the device copies (:attr:`Uploads.device`) run
first, a span at a time (consecutive outputs of one span in one copy, the
bytes between them included), and the host pieces after them, which also
overwrite those in-between bytes. Host pieces of at least
:data:`PATCH_BYTES` are copied one by one; smaller ones (mostly page
headers) are *patches*: packed into one buffer (:func:`pack_patches`) and
uploaded in one copy.

The decoder copies the same bytes with one launch (:mod:`~.gather`):
:attr:`Uploads.pieces` are the kept outputs alone, without the bytes
between them, so they, the patches and the large host pieces never overlap
and need no order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import njit

from .uploads_kernels import OUT_OF_RANGE, OUTSIDE_SPANS, OVERLAP, cut_ranges, outputs_table

__all__ = ["KeptPages", "Uploads", "plan_uploads", "pack_patches", "device_address", "PATCH_BYTES"]

# Host pieces smaller than this are packed and placed by one kernel launch.
PATCH_BYTES = 64 << 10


@dataclass(frozen=True)
class KeptPages:
    """Outputs of one part of a GPU call, kept on the device.

    Attributes
    ----------
    array : device array of uint8
        The block (the decoder's device memory).
    spans : ndarray of int64, shape (n, 3)
        Offset in the client's buffer, bytes, offset in ``array``: what was
        copied.
    outputs : ndarray of int64, shape (m, 2)
        Offset in the client's buffer and bytes of every job's output: the
        only bytes of the spans that are right.
    """

    array: Any
    spans: np.ndarray
    outputs: np.ndarray

    @property
    def nbytes(self) -> int:
        """Bytes of the block the spans use."""
        return int(self.spans[:, 1].sum()) if len(self.spans) else 0

    def shifted(self, by: int) -> KeptPages:
        """The same block with buffer offsets moved by ``by`` (from a run's buffer to its segment, and back)."""
        spans, outputs = self.spans.copy(), self.outputs.copy()
        spans[:, 0] += by
        outputs[:, 0] += by
        return KeptPages(self.array, spans, outputs)

    def within(self, lo: int, hi: int) -> bool:
        """Whether every span lies in ``[lo, hi)``."""
        s = self.spans
        return bool(len(s) == 0 or (s[:, 0].min() >= lo and (s[:, 0] + s[:, 1]).max() <= hi))


@dataclass(frozen=True)
class Uploads:
    """How a plan's ``data`` is filled.

    Attributes
    ----------
    device : list of (int, ndarray)
        Per kept block (its index in the ``kept`` given), int64 rows
        (offset in the block, offset in ``data``, bytes); run first.
    host : ndarray of int64, shape (n, 3)
        Large host pieces: source offset, bytes, offset in ``data``.
    patches : ndarray of int64, shape (n, 3)
        Small host pieces, the same columns; packed (:func:`pack_patches`).
    pieces : ndarray of int64, shape (n, 4)
        The bytes ``device`` copies without those between outputs: a row
        per kept output (clipped to its range) of block index, offset in
        the block, offset in ``data``, bytes. They never overlap ``host``
        or ``patches``, so the three may be copied in any order, or at once
        (:func:`~.gather.copy_pieces`).
    """

    device: list = field(default_factory=list)
    host: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))
    patches: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))
    pieces: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), np.int64))

    @property
    def device_bytes(self) -> int:
        """Bytes copied on the device (the bytes between outputs included)."""
        return int(sum(int(rows[:, 2].sum()) for _, rows in self.device))


def _outputs(kept: list[KeptPages]) -> np.ndarray:
    """Every output of every block: rows (start, end, block index, span id, offset in the block), by start.

    A span's id is its index in the blocks' spans laid end to end. All
    blocks at once, compiled (:func:`~.uploads_kernels.outputs_table`): a
    run's requests bring hundreds of them.

    Raises
    ------
    ValueError
        An output outside its block's spans, or two outputs that overlap.
    """
    if not kept:
        return np.zeros((0, 5), np.int64)
    spans = np.concatenate([np.asarray(p.spans, np.int64).reshape(-1, 3) for p in kept])
    outs = np.concatenate([np.asarray(p.outputs, np.int64).reshape(-1, 2) for p in kept])
    sblock = np.repeat(np.arange(len(kept), dtype=np.int64), [len(p.spans) for p in kept])
    oblock = np.repeat(np.arange(len(kept), dtype=np.int64), [len(p.outputs) for p in kept])
    table, status, block = outputs_table(spans, sblock, outs, oblock, len(kept))
    if status == OUT_OF_RANGE:
        raise ValueError(f"kept offsets out of range ({len(kept)} blocks)")
    if status == OUTSIDE_SPANS:
        raise ValueError(f"kept block {block} has an output outside its spans")
    if status == OVERLAP:
        raise ValueError("kept outputs overlap")
    return table


def plan_uploads(ranges: np.ndarray, kept: list[KeptPages], patch_bytes: int = PATCH_BYTES) -> Uploads:
    """Split a plan's upload ``ranges`` into copies from ``kept`` blocks and from the host.

    Every range is cut against every kept output in one compiled pass
    (:func:`~.uploads_kernels.cut_ranges`, compiled): a decode of a
    whole read has thousands of pages, and this runs in the GPU service's
    decoder runner.

    Parameters
    ----------
    ranges : ndarray of int64, shape (n, 3)
        Source offset (in the client's buffer), bytes, offset in ``data``.
    kept : list of KeptPages
        Blocks in the same buffer coordinates as ``ranges``.
    patch_bytes : int
        Host pieces smaller than this are patches.

    Raises
    ------
    ValueError
        The kept blocks contradict each other (see :func:`_outputs`).
    """
    ranges = np.asarray(ranges, dtype=np.int64).reshape(-1, 3)
    ranges = np.ascontiguousarray(ranges[ranges[:, 1] > 0])
    if not kept:
        return Uploads([], *_split(ranges, patch_bytes))
    host, pieces, rows, counts = cut_ranges(ranges, _outputs(kept), len(kept))
    ends = np.cumsum(counts)
    device = [(k, rows[ends[k] - counts[k] : ends[k]]) for k in np.flatnonzero(counts).tolist()]
    big, small = _split(host, patch_bytes)
    return Uploads(device, big, small, pieces)


def _split(rows: np.ndarray, patch_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    small = rows[:, 1] < patch_bytes
    return rows[~small], rows[small]


def pack_patches(host: np.ndarray, patches: np.ndarray, out: np.ndarray | None = None,
                 at: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The patches' bytes packed end to end, and rows (offset in the pack, offset in ``data``, bytes).

    Parameters
    ----------
    host : ndarray of uint8
        The bytes the patches' source offsets point into.
    patches : ndarray of int64, shape (n, 3)
        Source offset, bytes, offset in ``data`` (:attr:`Uploads.patches`).
    out : ndarray of uint8, optional
        Where to pack them, from ``at``; the rows' offsets are then in
        ``out``. By default a new array of their size.
    at : int
        The first byte of ``out`` to pack into.

    Raises
    ------
    ValueError
        A patch outside ``host``, or more bytes than ``out`` holds from ``at``.
    """
    patches = np.asarray(patches, np.int64).reshape(-1, 3)
    # Contiguous columns: one compiled specialisation of _copy_runs, the one warmed up.
    starts, sizes = np.ascontiguousarray(patches[:, 0]), np.ascontiguousarray(patches[:, 1])
    total = int(sizes.sum())
    if out is None:
        out, at = np.empty(total, np.uint8), 0
    if len(patches) and (starts.min() < 0 or int((starts + sizes).max()) > len(host)):
        raise ValueError(f"a patch outside the {len(host)} bytes it is packed from")
    if at < 0 or at + total > len(out):
        raise ValueError(f"{total} bytes of patches packed at {at} of {len(out)}")
    offsets = at + np.cumsum(sizes) - sizes
    _copy_runs(host, starts, sizes, out, offsets)  # compiled: no Python a patch, the GIL kept
    return out[at : at + total], np.stack([offsets, patches[:, 2], sizes], axis=1).astype(np.int64)


@njit(cache=True)
def _copy_runs(src, starts, sizes, dst, offsets):
    for i in range(starts.shape[0]):
        n = sizes[i]
        dst[offsets[i] : offsets[i] + n] = src[starts[i] : starts[i] + n]


def device_address(array: Any) -> int:
    """The device address of a numba device array's first byte (the host address under the simulator)."""
    face = getattr(array, "__cuda_array_interface__", None)
    if face is not None:
        return int(face["data"][0])
    return int(np.asarray(array).ctypes.data)
