"""The routing table: which backend decompresses which bitstream.

One table per ``backend`` option lists, for each bitstream, the backends
to try in order (drawn from :mod:`~dask_hwdecomp.backend_table`); the first that is available, decodes that
bitstream and accepts the job's size takes the job. ``auto`` never fails for
lack of a GPU: a GPU backend whose service cannot be reached or started,
or cannot create the backend, is left out (at the start of a read, or for
the rest of it when the service is lost and cannot be started again), its
pages go to the CPU pool, and the read's report names it in
``unreachable`` with the reason. A named GPU backend that cannot run
here raises.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backend_table import GPU_BACKENDS
from ..decompress.cpu import decompress_one
from ..decompress.lz4_walk import check_lz4_blocks
from ..errors import (
    BackendUnavailableError,
    ChecksumError,
    CorruptPageError,
    GpuBatchFailedError,
    ServiceUnreachable,
)
from ..format.structs import CODEC_NAMES
from ..jobs import ALGOS, Algo, Job, JobTable, as_table
from ..options import Options
from ..report import PYARROW_NO_GPU, ReadReport
from . import registry
from .ways import page_path_only

logger = logging.getLogger("dask_hwdecomp")

__all__ = ["ROUTES", "Router", "PYARROW_NO_GPU", "pyarrow_reads", "pyarrow_routes", "gpu_can_run"]

_GPU = (Algo.SNAPPY, Algo.DEFLATE, Algo.LZ4, Algo.ZSTD)
_CPU_ONLY = (Algo.GZIP, Algo.BROTLI)

def _routes(gpu_first: tuple[str, ...]) -> dict[Algo, tuple[str, ...]]:
    """Bitstreams a GPU may take go to ``gpu_first`` in order; the rest to the CPU pool."""
    return {**{a: gpu_first for a in _GPU}, **{a: ("cpu",) for a in _CPU_ONLY}}


# backend option -> bitstream -> the backends to try, in order. "auto" tries
# every GPU backend of the backend table and then the CPU; a named GPU
# backend falls only to those after it (the engine to nvCOMP, for the
# bitstreams or sizes the engine does not take), never to the CPU.
ROUTES: dict[str, dict[Algo, tuple[str, ...]]] = {
    "auto": _routes((*GPU_BACKENDS, "cpu")),
    **{name: _routes(GPU_BACKENDS[i:]) for i, name in enumerate(GPU_BACKENDS)},
    "cpu": {a: ("cpu",) for a in Algo},
}


def gpu_can_run() -> bool:
    """Whether any GPU backend can run here (the registry's probes; no CUDA context is made)."""
    return any(registry.probe(name) is None for name in GPU_BACKENDS)


def pyarrow_reads(options: Options) -> bool:
    """True when a read with ``options`` goes to pyarrow's own reader.

    That is ``backend="auto"`` on a machine where no GPU backend can run
    (the registry's probes say so), unless the options ask for what only
    the page path does (:func:`~dask_hwdecomp.routing.ways.page_path_only`):
    ``verify_checksums`` (it checks CRCs and names the page that fails),
    ``max_page_bytes`` or ``max_batch_bytes`` set to other than their
    defaults (it enforces them), or ``decode="gpu"``, which must raise
    there rather than decode on the CPU. A named backend, ``"cpu"``
    included, always takes the page path. Where a GPU backend can run,
    ``auto`` chooses per piece (:func:`~dask_hwdecomp.routing.ways.choose`).
    """
    return page_path_only(options) is None and not gpu_can_run()


def pyarrow_routes() -> dict:
    """``{bitstream: [PYARROW_NO_GPU]}``: the routing of a read :func:`pyarrow_reads` takes."""
    return {algo.value: [PYARROW_NO_GPU] for algo in Algo}


class Router:
    """Assign jobs to backends per :data:`ROUTES` and run them.

    Parameters
    ----------
    options : Options

    Raises
    ------
    BackendUnavailableError
        ``options.backend`` names a backend that cannot run here, or
        ``options.decode`` is ``"gpu"`` and no GPU backend can run here.
    """

    def __init__(self, options: Options):
        self.options = options
        table = ROUTES[options.backend]
        if options.backend != "auto" and options.backend != "cpu":
            reason = registry.probe(options.backend)
            if reason is not None:
                raise BackendUnavailableError(
                    f"backend {options.backend!r} was requested but is not available: {reason}"
                )
        self._candidates: dict[Algo, list] = {}
        self.unreachable: dict[str, str] = {}
        for algo, names in table.items():
            usable = []
            for name in names:
                if registry.probe(name) is not None or name in self.unreachable:
                    continue
                try:
                    backend = registry.get_backend(name, options)
                except BackendUnavailableError as exc:
                    # The GPU probed fine, but its service cannot be reached
                    # or cannot create the backend: auto reads on the CPU and
                    # says why; a named backend raises.
                    if options.backend != "auto":
                        raise
                    self.unreachable[name] = exc.reason
                    continue
                if algo in backend.algorithms:
                    usable.append(backend)
            if not usable:
                raise BackendUnavailableError(
                    f"no backend of {names} can decompress {algo.value} here"
                )
            self._candidates[algo] = usable
        if options.decode == "gpu" and not self.gpu_backends:
            why = "; ".join(f"{n}: {registry.probe(n) or self.unreachable.get(n, 'not routed')}" for n in GPU_BACKENDS)
            raise BackendUnavailableError(
                f"decode='gpu' was requested but no GPU backend can run here ({why})"
            )

    @classmethod
    def over(cls, options: Options, candidates: dict) -> Router:
        """A router over given backends (``{Algo: [backend, ...]}``), not the registry's.

        For backends the registry does not open: the stand-in engine in a
        service of its own, a benchmark's in-process backend.
        """
        router = cls.__new__(cls)
        router.options = options
        router._candidates = dict(candidates)
        router.unreachable = {}
        return router

    def describe(self) -> dict:
        """``{bitstream: [backend names in order]}`` as routed here."""
        return {algo.value: [b.name for b in backends] for algo, backends in self._candidates.items()}

    @property
    def gpu_backends(self) -> list[str]:
        """Names of the GPU backends this router hands work to (empty: none)."""
        names = {b.name for backends in self._candidates.values() for b in backends}
        return [n for n in GPU_BACKENDS if n in names]

    @property
    def primary(self):
        """The backend that takes most work (its host buffers are used)."""
        return self._candidates[Algo.SNAPPY][0]

    def backend_for(self, job: Job):
        for backend in self._candidates[job.algo]:
            if backend.max_job_bytes is None or job.dst_size <= backend.max_job_bytes:
                return backend
        raise BackendUnavailableError(
            f"no backend accepts a {job.algo.value} job of {job.dst_size} bytes", job.location
        )

    def _assign(self, table: JobTable) -> tuple[dict[int, Any], dict[int, JobTable]]:
        """Each job to the first of its bitstream's backends that takes its size (:meth:`backend_for`).

        Returns ``({key: backend}, {key: its jobs})`` in the order of their
        first jobs.

        Raises
        ------
        BackendUnavailableError
            No backend takes a job (the first such job is named).
        """
        codes, sizes = table.algo_codes(), table.rows["dst_size"]
        owner = np.full(len(table), -1, dtype=np.int64)
        chosen: list = []
        for code in np.unique(codes).tolist():
            todo = codes == code
            for backend in self._candidates[ALGOS[code]]:
                fits = todo if backend.max_job_bytes is None else todo & (sizes <= backend.max_job_bytes)
                if fits.any():
                    slot = next((i for i, b in enumerate(chosen) if b is backend), len(chosen))
                    if slot == len(chosen):
                        chosen.append(backend)
                    owner[fits] = slot
                    todo = todo & ~fits
        if (owner < 0).any():
            self.backend_for(table.job(int(np.argmax(owner < 0))))  # raises, naming the job
        first = {int(slot): at for at, slot in zip(*np.unique(owner, return_index=True)[::-1])}
        backends: dict[int, Any] = {}
        groups: dict[int, JobTable] = {}
        for slot in sorted(first, key=lambda k: first[k]):
            backend = chosen[slot]
            backends[id(backend)] = backend
            groups[id(backend)] = table.take(owner == slot)
        return backends, groups

    def run(self, jobs: Sequence[Job] | JobTable, src: memoryview, dst: memoryview,
            report: ReadReport) -> list[str]:
        """Decompress a batch's ``jobs``, one ``decompress`` per backend; fill ``report``.

        Returns
        -------
        list of str
            Why the GPU service was lost under a group of the batch whose
            output the CPU made instead (:class:`GpuBatchFailedError`); empty
            when none was. The batch is then best decoded without that
            service, which restarts.

        Raises
        ------
        ChecksumError
            A page's CRC-32, gzip CRC-32 or Zstd content checksum does not
            match (never retried on the CPU).
        CorruptPageError
            A page does not decompress to its declared size (or, for GPU
            backends with ``cpu_retry``, not even on the CPU).
        """
        for name, why in self.unreachable.items():
            report.unreachable.setdefault(name, why)
        lost: list[str] = []
        table = as_table(jobs)
        backends, groups = self._assign(table)
        # One backend after the other, GPU groups first and the CPU last:
        # each call returns only when its outputs are in dst, so the groups
        # do not overlap (a CPU group waits for the GPU call before it).
        for key in sorted(groups, key=lambda k: backends[k].name == "cpu"):
            backend, group = backends[key], groups[key]
            # A backend whose LZ4 decoder accepts blocks LZ4's reference refuses:
            # the group's LZ4 blocks are walked on the host before its call.
            check_lz4_blocks(group, src, backend)
            t0 = time.perf_counter()
            try:
                if backend.overwrites_gaps and len(groups) > 1:
                    # A GPU backend copies outputs back in runs that include
                    # the bytes between them: keep other backends' outputs out.
                    rows = np.concatenate([g.rows for k, g in groups.items() if k != key])
                    others = np.stack([rows["dst_offset"], rows["dst_offset"] + rows["dst_size"]], axis=1)
                    redone = backend.decompress(group, src, dst, protect=others[np.lexsort(others.T[::-1])])
                else:
                    redone = backend.decompress(group, src, dst)
                if redone:
                    report.redone[backend.name] += redone
            except ServiceUnreachable as exc:
                if self.options.backend != "auto":
                    raise
                # The service was lost and cannot be started again: the CPU reads.
                self.unreachable[backend.name] = exc.reason
                report.unreachable.setdefault(backend.name, exc.reason)
                for job in group:
                    decompress_one(job, src, dst)
                _account(report, "cpu", group, time.perf_counter() - t0)
                continue
            except GpuBatchFailedError as exc:
                # The service was lost under pages the CPU decodes; the CPU's output is in dst.
                # The text, not the exception: a handler that keeps records (pytest's does) would
                # keep its frames, and with them the batch's shared buffers.
                report.retries.append(str(exc))
                logger.warning("decompressed on the CPU: %s", report.retries[-1])
                lost.append(exc.reason)
                _account(report, "cpu", group, time.perf_counter() - t0)
                continue
            except CorruptPageError as exc:
                # A checksum that fails is the data's fault, not the GPU's:
                # the CPU would find the same bytes.
                if backend.name == "cpu" or not self.options.cpu_retry or isinstance(exc, ChecksumError):
                    raise
                report.retries.append(str(exc))
                for job in group:  # the backend's jobs are redone as a whole on the CPU
                    decompress_one(job, src, dst)
            elapsed = time.perf_counter() - t0
            _account(report, backend.name, group, elapsed)
        report.batches += 1
        return lost


def _account(report: ReadReport, backend: str, jobs: JobTable, seconds: float) -> None:
    r = jobs.rows
    codecs = jobs.codecs if jobs.codecs is not None else np.zeros(len(r), np.int64)
    total = int(r["dst_size"].sum()) or 1
    for codec in np.unique(codecs).tolist():
        mine = codecs == codec
        ubytes = int(r["dst_size"][mine].sum())
        # a page of several jobs counts once
        report.add_jobs(backend, CODEC_NAMES.get(codec, str(codec)), len(np.unique(jobs.pages[mine])),
                        int(mine.sum()), int(r["src_size"][mine].sum()), ubytes, seconds * ubytes / total)
