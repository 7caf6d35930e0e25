"""The protocol every decompression backend implements.

A backend takes a batch: a list of :class:`~dask_hwdecomp.jobs.Job`
and two host buffers, ``src`` (compressed bytes) and ``dst`` (where each
job's output lands at ``job.dst_offset``). It decompresses all of them in as
few calls as it can, checks every output size against ``job.dst_size``, and
raises :class:`~dask_hwdecomp.errors.CorruptPageError` naming the job's
location and both sizes when one does not match.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ..errors import ChecksumError, CorruptPageError
from ..jobs import Algo, Job

__all__ = ["Backend", "HostBuffer", "size_mismatch", "gzip_crc_error"]


@runtime_checkable
class HostBuffer(Protocol):
    """A host buffer with an explicit life (pinned for GPU backends)."""

    view: memoryview  # writable, 1-D, bytes

    def close(self) -> None: ...


@runtime_checkable
class Backend(Protocol):
    """A decompression backend.

    Attributes
    ----------
    name : str
        ``"cpu"``, ``"nvcomp"`` or ``"hardware"``: what reports show.
    algorithms : frozenset of Algo
        The bitstreams it decodes.
    max_job_bytes : int or None
        Largest output of one job it accepts (None: no limit).
    """

    name: str
    algorithms: frozenset[Algo]
    max_job_bytes: int | None

    def decompress(self, jobs: Sequence[Job], src: memoryview, dst: memoryview) -> None:
        """Run every job; all outputs are in ``dst`` when it returns."""
        ...

    def host_buffer(self, nbytes: int) -> HostBuffer:
        """A host buffer of ``nbytes`` suited to this backend's copies."""
        ...

    def close(self) -> None:
        """Free every resource; the backend is unusable afterwards."""
        ...


def size_mismatch(job: Job, actual: int, backend: str) -> CorruptPageError:
    """The error for a job whose output is not the size its header declares."""
    return CorruptPageError(
        f"{job.algo.value} stream decompressed to {actual} bytes on {backend}, "
        f"the page header declares {job.dst_size}",
        job.location,
    )


def gzip_crc_error(job: Job, actual: int, backend: str) -> ChecksumError:
    """The error for a gzip member whose output does not have its trailer's CRC-32."""
    return ChecksumError(
        f"gzip CRC-32 {job.crc32:#010x} does not match the output ({actual:#010x}) on {backend}",
        job.location,
    )
