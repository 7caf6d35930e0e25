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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..rounding import round_up
from .staging import DEVICE_ALIGN

__all__ = ["CrcCheck", "Mismatch", "crc_checks", "CrcRun"]



@dataclass(frozen=True)
class CrcCheck:
    """One CRC-32 a call checks.

    Attributes
    ----------
    index : int
        The job's index in the placed call.
    kind : str
        ``"page"`` (stored page bytes) or ``"gzip"`` (the job's output).
    offset : int
        Arena offset of the bytes.
    size : int
    expected : int
    """

    index: int
    kind: str
    offset: int
    size: int
    expected: int


@dataclass(frozen=True)
class Mismatch:
    """A CRC-32 that did not match: which one, what it should be, what it is."""

    kind: str
    expected: int
    actual: int


def crc_checks(plan) -> list[CrcCheck]:
    """The CRC-32s of a :class:`~dask_hwdecomp.gpu.staging.Placement`, in job order."""
    out = []
    for k, job in enumerate(plan.jobs):
        if job.page_crc is not None:
            out.append(CrcCheck(k, "page", int(plan.page_dev[k]), job.page_crc.size, job.page_crc.value))
        if job.crc32 is not None:
            out.append(CrcCheck(k, "gzip", int(plan.dst_dev[k]), job.dst_size, job.crc32))
    return out


class CrcRun:
    """The CRC-32s of one call: sizes of its scratch, its launch, its results.

    Parameters
    ----------
    checks : sequence of CrcCheck
    checksummer : object or None
        Has ``crc32_batch(ptrs, sizes, count, out, max_bytes, stream)`` over
        device arrays (u64 pointers, u64 sizes, u32 results); None computes
        on the host.
    """

    def __init__(self, checks: Sequence[CrcCheck], checksummer):
        self.checks = list(checks)
        self.on_device = checksummer is not None and bool(self.checks)
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
        up[:m] = np.fromiter((c.offset for c in self.checks), dtype=np.uint64, count=m) + np.uint64(base)
        up[m:] = np.fromiter((c.size for c in self.checks), dtype=np.uint64, count=m)
        d_out = scratch + round_up(16 * m, DEVICE_ALIGN)
        ops.htod(scratch, host_ptr, 16 * m, stream)
        self._sum.crc32_batch(scratch, scratch + 8 * m, m, d_out, max(max(c.size for c in self.checks), 1), stream)
        ops.dtoh(host_ptr + 16 * m, d_out, 4 * m, stream)
        self._host = host_view

    def mismatches(self, host_bytes: Callable[[CrcCheck], memoryview]) -> dict[int, list[Mismatch]]:
        """After the synchronisation: per job index, the CRC-32s that do not match.

        ``host_bytes(check)`` gives the checked bytes on the host (used only
        without a device checksummer).
        """
        m = len(self.checks)
        if self.on_device:
            if self._host is None:
                raise RuntimeError("mismatches() before the device checksums were launched")
            actual = np.frombuffer(self._host, dtype=np.uint32, count=m, offset=16 * m).tolist()
        else:
            actual = [zlib.crc32(host_bytes(c)) for c in self.checks]
        out: dict[int, list[Mismatch]] = {}
        for check, value in zip(self.checks, actual):
            if value != check.expected:
                out.setdefault(check.index, []).append(Mismatch(check.kind, check.expected, int(value)))
        return out
