"""One stream with its own arena and scratch: runs one merged batch at a time.

A :class:`Slot` executes a batch in stream order: inputs in, the backend's
launch (its metadata copy and its batched call or calls), the batch's CRC-32
checks (:mod:`dask_hwdecomp.gpu.checksums`), outputs out, one
synchronisation, then the per-job results are read on the host.
Everything of a batch is on the slot's one stream (gpu-facts.md §2 hazard a).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from .checksums import CrcRun, Mismatch, crc_checks
from .memory import DeviceArena, HostScratch, address_of
from .staging import DEVICE_ALIGN, Part, place

__all__ = ["Slot", "Launcher", "Failure"]


@dataclass
class Failure:
    """A job whose output is wrong: its actual size, the status text if any,
    and the CRC-32 that did not match if one did (which then explains it)."""

    job: object
    actual: int
    status: str | None
    checksum: Mismatch | None = None


class Launcher(Protocol):
    """What a GPU backend plugs into a slot."""

    def input_align(self, algo) -> int: ...

    def order(self, job) -> object: ...

    def prepare(self, jobs: Sequence, stream) -> tuple[int, int, object]:
        """(device scratch bytes, pinned host bytes, state) for ``jobs``."""
        ...

    def launch(self, state, stream, src_ptrs: np.ndarray, dst_ptrs: np.ndarray,
               scratch: int, host: tuple[int, memoryview]) -> Callable[[], np.ndarray]:
        """Queue the work; returns ``collect()`` giving per-job (actual, status)."""
        ...


def _up(n: int, a: int = DEVICE_ALIGN) -> int:
    return (n + a - 1) // a * a


class Slot:
    """A stream, a device arena and a pinned scratch block.

    Parameters
    ----------
    ops : CudaOps or a stand-in
    launcher : Launcher

    Raises
    ------
    CudaError
        The stream cannot be created.
    """

    def __init__(self, ops, launcher):
        self.ops = ops
        self.launcher = launcher
        self.stream = ops.new_stream()
        try:
            self.arena = DeviceArena(ops.alloc_device, self.stream)
            self.scratch = HostScratch(ops.alloc_host)
        except BaseException:
            self.stream.close()
            raise

    def run(self, parts: Sequence[Part]) -> list[list[Failure]]:
        """Decompress a batch; per part, the jobs that failed (empty: all good).

        Raises
        ------
        CudaError, NvcompError
            The batch as a whole failed.
        """
        ops, stream = self.ops, self.stream
        plan = place(parts, self.launcher.input_align, self.launcher.order)
        dev_bytes, host_bytes, state = self.launcher.prepare(plan.jobs, stream)
        crcs = CrcRun(crc_checks(plan), getattr(ops, "checksummer", None))
        scratch_off = plan.nbytes
        crc_dev_off = scratch_off + _up(dev_bytes)
        crc_host_off = _up(host_bytes, 8)
        base = self.arena.ensure(crc_dev_off + crcs.device_bytes + DEVICE_ALIGN)
        host = self.scratch.ensure(max(crc_host_off + crcs.host_bytes, 1))
        src_addr = [address_of(p.src) for p in parts]
        dst_addr = [address_of(p.dst) for p in parts]
        for p, host_off, dev_off, n in plan.h2d:
            if n:
                ops.htod(base + dev_off, src_addr[p] + host_off, n, stream)
        src_ptrs = plan.src_dev + np.uint64(base)
        dst_ptrs = plan.dst_dev + np.uint64(base)
        collect = self.launcher.launch(state, stream, src_ptrs, dst_ptrs, base + scratch_off, host)
        crcs.launch(ops, stream, base, base + crc_dev_off, host[0] + crc_host_off, host[1][crc_host_off:])
        for p, dev_off, host_off, n in plan.d2h:
            if n:
                ops.dtoh(dst_addr[p] + host_off, base + dev_off, n, stream)
        ops.synchronize(stream)
        actual, status = collect()

        def host_bytes_of(check):
            job, part = plan.jobs[check.index], parts[int(plan.part_of[check.index])]
            if check.kind == "page":
                return part.src[job.page_crc.offset : job.page_crc.offset + job.page_crc.size]
            return part.dst[job.dst_offset : job.dst_offset + job.dst_size]

        mismatched = crcs.mismatches(host_bytes_of)
        failures: list[list[Failure]] = [[] for _ in parts]
        expected = np.fromiter((j.dst_size for j in plan.jobs), dtype=np.int64, count=len(plan.jobs))
        bad = set(np.nonzero((actual.astype(np.int64) != expected) | (status != 0))[0].tolist())
        for k in sorted(bad | set(mismatched)):
            text = self.launcher.status_text(int(status[k])) if status[k] != 0 else None
            checks = {m.kind: m for m in mismatched.get(k, ())}
            # Bad stored bytes explain everything after them; a gzip CRC
            # speaks only for an output of the right size.
            why = checks.get("page") or (None if k in bad else checks.get("gzip"))
            failures[int(plan.part_of[k])].append(Failure(plan.jobs[k], int(actual[k]), text, why))
        return failures

    def stats(self) -> dict:
        return {
            "arena_bytes": self.arena.nbytes,
            "arena_allocations": self.arena.allocations,
            "scratch_allocations": self.scratch.allocations,
        }

    def close(self) -> None:
        """Free the arena, the scratch and the stream (after its work is done)."""
        try:
            self.ops.synchronize(self.stream)
        finally:
            try:
                self.arena.close()
                self.scratch.close()
            finally:
                self.stream.close()
