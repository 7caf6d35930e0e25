"""One stream with its own arena and scratch: runs one merged batch at a time.

A :class:`Slot` executes a batch in stream order: inputs in, the backend's
launch (its metadata copy and its batched call or calls), outputs out, one
synchronisation, then the launch's per-job results are read on the host.
Everything of a batch is on the slot's one stream (gpu-facts.md §2 hazard a).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from .memory import DeviceArena, HostScratch, address_of
from .staging import DEVICE_ALIGN, Part, place

__all__ = ["Slot", "Launcher", "Failure"]


@dataclass
class Failure:
    """A job whose output is wrong: its actual size, and the status text if any."""

    job: object
    actual: int
    status: str | None


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
        scratch_off = plan.nbytes
        base = self.arena.ensure(scratch_off + dev_bytes + DEVICE_ALIGN)
        host = self.scratch.ensure(max(host_bytes, 1))
        src_addr = [address_of(p.src) for p in parts]
        dst_addr = [address_of(p.dst) for p in parts]
        for p, host_off, dev_off, n in plan.h2d:
            if n:
                ops.htod(base + dev_off, src_addr[p] + host_off, n, stream)
        src_ptrs = plan.src_dev + np.uint64(base)
        dst_ptrs = plan.dst_dev + np.uint64(base)
        collect = self.launcher.launch(state, stream, src_ptrs, dst_ptrs, base + scratch_off, host)
        for p, dev_off, host_off, n in plan.d2h:
            if n:
                ops.dtoh(dst_addr[p] + host_off, base + dev_off, n, stream)
        ops.synchronize(stream)
        actual, status = collect()
        failures: list[list[Failure]] = [[] for _ in parts]
        expected = np.fromiter((j.dst_size for j in plan.jobs), dtype=np.int64, count=len(plan.jobs))
        bad = np.nonzero((actual.astype(np.int64) != expected) | (status != 0))[0]
        for k in bad:
            text = self.launcher.status_text(int(status[k])) if status[k] != 0 else None
            failures[int(plan.part_of[k])].append(Failure(plan.jobs[k], int(actual[k]), text))
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
