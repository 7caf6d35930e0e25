"""What the two GPU backends share: host buffers, parts, the batcher, errors.

A GPU backend is a :class:`GpuBackend` with a *launcher* (the format-specific
batched call, see :class:`dask_hwdecomp.gpu.stream_runner.Launcher`) and an *ops*
object (memory operations; the real CUDA one, or the engine stand-in in CI).
``decompress`` validates every job on the host, cuts the caller's jobs into
parts of at most ``batch_bytes`` of output (:mod:`dask_hwdecomp.budget`),
hands them to the process's batcher (which merges parts of concurrent
callers into one GPU *call* per stream),
and turns per-page failures into :class:`~dask_hwdecomp.errors.CorruptPageError`
naming the page. A backend made with ``redo_on_cpu`` (the engine, whose
operations have no status of their own) first redoes failed pages on the
CPU; only a page the CPU rejects too is an error, and ``decompress``
returns how many pages were redone (the read's report shows them).

With ``zstd_stream_walk``, a launcher that says ``walks_huffman_streams``
(nvCOMP's, for Zstd) gets the Huffman stream walk beside each call (:mod:`.zstd_walks`): a page
with a literal stream not consumed exactly is decoded again with libzstd
(pyarrow's rows, or pyarrow's error naming the page) and counted as
redone. Its steps are compiled when the backend is created.

Checksums, always checked (a failure is :class:`~dask_hwdecomp.errors.ChecksumError`
with the expected and actual values): the gzip trailer's CRC-32 of every raw
deflate output and, with ``verify_checksums``, the Parquet page CRC-32 of
the stored page bytes, both on the device in the call (see
:mod:`dask_hwdecomp.gpu.checksums`); a Zstd frame's content checksum on the
host (XXH64 through libzstd, see :func:`_check_zstd_content`) unless the
launcher says its decoder verifies it. The output size is always checked
(a gzip trailer's ISIZE is the page's size: see ``format/codecs.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ..budget import split_sizes
from ..errors import ChecksumError, CorruptPageError
from ..format.pages import check_page_crc, page_crc_error
from ..format.xxh64 import content_checksum_matches, xxh64
from ..gpu.batcher import Batcher
from ..gpu.memory import PinnedPool
from ..gpu.staging import Part
from ..gpu.stream_runner import StreamRunner
from ..jobs import Algo, Job, JobTable, as_table
from ..options import Options
from .cpu import decompress_one
from .protocol import gzip_crc_error, size_mismatch
from .table_checks import find_suspects
from .validate import check_job, zstd_frames
from .zstd_walks import HUFFMAN, StreamWalks, warm_walks

__all__ = ["GpuBackend", "pinned_cap"]


def pinned_cap(options: Options) -> int:
    """Pinned (or shared) host bytes a backend keeps: ``options.pinned_bytes``, else at least 4 GiB
    or 4 budgets, at most a quarter of RAM.

    The buffers of every task reading at once come from it: past the cap a
    buffer is made and registered with the GPU for one batch and freed after,
    which costs more than its copy. So it does not shrink with the budget.
    """
    if options.pinned_bytes:
        return options.pinned_bytes
    try:
        import os

        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not Linux
        ram = 16 << 30
    return max(256 << 20, min(max(4 << 30, 4 * options.batch_bytes), ram // 4))


class _Open(NamedTuple):
    """What an open backend holds between calls."""

    pool: PinnedPool
    batcher: Batcher


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
    # ``decompress`` can also keep the outputs on the device (``keep``).
    keeps_outputs = True
    lz4_checked = False  # nvCOMP decodes a match before the start; the engine is unverified
    # Hosted in the GPU service, its requests get the service's deadline rule
    # (a stand-in of the tests may declare another rate).
    deadline_bytes_per_s: int | None = None

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
        self._pool: PinnedPool | None = None
        self._batcher: Batcher | None = None
        self.walks_streams = (options.zstd_stream_walk and bool(getattr(launcher, "walks_huffman_streams", False))
                              and Algo.ZSTD in self.algorithms)
        if self.walks_streams:
            # A compile inside a call would blow its deadline.
            warm_walks(on_device=hasattr(ops, "launch_kernel"))
        runners = []
        try:
            self._pool = PinnedPool(ops.alloc_host, pinned_cap(options))
            for _ in range(options.streams):
                runners.append(StreamRunner(ops, launcher, StreamWalks(ops) if self.walks_streams else None))
            self._batcher = Batcher(runners, ops, options.batch_bytes, options.batch_latency_ms / 1000)
        except BaseException:
            for runner in runners:
                runner.close()
            if self._pool is not None:
                self._pool.close()
            raise

    # -- the protocol -------------------------------------------------------

    def decompress(self, jobs: Sequence[Job] | JobTable, src: memoryview, dst: memoryview,
                   protect: Sequence[tuple[int, int]] = (), keep=None) -> int:
        """Decompress ``jobs`` on the GPU; outputs are in ``dst`` on return.

        Parameters
        ----------
        jobs : JobTable or sequence of Job
            A table is checked, cut and placed in array operations (no
            record per job; the GPU service's path).
        src, dst : memoryview
            Host buffers (pinned ones from :meth:`host_buffer` copy fastest).
        protect : sequence of (int, int)
            Sorted ``dst`` ranges holding other backends' outputs: bytes
            between this backend's outputs are overwritten except there.
        keep : Keeper, optional
            Also keeps the outputs on the device, in blocks this
            :class:`~dask_hwdecomp.gpu.stream_runner.Keeper` lends (the GPU
            service's decoder reads them there); a block of a part with a
            failed job is given back, and pages decoded again on the CPU
            after the call (a Zstd content check) are excluded.

        Returns
        -------
        int
            Pages redone on the CPU: those that failed on the GPU
            (``redo_on_cpu``), and those with a Huffman stream not consumed
            exactly (``walks_huffman_streams``).

        Raises
        ------
        ChecksumError
            The first page (in ``jobs`` order) whose checksum (page CRC-32,
            gzip CRC-32, Zstd content checksum) does not match.
        CorruptPageError
            The first page (in ``jobs`` order) that failed host checks, did
            not decompress or decompressed to the wrong size (with
            ``redo_on_cpu``: and failed on the CPU too), or a page whose
            Huffman stream walk failed that libzstd refuses.
        CudaError, NvcompError
            A GPU call failed as a whole.
        """
        table = as_table(jobs)
        if not len(table):
            return 0
        limit = self._launcher.max_input_bytes
        src_len, dst_len = len(src), len(dst)
        suspects = find_suspects(table, src, src_len, dst_len, limit, self.algorithms)
        for k in suspects.rows.tolist():  # the reference names the first bad job, in the caller's order
            _check_on_host(table.job(k), self, src, src_len, dst_len, limit)
        zstd_sums: list[tuple[Job, list]] = []
        if not self._launcher.verifies_zstd_checksum:
            for k in suspects.zstd_summed.tolist():
                job = table.job(k)
                frames: list = []
                zstd_frames(src[job.src_offset : job.src_offset + job.src_size], job, frames)
                zstd_sums.append((job, frames))
        if zstd_sums and keep is not None:
            # Checked on the host after the call: every output comes back.
            keep.device_only = np.zeros((0, 2), np.int64)
        spans = split_sizes(table.rows["dst_size"], self.options.batch_bytes)
        parts = [Part(table.take(slice(a, b)), src, dst, protect, keep=keep) for a, b in spans]
        if self.walks_streams:  # the walk's host share here, on the caller's thread, not the call's dispatcher
            for part in parts:
                part.beside = StreamWalks.prepare(part.jobs, src)
        results = self._open().batcher.run(parts)
        failed = [f for failures in results for f in failures]
        failed.sort(key=lambda f: f.index)
        # A Huffman stream not consumed exactly: libzstd decides (before a later page's failure, after an earlier one's).
        walked = [f for f in failed if f.checksum is not None and f.checksum.kind == HUFFMAN]
        failed = [f for f in failed if f.checksum is None or f.checksum.kind != HUFFMAN]
        first = failed[0].index if failed else len(table)
        self._redo_walked([f for f in walked if f.index < first], src, dst)
        # A checksum that does not match is the data's fault: never redone.
        summed = next((f for f in failed if f.checksum is not None), None)
        if failed and (summed is failed[0] or (summed is not None and self.redo_on_cpu)):
            raise _checksum_error(summed.job, summed.checksum, self.name)
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
        self._redo_walked([f for f in walked if f.index >= first], src, dst)
        _check_zstd_contents(zstd_sums, src, dst, self.name, keep)
        return len(walked) + (len(failed) if self.redo_on_cpu else 0)

    def _redo_walked(self, walked: Sequence, src: memoryview, dst: memoryview) -> None:
        """Decode pages whose Huffman stream walk failed with libzstd, in the caller's order.

        Raises
        ------
        CorruptPageError
            The first page libzstd refuses (pyarrow's error), naming it.
        """
        for f in walked:
            try:
                decompress_one(f.job, src, dst)
            except CorruptPageError as exc:
                raise CorruptPageError(
                    f"{f.job.algo.value} page has a Huffman literal stream not consumed exactly "
                    f"({f.checksum.actual} bits left on {self.name}), and libzstd refuses it: {exc.reason}",
                    f.job.location,
                ) from None

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
        return self._open().pool.get(nbytes)

    def register_host(self, ptr: int, nbytes: int):
        """Page-lock host memory this backend did not allocate.

        Returns
        -------
        HostAllocation
            ``close()`` unregisters it.

        Raises
        ------
        CudaError
        """
        return self._ops.register_host(ptr, nbytes)

    def stats(self) -> dict:
        """Pool and batcher counters (allocations stay flat in steady state)."""
        pool, batcher = self._open()
        out = {f"pinned_{k}": v for k, v in pool.stats().items()}
        out.update(batcher.stats())
        return out

    def _open(self) -> _Open:
        """The pinned pool and the batcher of this open backend."""
        if self._pool is None or self._batcher is None:
            raise RuntimeError(f"the {self.name} backend is closed")
        return _Open(self._pool, self._batcher)

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


def _check_on_host(job: Job, backend: GpuBackend, src, src_len: int, dst_len: int, limit: int) -> None:
    """The reference host checks of one job (:func:`~dask_hwdecomp.decompress.validate.check_job`).

    Raises
    ------
    ChecksumError
        The job's stored page bytes fail their page CRC-32 (named as pyarrow does).
    CorruptPageError
        The job fails a check, or its bitstream is not the backend's.
    """
    if job.algo not in backend.algorithms:
        raise CorruptPageError(f"{job.algo.value} is not decoded by {backend.name}", job.location)
    try:
        check_job(job, src_len, dst_len, src, limit)
    except CorruptPageError:
        pc = job.page_crc
        if pc is not None and 0 <= pc.offset and pc.offset + pc.size <= src_len:
            # Bad stored bytes: say so, as pyarrow does.
            check_page_crc(src[pc.offset : pc.offset + pc.size], pc.value, job.location)
        raise


def _checksum_error(job: Job, mismatch, backend: str) -> ChecksumError:
    if mismatch.kind == "page":
        return page_crc_error(mismatch.expected, mismatch.actual, job.location)
    return gzip_crc_error(job, mismatch.actual, backend)


def _check_zstd_contents(pages: Sequence[tuple[Job, list]], src, dst, backend: str, keep=None) -> None:
    """:func:`_check_zstd_content` of each ``(job, frames)``; a page decoded again on the CPU is not kept.

    The host then holds libzstd's checked output, which need not be the
    GPU's: ``keep`` (the call's :class:`~dask_hwdecomp.gpu.stream_runner.Keeper`)
    excludes it, so a decode reads it from the host.

    Raises
    ------
    ChecksumError
    """
    rewritten = [job for job, frames in pages if _check_zstd_content(job, frames, src, dst, backend)]
    if rewritten and keep is not None:
        keep.exclude(np.array([(j.dst_offset, j.dst_size) for j in rewritten], dtype=np.int64))


def _check_zstd_content(job: Job, frames: list, src, dst, backend: str) -> bool:
    """Check the content checksums of a Zstd page's frames on the host.

    ``frames`` is :func:`~dask_hwdecomp.decompress.validate.zstd_frames`'s
    ``(content_size, checksum)`` per frame. Frame boundaries in the output
    are known when every frame declares its size (or there is one frame);
    otherwise the page is decoded again on the CPU, where libzstd checks.

    Returns
    -------
    bool
        Whether the page's output in ``dst`` was decoded again on the CPU
        (so it is no longer the GPU's).

    Raises
    ------
    ChecksumError
    """
    out = dst[job.dst_offset : job.dst_offset + job.dst_size]
    sizes = [size for size, _ in frames]
    if len(frames) == 1:
        sizes = [job.dst_size]
    elif any(size < 0 for size in sizes) or sum(sizes) != job.dst_size:
        from .cpu import decompress_one  # rare: several frames of undeclared sizes

        decompress_one(job, src, dst, backend)
        return True
    pos = 0
    for n, (size, (_, stored)) in enumerate(zip(sizes, frames)):
        content = out[pos : pos + size]
        pos += size
        if stored is not None and not content_checksum_matches(content, stored):
            actual = xxh64(content) & 0xFFFFFFFF  # only to name it: slow, and rare
            raise ChecksumError(
                f"zstd content checksum {stored:#010x} of frame {n} does not match the output "
                f"({actual:#010x}) on {backend}",
                job.location,
            )
    return False
