"""The Huffman literal streams of a GPU call's Zstd pages, walked beside nvCOMP.

nvCOMP decodes a Huffman literal stream whose literals need more bits than
it holds (an over-read, faulty per RFC 8878 4.2.2) with status 0, reading
zeros below the stream, where libzstd's fast path (pyarrow's) reads the
previous stream's last bytes: the page comes back as other rows than
pyarrow's. :class:`StreamWalks` finds such pages in the call itself: the
host finds the streams (:func:`~dask_hwdecomp.format.zstd_streams.pages_streams`:
frames, blocks and Huffman trees, no literal), and a kernel walks them, one
thread per stream, over the inputs already on the device: on the side
stream the runner forks from the call's once its inputs are in, beside
nvCOMP's decoding (in the call's own stream after nvCOMP's launch where the
ops cannot fork). A backend walks only with ``zstd_stream_walk``. After the call's synchronisation a page with
a stream not consumed exactly fails as a :class:`~dask_hwdecomp.gpu.checksums.Mismatch`
of kind ``"huffman"``, and the backend decodes it again with libzstd.

A host walk of every literal costs about as much as libzstd's whole
decompression or more (0.6 CPU s per GB of Arrow on the bench's lineitem
table, 6 on its high-entropy one); finding the streams costs 0.01 and
0.02 (``benchmarks/zstd_streams_cost.py``). Where no device runs kernels (the ops of the
tests' stand-ins) the walk runs on the host, compiled from the same text.

Every step is compiled when the backend is created (:func:`warm_walks`):
a compile inside a call blows its deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..format.zstd_streams import NO_END_MARK, pages_streams, walk_streams
from ..gpu.checksums import Mismatch
from ..gpu.table_kernel import TableKernel
from ..jobs import ALGOS, Algo

__all__ = ["HUFFMAN", "StreamWalks", "warm_walks", "call_streams"]

HUFFMAN = "huffman"  # the kind of a stream walk's mismatch
_ZSTD = ALGOS.index(Algo.ZSTD)


def call_streams(parts: Sequence, rows: np.ndarray, part_of: np.ndarray) -> tuple[list, np.ndarray]:
    """Per part holding Zstd jobs of the call: ``(src, streams, jobs)``, and every Zstd job's position.

    ``streams`` is the part's :class:`~dask_hwdecomp.format.zstd_streams.ZstdStreams`
    over its source ``src`` (a uint8 array), ``jobs`` the call positions
    of its pages (``streams.page`` indexes it).
    """
    zstd = np.flatnonzero(rows["algo"] == _ZSTD)
    found = []
    for p in np.unique(part_of[zstd]).tolist():
        jobs = zstd[part_of[zstd] == p]
        src = np.frombuffer(parts[p].src, np.uint8)
        pre = rows["preamble"][jobs]
        found.append((src, pages_streams(src, rows["src_offset"][jobs] + pre, rows["src_size"][jobs] - pre), jobs))
    return found, zstd


def _findings(jobs: np.ndarray, left: np.ndarray, bad: np.ndarray) -> dict[int, Mismatch]:
    """The first stream not consumed exactly of each page (``jobs``: each stream's call position), and bad pages."""
    out: dict[int, Mismatch] = {}
    for k, bits in zip(jobs[left != 0].tolist(), left[left != 0].tolist()):
        out.setdefault(k, Mismatch(HUFFMAN, 0, bits))
    for k in bad.tolist():
        out.setdefault(k, Mismatch(HUFFMAN, 0, NO_END_MARK))
    return out


class StreamWalks:
    """The stream walk of a runner's calls (a :class:`~dask_hwdecomp.gpu.stream_runner.Beside`).

    Parameters
    ----------
    ops : CudaOps or a stand-in
        With ``launch_kernel`` and ``device_array`` the walk is a kernel in
        the call's stream; without, it runs on the host when queued.
    """

    def __init__(self, ops) -> None:
        self.ops = ops
        self.on_device = hasattr(ops, "launch_kernel")
        self._kernel: TableKernel | None = None
        self.streams_walked = 0

    def queue(self, parts: Sequence, rows: np.ndarray, part_of: np.ndarray, src_ptrs: np.ndarray,
               stream) -> Callable[[], dict[int, Mismatch]]:
        """Find the call's streams and queue their walk; ``collect()`` names the pages at fault.

        Raises
        ------
        CudaError
            A copy or the launch failed.
        """
        found, zstd = call_streams(parts, rows, part_of)
        bad = np.concatenate([jobs[s.bad] for _, s, jobs in found]) if found else np.zeros(0, np.int64)
        m = sum(len(s.start) for _, s, _ in found)
        self.streams_walked += m
        if not m:
            return lambda: _findings(np.zeros(0, np.int64), np.zeros(0, np.int64), bad)
        stream_jobs = np.concatenate([jobs[s.page] for _, s, jobs in found])
        if not self.on_device:
            left = np.concatenate([walk_streams(src, s.start, s.end, s.literals, s.tree, s.lengths, s.lengths_at,
                                                s.table_log) for src, s, _ in found])
            return lambda: _findings(stream_jobs, left, bad)
        return self._queue(found, zstd, rows, src_ptrs, stream, stream_jobs, bad)

    def _queue(self, found, zstd, rows, src_ptrs, stream, stream_jobs, bad):
        """The kernel over the call's inputs on the device (:class:`~dask_hwdecomp.gpu.table_kernel.TableKernel`)."""
        ptrs = src_ptrs.astype(np.int64)
        window = int(ptrs[zstd].min())
        span = int((ptrs[zstd] + rows["src_size"][zstd]).max()) - window
        table = []
        lengths = []
        shift = 0
        for _, s, jobs in found:
            # A stream's place in the window: its page's input there, and the same distance into it.
            delta = (ptrs[jobs] - window - rows["src_offset"][jobs])[s.page]
            table.append(np.stack([s.start + delta, s.end + delta, s.literals, s.lengths_at[s.tree] + shift,
                                   s.table_log[s.tree]]))
            lengths.append(s.lengths)
            shift += len(s.lengths)
        from .zstd_walk_kernel import THREADS, walk_kernel

        if self._kernel is None:
            self._kernel = TableKernel(self.ops)
        left = self._kernel.queue(walk_kernel, THREADS, window, span, np.concatenate(table, axis=1),
                                  np.concatenate(lengths), stream)
        return lambda: _findings(stream_jobs, left(), bad)

    def close(self) -> None:
        """Free the kernel's scratch (the stream's work is done)."""
        kernel, self._kernel = self._kernel, None
        if kernel is not None:
            kernel.close()


def warm_walks(on_device: bool) -> None:
    """Compile every step a call runs, for the argument types calls pass.

    :func:`~dask_hwdecomp.format.zstd_streams.pages_streams` for writable and
    read-only sources (a caller's buffer may be either), and the walk: the
    kernel ``on_device`` (for the arrays :class:`~dask_hwdecomp.gpu.table_kernel.TableKernel`
    passes), else the host walk (for both sources too).
    Compiling inside a call would take seconds of its deadline.
    """
    none = np.zeros(0, np.int64)
    for src in (np.zeros(1, np.uint8), np.frombuffer(b"\x00", np.uint8)):
        s = pages_streams(src, none, none)
        if not on_device:
            walk_streams(src, s.start, s.end, s.literals, s.tree, s.lengths, s.lengths_at, s.table_log)
    if on_device:
        from numba import types

        from ..gpu.simulator import simulated
        from .zstd_walk_kernel import walk_kernel

        if simulated():  # numba's CUDA simulator runs the kernel as Python: nothing to compile
            return

        u8, i64 = types.Array(types.uint8, 1, "C"), types.Array(types.int64, 1, "C")
        walk_kernel.compile((u8, i64, i64, i64, i64, i64, u8, i64))
