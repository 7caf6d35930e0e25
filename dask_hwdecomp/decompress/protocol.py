"""The protocol every decompression backend implements.

A backend takes a batch: :class:`~dask_hwdecomp.jobs.Job` records (a list,
or a :class:`~dask_hwdecomp.jobs.JobTable`) and two host buffers, ``src`` (compressed bytes) and ``dst`` (where each
job's output lands at ``job.dst_offset``). It decompresses all of them in as
few calls as it can, checks every output size against ``job.dst_size``, and
raises :class:`~dask_hwdecomp.errors.CorruptPageError` naming the job's
location and both sizes when one does not match.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..errors import ChecksumError, CorruptPageError
from ..jobs import Algo, Job, JobTable

__all__ = ["Backend", "HostBuffer", "HostRegistration", "size_mismatch", "gzip_crc_error"]


@runtime_checkable
class HostBuffer(Protocol):
    """A host buffer with an explicit life (pinned for GPU backends)."""

    view: memoryview  # writable, 1-D, bytes

    def close(self) -> None: ...


@runtime_checkable
class HostRegistration(Protocol):
    """Host memory page-locked for a backend's copies; ``close()`` unregisters it."""

    def close(self) -> None: ...


@runtime_checkable
class Backend(Protocol):
    """A decompression backend: the router's, and what the GPU service hosts.

    Every backend declares each attribute (``tests/test_backend_protocol.py``
    checks the backends and their signatures against this class); callers
    read them, never probe for them.

    Attributes
    ----------
    name : str
        ``"cpu"``, ``"nvcomp"`` or ``"hardware"``: what reports show.
    algorithms : frozenset of Algo
        The bitstreams it decodes.
    max_job_bytes : int or None
        Largest output of one job it accepts (None: no limit).
    overwrites_gaps : bool
        Outputs come back in runs that include the bytes between them:
        the caller passes ``protect`` (other backends' outputs in ``dst``).
    keeps_outputs : bool
        ``decompress`` takes ``keep``, and keeps the outputs on the device
        for the GPU decoder.
    lz4_checked : bool
        Its LZ4 decoder refuses every block LZ4's reference decoder refuses
        (a match reaching before the block's start among them). Where
        False, the router walks the batch's LZ4 blocks on the host before
        the call (:mod:`~dask_hwdecomp.decompress.lz4_walk`).
    deadline_bytes_per_s : int or None
        Hosted in the GPU service: the rate its requests' deadlines grant
        (None: the service's rule).
    """

    name: str
    algorithms: frozenset[Algo]
    max_job_bytes: int | None
    overwrites_gaps: bool
    keeps_outputs: bool
    lz4_checked: bool
    deadline_bytes_per_s: int | None

    def decompress(self, jobs: Sequence[Job] | JobTable, src: memoryview, dst: memoryview,
                   protect: Sequence[tuple[int, int]] = (), keep: Any = None) -> int:
        """Run every job; all outputs are in ``dst`` when it returns.

        ``protect`` (sorted ``dst`` ranges) is read when ``overwrites_gaps``;
        ``keep`` (a :class:`~dask_hwdecomp.gpu.stream_runner.Keeper`) may be
        given only when ``keeps_outputs``. Returns the pages that failed on
        the GPU and were redone on the CPU (0 for the CPU backend).
        """
        ...

    def host_buffer(self, nbytes: int) -> HostBuffer:
        """A host buffer of ``nbytes`` suited to this backend's copies."""
        ...

    def register_host(self, ptr: int, nbytes: int) -> HostRegistration | None:
        """Page-lock host memory the backend did not allocate; None where its copies need none."""
        ...

    def stats(self) -> dict:
        """Counters of its pools and calls (empty where it keeps none)."""
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
