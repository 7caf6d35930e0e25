"""The Huffman literal streams of a GPU call's Zstd pages, walked beside nvCOMP.

nvCOMP decodes a Huffman literal stream whose literals need more bits than
it holds (an over-read, faulty per RFC 8878 4.2.2) with status 0, reading
zeros below the stream, where libzstd's fast path (pyarrow's) reads the
previous stream's last bytes: the page comes back as other rows than
pyarrow's. :class:`StreamWalks` finds such pages in the call itself: the
host finds each part's streams before the call, on the thread that made
the part (:func:`part_streams` over :func:`~dask_hwdecomp.format.zstd_streams.pages_streams`:
frames, blocks and Huffman trees, no literal), the call's dispatcher lays
them out, and a kernel walks them, a block of threads per stream
(:mod:`.zstd_walk_kernel`), over the inputs already on the device: on the
side stream the runner forks from the call's once its inputs are in, beside
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
from typing import NamedTuple

import numpy as np

from ..format.zstd_streams import NO_END_MARK, pages_streams, walk_streams
from ..gpu.checksums import Mismatch
from ..gpu.table_kernel import TableKernel
from ..jobs import ALGOS, Algo, JobTable

__all__ = ["HUFFMAN", "PartStreams", "StreamWalks", "part_streams", "warm_walks"]

HUFFMAN = "huffman"  # the kind of a stream walk's mismatch
_ZSTD = ALGOS.index(Algo.ZSTD)


class PartStreams(NamedTuple):
    """The Huffman literal streams of one part's Zstd pages (:func:`part_streams`), each tree resolved.

    Attributes
    ----------
    member, start, end, literals, lengths_at, table_log : numpy.ndarray of int64
        One row per stream: its page's row in the part's job table, its
        bytes ``src[start:end]`` of the part's source, the literals it must
        decode, where its tree's table starts in ``lengths``, and the
        tree's longest code in bits.
    lengths : numpy.ndarray of uint8
        The part's trees' tables of code lengths.
    bad : numpy.ndarray of int64
        Rows of pages with a Huffman tree libzstd refuses (their later
        streams are not listed).
    """

    member: np.ndarray
    start: np.ndarray
    end: np.ndarray
    literals: np.ndarray
    lengths_at: np.ndarray
    table_log: np.ndarray
    lengths: np.ndarray
    bad: np.ndarray


def part_streams(jobs: JobTable, src) -> PartStreams:
    """Find the streams of the Zstd jobs of one part (``src``: its source buffer).

    The host's share of the walk, done by the part's own caller before the
    call (:meth:`GpuBackend.decompress <dask_hwdecomp.decompress.gpu_backend.GpuBackend.decompress>`:
    the request's thread, the GIL released), so that a call's dispatcher
    only lays the streams out on the device.
    """
    rows = jobs.rows
    zstd = np.flatnonzero(rows["algo"] == _ZSTD)
    pre = rows["preamble"][zstd]
    s = pages_streams(np.frombuffer(src, np.uint8), rows["src_offset"][zstd] + pre, rows["src_size"][zstd] - pre)
    return PartStreams(member=zstd[s.page], start=s.start, end=s.end, literals=s.literals,
                       lengths_at=s.lengths_at[s.tree], table_log=s.table_log[s.tree], lengths=s.lengths,
                       bad=zstd[s.bad])


def _findings(at: np.ndarray, left: np.ndarray, bad: np.ndarray) -> dict[int, Mismatch]:
    """The first stream not consumed exactly of each page (``at``: each stream's call position), and bad pages."""
    out: dict[int, Mismatch] = {}
    for k, bits in zip(at[left != 0].tolist(), left[left != 0].tolist()):
        out.setdefault(k, Mismatch(HUFFMAN, 0, bits))
    for k in bad.tolist():
        out.setdefault(k, Mismatch(HUFFMAN, 0, NO_END_MARK))
    return out


class _CallStreams(NamedTuple):
    """The streams of a call's parts, laid end to end (``at``: each one's call position)."""

    at: np.ndarray
    start: np.ndarray  # in its part's source
    end: np.ndarray
    literals: np.ndarray
    lengths_at: np.ndarray  # in ``lengths``
    table_log: np.ndarray
    lengths: np.ndarray
    bad: np.ndarray  # call positions
    sources: list  # per part with streams: (uint8 source, first stream, streams)


def _call_streams(parts: Sequence, part_of: np.ndarray, members: np.ndarray, walked: Sequence[int]) -> _CallStreams:
    """The :class:`PartStreams` of the parts ``walked`` (found now where the caller did not) at the call's positions.

    ``part_of`` and ``members``: each call position's part and row there.
    A stream of a page the call does not run (its page CRC failed) gets
    position -1.
    """
    counts = np.array([len(p.jobs) for p in parts], np.int64)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    position = np.full(int(counts.sum()), -1, np.int64)
    position[first[part_of] + members] = np.arange(len(members), dtype=np.int64)
    found, bad, sources, shift, at = [], [], [], 0, 0
    for p in walked:
        part = parts[p]
        ps = part.beside if isinstance(part.beside, PartStreams) else part_streams(part.jobs, part.src)
        where = position[first[p] + ps.member]
        found.append((where, ps, shift))
        bad.append(position[first[p] + ps.bad])
        sources.append((np.frombuffer(part.src, np.uint8), at, len(where)))
        shift += len(ps.lengths)
        at += len(where)
    if not found:
        none = np.zeros(0, np.int64)
        return _CallStreams(none, none, none, none, none, none, np.zeros(0, np.uint8), none, [])

    def cat(column):
        return np.concatenate([column(ps) for _, ps, _ in found])

    bad_at = np.concatenate(bad)
    return _CallStreams(at=np.concatenate([w for w, _, _ in found]), start=cat(lambda ps: ps.start),
                        end=cat(lambda ps: ps.end), literals=cat(lambda ps: ps.literals),
                        lengths_at=np.concatenate([ps.lengths_at + s for _, ps, s in found]),
                        table_log=cat(lambda ps: ps.table_log), lengths=cat(lambda ps: ps.lengths),
                        bad=bad_at[bad_at >= 0], sources=sources)


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

    @staticmethod
    def prepare(jobs: JobTable, src) -> PartStreams | None:
        """The streams of a part's Zstd pages (:func:`part_streams`), or None when it has none."""
        return part_streams(jobs, src) if (jobs.rows["algo"] == _ZSTD).any() else None

    def queue(self, parts: Sequence, rows: np.ndarray, part_of: np.ndarray, members: np.ndarray,
              src_ptrs: np.ndarray, stream) -> Callable[[], dict[int, Mismatch]]:
        """Queue the walk of the call's streams; ``collect()`` names the pages at fault.

        Raises
        ------
        CudaError
            A copy or the launch failed.
        """
        zstd = rows["algo"] == _ZSTD
        c = _call_streams(parts, part_of, members, np.unique(part_of[zstd]).tolist())
        keep = c.at >= 0
        at = c.at[keep]
        m = len(at)
        self.streams_walked += m
        if not m:
            return lambda: _findings(at, np.zeros(0, np.int64), c.bad)
        if not self.on_device:
            left = np.concatenate([
                walk_streams(src, c.start[a : a + n], c.end[a : a + n], c.literals[a : a + n], np.arange(n),
                             c.lengths, c.lengths_at[a : a + n], c.table_log[a : a + n])
                for src, a, n in c.sources])[keep]
            return lambda: _findings(at, left, c.bad)
        ptrs = src_ptrs.astype(np.int64)
        window = int(ptrs[zstd].min())
        span = int((ptrs[zstd] + rows["src_size"][zstd]).max()) - window
        # A stream's place in the window: its page's input there, and the same distance into it.
        delta = ptrs[at] - window - rows["src_offset"][at]
        table = np.stack([c.start[keep] + delta, c.end[keep] + delta, c.literals[keep], c.lengths_at[keep],
                          c.table_log[keep]])
        from .zstd_walk_kernel import LANES, walk_kernel

        if self._kernel is None:
            self._kernel = TableKernel(self.ops)
        walked = self._kernel.queue(walk_kernel, LANES, window, span, table, c.lengths, stream, block_per_row=True)
        return lambda: _findings(at, walked(), c.bad)

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
