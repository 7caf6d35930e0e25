"""What the two GPU backends share: host buffers, parts, the batcher, errors.

A GPU backend is a :class:`GpuBackend` with a *launcher* (the format-specific
batched call, see :class:`dask_hwdecomp.gpu.slot.Launcher`) and an *ops*
object (memory operations; the real CUDA one, or the engine stand-in in CI).
``decompress`` validates every job on the host, cuts the caller's jobs into
parts of at most ``batch_bytes`` of output, hands them to the process's
batcher (which merges parts of concurrent callers into one call per stream),
and turns per-page failures into :class:`~dask_hwdecomp.errors.CorruptPageError`
naming the page. A backend made with ``redo_on_cpu`` (the engine, whose
operations have no status of their own) first redoes failed pages on the
CPU; only a page the CPU rejects too is an error, and ``decompress``
returns how many pages were redone (the read's report shows them).

Gzip CRC-32: the CPU backend always checks it; a GPU backend checks it on the
host only with ``verify_checksums=True`` (it costs a pass over the output).
The output size is always checked.
"""

from __future__ import annotations

import zlib
from typing import Sequence

from ..errors import CorruptPageError
from ..format.layout import Job
from ..gpu.batcher import Batcher
from ..gpu.memory import PinnedPool
from ..gpu.slot import Slot
from ..gpu.staging import Part
from ..options import Options
from .cpu import decompress_one
from .protocol import size_mismatch
from .validate import check_job

__all__ = ["GpuBackend", "pinned_cap"]


def pinned_cap(options: Options) -> int:
    """Pinned bytes a backend may hold: 4 batches' worth, at most a quarter of RAM."""
    try:
        import os

        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not Linux
        ram = 16 << 30
    return max(256 << 20, min(4 * options.batch_bytes, ram // 4))


class GpuBackend:
    """A batched GPU backend (see the module docstring).

    Parameters
    ----------
    name : str
        ``"nvcomp"`` or ``"hardware"``.
    ops : object
        Memory operations (:class:`~dask_hwdecomp.gpu.ops.CudaOps` or stand-in).
    launcher : Launcher
        The batched call; also gives ``algorithms`` and ``max_job_bytes``.
    options : Options
    owned : sequence
        Objects closed after everything else (device, library handles).
    redo_on_cpu : bool
        Redo pages that fail here on the CPU instead of raising at once.

    Raises
    ------
    CudaError
        Setup failed; whatever was created is freed again.
    """

    # Outputs come back in runs that include the bytes between them (page
    # headers the reader writes afterwards); the router passes ``protect``.
    overwrites_gaps = True

    def __init__(self, name: str, ops, launcher, options: Options, owned: Sequence = (),
                 redo_on_cpu: bool = False):
        self.name = name
        self.redo_on_cpu = redo_on_cpu
        self.algorithms = frozenset(launcher.algorithms)
        self.max_job_bytes = launcher.max_job_bytes
        self.options = options
        self._ops = ops
        self._launcher = launcher
        self._owned = list(owned)
        self._pool = None
        self._batcher = None
        slots = []
        try:
            self._pool = PinnedPool(ops.alloc_host, pinned_cap(options))
            for _ in range(options.streams):
                slots.append(Slot(ops, launcher))
            self._batcher = Batcher(slots, ops, options.batch_bytes, options.batch_latency_ms / 1000)
        except BaseException:
            for slot in slots:
                slot.close()
            if self._pool is not None:
                self._pool.close()
            raise

    # -- the protocol -------------------------------------------------------

    def decompress(self, jobs: Sequence[Job], src: memoryview, dst: memoryview,
                   protect: Sequence[tuple[int, int]] = ()) -> int:
        """Decompress ``jobs`` on the GPU; outputs are in ``dst`` on return.

        Parameters
        ----------
        jobs : sequence of Job
        src, dst : memoryview
            Host buffers (pinned ones from :meth:`host_buffer` copy fastest).
        protect : sequence of (int, int)
            Sorted ``dst`` ranges holding other backends' outputs: bytes
            between this backend's outputs are overwritten except there.

        Returns
        -------
        int
            Pages that failed on the GPU and were redone on the CPU
            (``redo_on_cpu``; else 0).

        Raises
        ------
        CorruptPageError
            The first page (in ``jobs`` order) that failed host checks, did
            not decompress, decompressed to the wrong size or (with
            ``verify_checksums``) the wrong gzip CRC-32 (with
            ``redo_on_cpu``: and failed on the CPU too).
        CudaError, NvcompError
            The batch failed as a whole.
        """
        if not jobs:
            return 0
        limit = self._launcher.max_input_bytes
        src_len, dst_len = len(src), len(dst)
        for job in jobs:
            if job.algo not in self.algorithms:
                raise CorruptPageError(f"{job.algo.value} is not decoded by {self.name}", job.location)
            check_job(job, src_len, dst_len, src, limit)
        parts = [Part(chunk, src, dst, protect) for chunk in _split(jobs, self.options.batch_bytes)]
        results = self._batcher.run(parts)
        failed = [f for failures in results for f in failures]
        rank = {id(job): i for i, job in enumerate(jobs)}
        failed.sort(key=lambda f: rank[id(f.job)])
        if failed and self.redo_on_cpu:
            self._redo_on_cpu(failed, src, dst)
        elif failed:
            first = failed[0]
            if first.status is not None:
                raise CorruptPageError(
                    f"{first.job.algo.value} stream does not decompress on {self.name} "
                    f"({first.status}; {len(failed)} failed page(s) in this call)",
                    first.job.location,
                )
            raise size_mismatch(first.job, first.actual, self.name)
        if self.options.verify_checksums:
            for job in jobs:
                if job.crc32 is not None:
                    actual = zlib.crc32(dst[job.dst_offset : job.dst_offset + job.dst_size])
                    if actual != job.crc32:
                        raise CorruptPageError(
                            f"gzip CRC-32 {job.crc32:#010x} does not match the output "
                            f"({actual:#010x}) on {self.name}",
                            job.location,
                        )
        return len(failed) if self.redo_on_cpu else 0

    def _redo_on_cpu(self, failed: Sequence, src: memoryview, dst: memoryview) -> None:
        """Decode failed pages on this thread, in the caller's order; raise at the first the CPU rejects."""
        for f in failed:
            try:
                decompress_one(f.job, src, dst)
            except CorruptPageError as exc:
                on_gpu = f.status or f"{f.actual} bytes where the page header declares {f.job.dst_size}"
                raise CorruptPageError(
                    f"{f.job.algo.value} stream fails on {self.name} ({on_gpu}) and on the CPU: {exc.reason} "
                    f"({len(failed)} page(s) of this call redone on the CPU)",
                    f.job.location,
                ) from None

    def host_buffer(self, nbytes: int):
        """A pinned host buffer from the backend's capped pool (``close()`` returns it).

        Raises
        ------
        CudaError
        """
        return self._pool.get(nbytes)

    def register_host(self, ptr: int, nbytes: int):
        """Page-lock host memory this backend did not allocate; None if its ops cannot.

        Returns
        -------
        object with ``close()`` (unregisters), or None

        Raises
        ------
        CudaError
        """
        register = getattr(self._ops, "register_host", None)
        return None if register is None else register(ptr, nbytes)

    def stats(self) -> dict:
        """Pool and batcher counters (allocations stay flat in steady state)."""
        out = {f"pinned_{k}": v for k, v in self._pool.stats().items()}
        out.update(self._batcher.stats())
        return out

    def close(self) -> None:
        """Stop the batcher, free streams, arenas and pools, then owned objects."""
        batcher, self._batcher = self._batcher, None
        pool, self._pool = self._pool, None
        try:
            if batcher is not None:
                batcher.close()
        finally:
            try:
                if pool is not None:
                    pool.close()
            finally:
                owned, self._owned = self._owned, []
                for obj in reversed(owned):
                    obj.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _split(jobs: Sequence[Job], budget: int) -> list[list[Job]]:
    """Consecutive runs of jobs with at most ``budget`` output bytes each."""
    out: list[list[Job]] = [[]]
    size = 0
    for job in jobs:
        if out[-1] and size + job.dst_size > budget:
            out.append([])
            size = 0
        out[-1].append(job)
        size += job.dst_size
    return out
