"""The CPU backend: a thread pool over cramjam's codecs.

cramjam decompresses straight into a caller's buffer, reports how many bytes
it wrote, never writes past the buffer, and releases the GIL, so every job
lands at its final offset with its size checked and no copy. It is the
reference the GPU backends are tested against, and it serves the codecs no
GPU decodes (BROTLI, multi-member GZIP pages).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import cramjam
import numpy as np

from ..errors import ChecksumError, CorruptPageError
from ..format.pages import check_page_crc
from ..jobs import Algo, Job, JobTable
from .protocol import gzip_crc_error, size_mismatch

__all__ = ["CpuBackend", "decompress_one"]

_INTO = {
    Algo.SNAPPY: cramjam.snappy.decompress_raw_into,
    Algo.DEFLATE: cramjam.deflate.decompress_into,
    Algo.GZIP: cramjam.gzip.decompress_into,
    Algo.LZ4: cramjam.lz4.decompress_block_into,
    Algo.ZSTD: cramjam.zstd.decompress_into,
    Algo.BROTLI: cramjam.brotli.decompress_into,
}

# Jobs are grouped into tasks of about this many output bytes, so that tiny
# pages do not cost one pool round trip each.
_TASK_BYTES = 4 << 20


def decompress_one(job: Job, src: memoryview, dst: memoryview, backend: str = "cpu") -> None:
    """Decompress one job on this thread, checking sizes and checksums.

    The page CRC-32 (``verify_checksums``) is checked first, as pyarrow
    does; then the output size, the gzip trailer's CRC-32 (ISIZE is the
    size), and a Zstd frame's content checksum (libzstd checks it).

    Raises
    ------
    ChecksumError
        A checksum does not match.
    CorruptPageError
    """
    if job.page_crc is not None:
        pc = job.page_crc
        check_page_crc(src[pc.offset : pc.offset + pc.size], pc.value, job.location)
    out = dst[job.dst_offset : job.dst_offset + job.dst_size]
    data = src[job.src_offset : job.src_offset + job.src_size]
    try:
        written = _INTO[job.algo](data, out)
    except Exception as exc:  # cramjam.DecompressionError and friends
        text = str(exc)
        if job.algo in (Algo.ZSTD, Algo.GZIP) and "checksum" in text:
            raise ChecksumError(
                f"{job.algo.value} checksum{_zstd_values(job, data, out)} does not match the output "
                f"on {backend} ({text})",
                job.location,
            ) from None
        raise CorruptPageError(
            f"{job.algo.value} stream does not decompress on {backend} ({text})", job.location
        ) from None
    if written != job.dst_size:
        raise size_mismatch(job, written, backend)
    if job.crc32 is not None:
        actual = zlib.crc32(out)
        if actual != job.crc32:
            raise gzip_crc_error(job, actual, backend)


def _zstd_values(job: Job, data, out) -> str:
    """" <expected> (actual <value>)" for a one-frame Zstd page, else "" (names the values).

    libzstd checks the checksum after writing the content, so ``out`` holds
    what the frame decoded to.
    """
    if job.algo is not Algo.ZSTD:
        return ""
    from ..format.xxh64 import xxh64
    from .validate import zstd_frames

    frames: list = []
    try:
        zstd_frames(data, job, frames)
    except CorruptPageError:
        return ""
    if len(frames) != 1 or frames[0][1] is None:
        return ""
    return f" {frames[0][1]:#010x} (actual {xxh64(out) & 0xFFFFFFFF:#010x})"


class _NumpyBuffer:
    def __init__(self, nbytes: int):
        self._array: np.ndarray | None = np.empty(nbytes, dtype=np.uint8)
        self.view: memoryview | None = self._array.data.cast("B")

    def close(self) -> None:
        # Dropped, not released: a slice handed to pyarrow may still be
        # alive; numpy frees the memory when the last view goes.
        self.view = None
        self._array = None


class CpuBackend:
    """Decompress on a pool of CPU threads.

    Parameters
    ----------
    threads : int
        Pool size.
    """

    name = "cpu"
    algorithms = frozenset(Algo)
    max_job_bytes = None
    overwrites_gaps = False  # each job writes its own output alone
    keeps_outputs = False
    lz4_checked = True  # LZ4's reference decoder itself
    deadline_bytes_per_s = None

    def __init__(self, threads: int):
        self.threads = threads
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="hwdecomp-cpu")

    def decompress(self, jobs: Sequence[Job] | JobTable, src: memoryview, dst: memoryview,
                   protect: Sequence[tuple[int, int]] = (), keep: Any = None) -> int:
        """Run ``jobs``; raises the first job's error (in ``jobs`` order); returns 0 (nothing redone).

        ``protect`` needs no care here (each job writes its own output
        alone); ``keep`` must be None (nothing stays on a device).
        """
        if keep is not None:
            raise ValueError("the CPU backend keeps no outputs on a device")
        if not len(jobs):
            return 0
        if self.threads == 1 or len(jobs) == 1:
            for job in jobs:
                decompress_one(job, src, dst)
            return 0
        tasks: list[list[Job]] = [[]]
        size = 0
        for job in jobs:
            if size >= _TASK_BYTES:
                tasks.append([])
                size = 0
            tasks[-1].append(job)
            size += job.dst_size

        def run(group: list[Job]) -> None:
            for job in group:
                decompress_one(job, src, dst)

        futures = [self._pool.submit(run, group) for group in tasks]
        errors = [f.exception() for f in futures]
        for err in errors:
            if err is not None:
                raise err
        return 0

    def host_buffer(self, nbytes: int) -> _NumpyBuffer:
        """A buffer of ordinary memory (the CPU copies nothing to a device)."""
        return _NumpyBuffer(nbytes)

    def register_host(self, ptr: int, nbytes: int) -> None:
        """None: the CPU's copies need no page-locked memory."""
        return None

    def stats(self) -> dict:
        """No counters: the pool keeps no buffers."""
        return {}

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
