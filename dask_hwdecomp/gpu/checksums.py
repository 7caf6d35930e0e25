"""The CRC-32 checks of a GPU call, run on the device beside its decompression.

Two CRC-32s (CRC-32/PKZIP, zlib's) can be checked per job:

* ``"gzip"``: the gzip trailer's CRC-32 of the job's output (raw deflate
  after the framing was stripped), always;
* ``"page"``: the Parquet page header's CRC-32 of the page's stored bytes,
  with ``verify_checksums`` (the bytes are on the device: staging copies the
  whole page for such a job).

:func:`crc_checks` lists them for a placed call; :class:`CrcRun` queues one
batched CRC-32 over all of them on the call's stream, after the launch, and
copies the results back with the call. The batched call is the ops
object's ``checksummer`` (nvCOMP's ``nvcompBatchedCRC32Async`` on CUDA; the
engine stand-in has its own). Without one, the CRCs are computed on the
host over the call's host buffers after the synchronisation.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..rounding import round_up
from .staging import DEVICE_ALIGN

__all__ = ["CrcCheck", "CrcChecks", "Mismatch", "crc_checks", "CrcRun"]



@dataclass(frozen=True)
class CrcCheck:
    """One row of :class:`CrcChecks` (for reading, not for the call's path)."""

    index: int
    kind: str
    offset: int
    size: int
    expected: int


@dataclass(frozen=True)
class CrcChecks:
    """The CRC-32s a call checks, one row each (numpy arrays of one length).

    Attributes
    ----------
    index : int64
        The job's index in the placed call.
    page : bool
        True: the stored page bytes (``"page"``); False: the job's output (``"gzip"``).
    offset : int64
        Arena offset of the bytes.
    size : int64
    expected : int64
    """

    index: np.ndarray
    page: np.ndarray
    offset: np.ndarray
    size: np.ndarray
    expected: np.ndarray

    def __len__(self) -> int:
        return len(self.index)

    def where(self, mask) -> CrcChecks:
        """The rows ``mask`` selects."""
        return CrcChecks(self.index[mask], self.page[mask], self.offset[mask], self.size[mask], self.expected[mask])

    def records(self) -> list[CrcCheck]:
        """Every row as a :class:`CrcCheck`."""
        return [CrcCheck(int(self.index[k]), self.kind(k), int(self.offset[k]), int(self.size[k]),
                         int(self.expected[k])) for k in range(len(self.index))]

    def kind(self, k: int) -> str:
        """``"page"`` or ``"gzip"``: what row ``k`` checks."""
        return "page" if self.page[k] else "gzip"


@dataclass(frozen=True)
class Mismatch:
    """A CRC-32 that did not match: which one, what it should be, what it is."""

    kind: str
    expected: int
    actual: int


def crc_checks(plan) -> CrcChecks:
    """The CRC-32s of a :class:`~dask_hwdecomp.gpu.staging.Placement`, in job order (a job's page first)."""
    r = plan.rows
    k = np.arange(len(r), dtype=np.int64)
    pages, gzips = r["page_crc"] >= 0, r["crc32"] >= 0
    index = np.concatenate([k[pages], k[gzips]])
    page = np.concatenate([np.ones(int(pages.sum()), bool), np.zeros(int(gzips.sum()), bool)])
    offset = np.concatenate([plan.page_dev[pages].astype(np.int64), plan.dst_dev[gzips].astype(np.int64)])
    size = np.concatenate([r["page_crc_size"][pages], r["dst_size"][gzips]])
    expected = np.concatenate([r["page_crc"][pages], r["crc32"][gzips]])
    order = np.lexsort((~page, index))
    return CrcChecks(index[order], page[order], offset[order], size[order], expected[order])


class CrcRun:
    """The CRC-32s of one call: sizes of its scratch, its launch, its results.

    Parameters
    ----------
    checks : CrcChecks
    checksummer : object or None
        Has ``crc32_batch(ptrs, sizes, count, out, max_bytes, stream)`` over
        device arrays (u64 pointers, u64 sizes, u32 results); None computes
        on the host.
    """

    def __init__(self, checks: CrcChecks, checksummer):
        self.checks = checks
        self.on_device = checksummer is not None and len(checks) > 0
        self._sum = checksummer
        self._host: memoryview | None = None  # set by the launch, read after the synchronisation

    @property
    def device_bytes(self) -> int:
        m = len(self.checks)
        return round_up(16 * m, DEVICE_ALIGN) + round_up(4 * m, DEVICE_ALIGN) if self.on_device else 0

    @property
    def host_bytes(self) -> int:
        return 20 * len(self.checks) if self.on_device else 0

    def launch(self, ops, stream, base: int, scratch: int, host_ptr: int, host_view) -> None:
        """Queue the batched CRC-32 on ``stream`` and the copy of its results.

        ``base`` is the arena's address, ``scratch`` the device address of
        :attr:`device_bytes`, ``host_ptr``/``host_view`` :attr:`host_bytes`
        of pinned memory (8-byte aligned).

        Raises
        ------
        NvcompError, CudaError
        """
        if not self.on_device:
            return
        m = len(self.checks)
        up = np.frombuffer(host_view, dtype=np.uint64, count=2 * m)
        up[:m] = self.checks.offset.astype(np.uint64) + np.uint64(base)
        up[m:] = self.checks.size.astype(np.uint64)
        d_out = scratch + round_up(16 * m, DEVICE_ALIGN)
        ops.htod(scratch, host_ptr, 16 * m, stream)
        self._sum.crc32_batch(scratch, scratch + 8 * m, m, d_out, max(int(self.checks.size.max()), 1), stream)
        ops.dtoh(host_ptr + 16 * m, d_out, 4 * m, stream)
        self._host = host_view

    def mismatches(self, host_bytes: Callable[[int, bool], memoryview]) -> dict[int, list[Mismatch]]:
        """After the synchronisation: per job index, the CRC-32s that do not match.

        ``host_bytes(index, page)`` gives the checked bytes of the call's job
        ``index`` on the host (used only without a device checksummer).
        """
        c = self.checks
        m = len(c)
        if self.on_device:
            if self._host is None:
                raise RuntimeError("mismatches() before the device checksums were launched")
            actual = np.frombuffer(self._host, dtype=np.uint32, count=m, offset=16 * m).astype(np.int64)
        else:
            actual = np.fromiter((zlib.crc32(host_bytes(int(i), bool(p))) for i, p in zip(c.index, c.page)),
                                 dtype=np.int64, count=m)
        out: dict[int, list[Mismatch]] = {}
        for k in np.flatnonzero(actual != c.expected).tolist():
            out.setdefault(int(c.index[k]), []).append(Mismatch(c.kind(k), int(c.expected[k]), int(actual[k])))
        return out
