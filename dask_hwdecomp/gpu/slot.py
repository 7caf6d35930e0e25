"""One stream with its own arena and scratch: runs one merged batch at a time.

A :class:`Slot` executes a batch in stream order: inputs in, the backend's
launch (its metadata copy and its batched call or calls), outputs out, one
synchronisation, then the launch's per-job results are read on the host.
Everything of a batch is on the slot's one stream (gpu-facts.md §2 hazard a).

The arena holds the launcher's scratch (metadata, result slots) first, then
the batch's inputs and outputs, then ``guard_bytes`` the launcher asks for:
a decoder that may write past an output's declared size (the engine) can
then only hit other inputs and outputs of the batch, never its result slots
or memory outside the arena. Such a launcher says ``contains_failures =
False``, and a batch in which any job failed is run once more without the
failed jobs (every caller's outputs may have been hit); if that run fails
too, no output of it is trusted: all its jobs are returned as failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from .memory import DeviceArena, HostScratch, address_of
from .staging import DEVICE_ALIGN, Part, _up, place

__all__ = ["Slot", "Launcher", "Failure"]

_UNTRUSTED = "not trusted: its batch failed twice, and a failed engine operation may write past its output"


@dataclass
class Failure:
    """A job whose output is wrong: its actual size, and the status text if any."""

    job: object
    actual: int
    status: str | None


class Launcher(Protocol):
    """What a GPU backend plugs into a slot.

    ``contains_failures``: a failed job wrote nothing outside its output
    (else a job with a nonzero status must be one that was not run).
    ``guard_bytes``: arena bytes to keep free after the last output.
    """

    contains_failures: bool
    guard_bytes: int

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
        failures = self._run_once(parts)
        # A job with a status was not run (the engine call left it out);
        # one that ran to a wrong size may have written anywhere after its output.
        ran_wrong = any(f.status is None for fs in failures for f in fs)
        if getattr(self.launcher, "contains_failures", True) or not ran_wrong:
            return failures
        failed = {id(f.job) for fs in failures for f in fs}
        again = [Part([j for j in part.jobs if id(j) not in failed], part.src, part.dst, part.protect)
                 for part in parts]
        if any(self._run_once(again)):
            for part, fs in zip(again, failures):
                fs.extend(Failure(j, -1, _UNTRUSTED) for j in part.jobs)
        return failures

    def _run_once(self, parts: Sequence[Part]) -> list[list[Failure]]:
        ops, stream = self.ops, self.stream
        failures: list[list[Failure]] = [[] for _ in parts]
        plan = place(parts, self.launcher.input_align, self.launcher.order)
        if not plan.jobs:
            return failures
        dev_bytes, host_bytes, state = self.launcher.prepare(plan.jobs, stream)
        head = _up(dev_bytes)
        guard = getattr(self.launcher, "guard_bytes", 0)
        base = self.arena.ensure(head + plan.nbytes + guard + DEVICE_ALIGN)
        data = base + head
        host = self.scratch.ensure(max(host_bytes, 1))
        src_addr = [address_of(p.src) for p in parts]
        dst_addr = [address_of(p.dst) for p in parts]
        for p, host_off, dev_off, n in plan.h2d:
            if n:
                ops.htod(data + dev_off, src_addr[p] + host_off, n, stream)
        src_ptrs = plan.src_dev + np.uint64(data)
        dst_ptrs = plan.dst_dev + np.uint64(data)
        collect = self.launcher.launch(state, stream, src_ptrs, dst_ptrs, base, host)
        for p, dev_off, host_off, n in plan.d2h:
            if n:
                ops.dtoh(dst_addr[p] + host_off, data + dev_off, n, stream)
        ops.synchronize(stream)
        actual, status = collect()
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
