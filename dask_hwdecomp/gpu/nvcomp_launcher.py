"""nvCOMP's batched C API as a launcher: one GPU call, fully asynchronous.

:class:`NvcompLauncher` plugs into a :class:`~dask_hwdecomp.gpu.stream_runner.StreamRunner`.
Per GPU call (one stream): the inputs go to the device in a few copies
(:mod:`dask_hwdecomp.gpu.staging`), one pinned metadata block goes in
(input pointers and sizes, output pointers and capacities), then one
``nvcompBatched<Fmt>DecompressAsync`` per bitstream present, then the per-page
actual sizes and statuses and the outputs come back, and the stream is
synchronised once. Known output sizes mean nvCOMP never has to size outputs
itself (no hidden synchronisation). Every page's status and size is checked,
and the call's CRC-32s run in the same stream (:mod:`dask_hwdecomp.gpu.checksums`).

Bitstreams: SNAPPY (raw block), DEFLATE (raw RFC 1951, inputs copied to
4-byte aligned addresses), LZ4 (block), ZSTD (frames).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..jobs import ALGOS, Algo
from ..rounding import round_up
from .errors import nvcomp_status_text
from .staging import DEVICE_ALIGN
from .stream_runner import Prepared

__all__ = ["NvcompLauncher"]

_FMT = {Algo.SNAPPY: "Snappy", Algo.DEFLATE: "Deflate", Algo.LZ4: "LZ4", Algo.ZSTD: "Zstd"}
_ORDER = {a: i for i, a in enumerate(_FMT)}
_MAX_CHUNK = (1 << 31) - 1  # the smallest of the formats' decompression limits


class _Group(NamedTuple):
    """Consecutive jobs of one bitstream: one nvCOMP call."""

    algo: Algo
    start: int  # index of its first job in the call
    num_jobs: int
    biggest: int  # the largest output: nvCOMP sizes its temp space by it and the total
    total: int  # all outputs together


class _State(NamedTuple):
    """What :meth:`NvcompLauncher.prepare` hands to :meth:`NvcompLauncher.launch`."""

    rows: np.ndarray
    groups: list[_Group]
    temp_bytes: int
    meta_bytes: int


class NvcompLauncher:
    """Plugs nvCOMP's batched calls into a :class:`~dask_hwdecomp.gpu.stream_runner.StreamRunner`.

    Parameters
    ----------
    lib : NvcompLib
    ops : CudaOps
    """

    algorithms = frozenset(_FMT)
    max_job_bytes = None
    max_input_bytes = _MAX_CHUNK
    # nvCOMP is given each output's capacity and reports a per-page status.
    contains_failures = True
    guard_bytes = 0
    # nvCOMP 6.0 decodes a Zstd frame whose content checksum does not match
    # with status 0 (measured on the H200): the backend checks it on the host.
    verifies_zstd_checksum = False
    # nvCOMP decodes an over-read Huffman literal stream with status 0, reading
    # zeros below it (H100, 55 of 55 crafted frames): the backend walks the
    # streams of every Zstd page beside the call.
    walks_huffman_streams = True

    def __init__(self, lib, ops):
        self.lib = lib
        self.ops = ops
        self._align = {}
        for algo, fmt in _FMT.items():
            align = lib.alignments(fmt)
            if align.output != 1:
                # Outputs sit at the reader's byte offsets; nvCOMP 6 needs 1.
                raise RuntimeError(f"nvCOMP {fmt} wants {align.output}-byte aligned outputs; only 1 is supported")
            self._align[algo] = align

    def input_align(self, algo) -> int:
        return self._align[algo].input

    def order(self, algo) -> int:
        return _ORDER.get(algo, len(_ORDER))

    @staticmethod
    def status_text(status: int) -> str:
        return nvcomp_status_text(status)

    def prepare(self, rows: np.ndarray, stream) -> Prepared:
        n = len(rows)
        groups: list[_Group] = []
        codes, sizes = rows["algo"], rows["dst_size"]
        heads = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]]) if n else np.zeros(0, np.int64)
        ends = np.r_[heads[1:], n].astype(np.int64)
        for start, end in zip(heads.tolist(), ends.tolist()):
            group = sizes[start:end]
            groups.append(_Group(ALGOS[int(codes[start])], start, end - start, int(group.max()), int(group.sum())))
        temp = 0
        for g in groups:
            temp = max(temp, self.lib.temp_bytes(_FMT[g.algo], g.num_jobs, g.biggest, g.total, stream.handle))
        meta = round_up(32 * n, DEVICE_ALIGN) + round_up(8 * n, DEVICE_ALIGN) + round_up(4 * n, DEVICE_ALIGN)
        return Prepared(device_bytes=meta + temp + 256, host_bytes=32 * n + 12 * n,
                        state=_State(rows, groups, temp, meta))

    def launch(self, state: _State, stream, src_ptrs, dst_ptrs, scratch: int, host):
        rows, temp_bytes, meta = state.rows, state.temp_bytes, state.meta_bytes
        n = len(rows)
        host_ptr, host_view = host
        up = np.frombuffer(host_view, dtype=np.uint64, count=4 * n).reshape(4, n)
        up[0] = src_ptrs
        up[1] = rows["src_size"]
        up[2] = dst_ptrs
        up[3] = rows["dst_size"]
        d_src, d_src_sizes, d_dst, d_caps = (scratch + k * 8 * n for k in range(4))
        d_actual = scratch + round_up(32 * n, DEVICE_ALIGN)
        d_status = d_actual + round_up(8 * n, DEVICE_ALIGN)
        temp = scratch + meta
        ops = self.ops
        ops.htod(scratch, host_ptr, 32 * n, stream)
        for g in state.groups:
            start = g.start
            self.lib.decompress(
                _FMT[g.algo],
                src_ptrs=d_src + 8 * start,
                src_sizes=d_src_sizes + 8 * start,
                dst_caps=d_caps + 8 * start,
                dst_actual=d_actual + 8 * start,
                count=g.num_jobs,
                temp=temp,
                temp_bytes=temp_bytes,
                dst_ptrs=d_dst + 8 * start,
                statuses=d_status + 4 * start,
                stream=stream.handle,
            )
        back = host_ptr + 32 * n
        ops.dtoh(back, d_actual, 8 * n, stream)
        ops.dtoh(back + 8 * n, d_status, 4 * n, stream)

        def collect():
            actual = np.frombuffer(host_view, dtype=np.uint64, count=n, offset=32 * n).copy()
            status = np.frombuffer(host_view, dtype=np.int32, count=n, offset=40 * n).copy()
            return actual, status

        return collect
