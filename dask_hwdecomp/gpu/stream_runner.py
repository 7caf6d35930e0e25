"""One stream with its own arena and scratch: runs one GPU call at a time.

A :class:`StreamRunner` executes a call (the parts the batcher merged) in
stream order: inputs in, the backend's launch (its metadata copy and its
batched call or calls), the CRC-32s of its outputs (gzip trailers,
:mod:`dask_hwdecomp.gpu.checksums`), outputs out, one synchronisation,
then the per-job results are read on the host. While a profiling timeline
is recorded, an event pair around the call's work on the stream gives
the GPU's own seconds of the call (:attr:`StreamRunner.gpu_s`). With
page CRC-32s (``verify_checksums``) those run first, with a synchronisation
of their own, and a page whose stored bytes fail never reaches the decoder.
Everything of a call is on the runner's one stream: a host-to-device copy on
another stream raced with nvCOMP and gave wrong output (docs/gpu.md, "Known
nvCOMP 6.0 hazards").

The arena holds the launcher's scratch (metadata, result slots) first, then
the call's inputs and outputs, then ``guard_bytes`` the launcher asks for:
a decoder that may write past an output's declared size (the engine) can
then only hit other inputs and outputs of the call, never its result slots
or memory outside the arena. Such a launcher says ``contains_failures =
False``, and a call in which any job failed is run once more without the
failed jobs (every caller's outputs may have been hit); if that run fails
too, no output of it is trusted: all its jobs are returned as failed.

A part with a ``keep`` (:class:`Keeper`) also has its outputs copied, on
the device, into a block the keeper lends, in the same stream order as the
copies back: the GPU decoder reads the decompressed pages from there
rather than from the host. The keeper gets the block only when every job
of the part succeeded in a call that is trusted; else it gets it back.
A keeper's ``device_only`` ranges of the part's ``dst`` (the bytes only
the GPU decoder reads) are not copied back while the part is kept: a part
whose block is given back (a failed job) has them copied back before the
call returns, and a call run again keeps nothing and copies everything.

A runner made with a ``beside`` (:class:`Beside`) also queues that
object's work after the launch, over the call's inputs on the device;
after the synchronisation it names the jobs whose output it finds wrong,
each with a :class:`~.checksums.Mismatch` of its own kind, and they fail
as a CRC mismatch does. Where the ops can fork a stream (``stream_fork``)
that work runs on a side stream, from the moment the inputs are in until
it joins the call's stream before the synchronisation, so it runs during
the launcher's decoding rather than after it (the Zstd stream walk took
6 to 10 ms of a 35 to 45 ms call on the H100 when queued behind nvCOMP);
the side stream only reads the inputs, which nothing of the call writes.
Its host share that depends on a part alone (:meth:`Beside.prepare`) is
done by the part's caller before the call, and rides on the part: a
call's dispatcher thread only lays it out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import numpy as np

from .. import timeline
from ..jobs import JobTable
from ..rounding import round_up
from .checksums import CrcRun, Mismatch, crc_checks
from .memory import DeviceArena, HostScratch, address_of
from .staging import DEVICE_ALIGN, Copy, Part, place

__all__ = ["StreamRunner", "Launcher", "Prepared", "Failure", "Keeper", "Beside"]

_UNTRUSTED = "not trusted: its call failed twice, and a failed engine operation may write past its output"


@dataclass
class Failure:
    """A job whose output is wrong: its actual size, the status text if any,
    and the CRC-32 that did not match if one did (which then explains it).

    ``index`` is the job's position in its caller's table
    (:attr:`JobTable.index <dask_hwdecomp.jobs.JobTable>`): the caller's order.
    """

    job: object
    actual: int
    status: str | None
    checksum: Mismatch | None = None
    index: int = 0


class Prepared(NamedTuple):
    """What a launcher needs for a call, from :meth:`Launcher.prepare`."""

    device_bytes: int  # device scratch (metadata, result slots, temporary space)
    host_bytes: int  # pinned host scratch
    state: Any  # handed back to :meth:`Launcher.launch`


class Launcher(Protocol):
    """What a GPU backend plugs into a stream runner.

    ``contains_failures``: a failed job wrote nothing outside its output
    (else a job with a nonzero status must be one that was not run).
    ``guard_bytes``: arena bytes to keep free after the last output.
    ``verifies_zstd_checksum``: a Zstd frame whose content checksum does not
    match fails in the call (else the backend checks it on the host).
    """

    contains_failures: bool
    guard_bytes: int
    verifies_zstd_checksum: bool

    def input_align(self, algo) -> int: ...

    def order(self, algo) -> object: ...

    def prepare(self, rows: np.ndarray, stream) -> Prepared:
        """The scratch the jobs ``rows`` (:data:`~dask_hwdecomp.jobs.JOB_DTYPE`, call order) need,
        and the state :meth:`launch` takes."""
        ...

    def launch(self, state, stream, src_ptrs: np.ndarray, dst_ptrs: np.ndarray,
               scratch: int, host: tuple[int, memoryview]) -> Callable[[], np.ndarray]:
        """Queue the work; returns ``collect()`` giving per-job (actual, status)."""
        ...


class Beside(Protocol):
    """Work a runner queues on a call's stream beside its launcher's, over the call's inputs."""

    def prepare(self, jobs: JobTable, src: memoryview) -> Any:
        """The host's share of the work for one part, done by the part's caller before the call
        (kept as :attr:`Part.beside <dask_hwdecomp.gpu.staging.Part>`, so the dispatcher does not
        do it); None where the part needs nothing."""
        ...

    def queue(self, parts: Sequence[Part], rows: np.ndarray, part_of: np.ndarray, members: np.ndarray,
              src_ptrs: np.ndarray, stream) -> Callable[[], dict[int, Mismatch]]:
        """Queue the work for the placed jobs ``rows`` (``part_of`` and ``members``: each one's part and
        row there; ``src_ptrs``: each one's input on the device).

        Returns ``collect()``, called after the call's synchronisation: the
        jobs (positions in ``rows``) found wrong, each with its mismatch.
        """
        ...

    def close(self) -> None:
        """Free what the work holds (after the stream's work is done)."""
        ...


class Keeper(Protocol):
    """Where a part's outputs are kept on the device after its call."""

    def reserve(self, nbytes: int) -> Any | None:
        """A device block of ``nbytes`` (its ``address`` an int), or None: nothing is kept."""
        ...

    def keep(self, block: Any, spans: np.ndarray, outputs: np.ndarray) -> None:
        """``block`` holds the part's outputs.

        ``spans``: int64 rows (offset in the part's ``dst``, bytes, offset
        in the block) of what was copied, the bytes between outputs
        included; ``outputs``: rows (offset in ``dst``, bytes) of the jobs'
        outputs, the only bytes of the spans that are right.
        """
        ...

    def release(self, block: Any) -> None:
        """``block`` is not kept after all (a job of the part failed, or its call)."""
        ...

    device_only: np.ndarray
    """Sorted, disjoint (start, end) int64 rows of the part's ``dst``: not copied back while kept."""

    def exclude(self, outputs: np.ndarray) -> None:
        """Outputs (rows of offset in ``dst``, bytes) the caller rewrote on the host after the call.

        Their kept copies are no longer what the host holds: never read them.
        """
        ...


class _Keeping(NamedTuple):
    """A part's outputs copied into a keeper's block, not yet handed over.

    ``skipped``: the copies back left out (``device_only``), as
    :class:`~dask_hwdecomp.gpu.staging.Copy` rows, made if the block is
    given back.
    """

    part: int
    block: Any
    spans: np.ndarray
    skipped: list


class _Outcome(NamedTuple):
    failures: list[list[Failure]]
    keeps: list[_Keeping]
    data: int = 0  # the arena address the call's inputs and outputs start at


def _cut(c: Copy, only: np.ndarray, skipped: list) -> list[Copy]:
    """Copy ``c`` less the ``only`` ranges (sorted, disjoint rows of its part's ``dst``); what is left out goes to ``skipped``."""
    lo, hi = c.host_offset, c.host_offset + c.nbytes
    at = int(np.searchsorted(only[:, 1], lo, side="right"))  # the first range ending after lo
    out: list[Copy] = []
    pos = lo
    for start, end in only[at:].tolist():
        if start >= hi:
            break
        start, end = max(start, pos), min(end, hi)
        if start > pos:
            out.append(Copy(c.part, pos, c.arena_offset + pos - lo, start - pos))
        if end > start:
            skipped.append(Copy(c.part, start, c.arena_offset + start - lo, end - start))
        pos = max(pos, end)
    if pos < hi:
        out.append(Copy(c.part, pos, c.arena_offset + pos - lo, hi - pos))
    return out


class StreamRunner:
    """A stream, a device arena and a pinned scratch block.

    Parameters
    ----------
    ops : CudaOps or a stand-in
    launcher : Launcher
    beside : Beside, optional
        Work queued in every call beside the launcher's; closed with the runner.

    Raises
    ------
    CudaError
        The stream cannot be created.
    """

    def __init__(self, ops, launcher, beside: Beside | None = None) -> None:
        self.ops = ops
        self.launcher = launcher
        self.beside = beside
        self.stream = ops.new_stream()
        self._fork: Any = None
        try:
            self.arena = DeviceArena(ops.alloc_device, self.stream)
            self.scratch = HostScratch(ops.alloc_host)
            self.device_only_bytes = 0  # bytes not copied back: device-only, kept (given back ones included)
            # The GPU's seconds of the last call (every run of it), timed by
            # an event pair only while a timeline is recorded; None: not timed.
            self.gpu_s: float | None = None
            self._events: Any = None
            make_fork = getattr(ops, "stream_fork", None)
            if beside is not None and make_fork is not None:
                self._fork = make_fork()
        except BaseException:
            if self._fork is not None:
                self._fork.close()
            self.stream.close()
            raise

    def run(self, parts: Sequence[Part]) -> list[list[Failure]]:
        """Run one call; per part, the jobs that failed (empty: all good).

        Raises
        ------
        CudaError, NvcompError
            The call as a whole failed.
        """
        self.gpu_s = None
        outcome = self._run_once(parts)
        failures = outcome.failures
        # A job with a status was not run (the engine call left it out), and
        # one a checksum explains was not run (page CRC) or wrote exactly its
        # size (gzip CRC); one that ran to a wrong size may have written
        # anywhere after its output.
        ran_wrong = any(f.status is None and f.checksum is None for fs in failures for f in fs)
        if getattr(self.launcher, "contains_failures", True) or not ran_wrong:
            self._hand_over(parts, outcome)
            return failures
        for k in outcome.keeps:  # the run may have written over any output
            parts[k.part].keep.release(k.block)
        again = []
        for part, fs in zip(parts, failures):
            failed = np.array([f.index for f in fs], dtype=np.int64)
            again.append(Part(part.jobs.take(~np.isin(part.jobs.index, failed)), part.src, part.dst, part.protect))
        if any(self._run_once(again).failures):
            for part, fs in zip(again, failures):
                fs.extend(Failure(part.jobs.job(i), -1, _UNTRUSTED, None, int(part.jobs.index[i]))
                          for i in range(len(part.jobs)))
        return failures

    def _hand_over(self, parts: Sequence[Part], outcome: _Outcome) -> None:
        """Each kept block to its part's keeper, or back where a job of the part failed.

        A part given back gets the copies it skipped (``device_only``) from
        the arena (``outcome.data``), which still holds the call's outputs.
        """
        late = False
        for k in outcome.keeps:
            part = parts[k.part]
            if outcome.failures[k.part]:
                part.keep.release(k.block)
                dst = address_of(part.dst)
                for c in k.skipped:
                    self.ops.dtoh(dst + c.host_offset, outcome.data + c.arena_offset, c.nbytes, self.stream)
                    late = True
                continue
            r = part.jobs.rows
            sized = r["dst_size"] > 0
            outputs = np.stack([r["dst_offset"][sized], r["dst_size"][sized]], axis=1).astype(np.int64)
            part.keep.keep(k.block, k.spans, outputs)
        if late:
            self.ops.synchronize(self.stream)

    def _queue_keeps(self, parts: Sequence[Part], d2h: Sequence, data: int, keeps: list[_Keeping]) -> None:
        """Copy the outputs of the parts that keep them into their keepers' blocks (stream order)."""
        copies: dict[int, list] = {}
        for c in d2h:
            if c.nbytes and parts[c.part].keep is not None:
                copies.setdefault(c.part, []).append(c)
        for p, mine in copies.items():
            block = parts[p].keep.reserve(sum(c.nbytes for c in mine))
            if block is None:
                continue
            keeps.append(_Keeping(p, block, np.zeros((len(mine), 3), dtype=np.int64), []))
            at = 0
            for i, c in enumerate(mine):
                self.ops.dtod(block.address + at, data + c.arena_offset, c.nbytes, self.stream)
                keeps[-1].spans[i] = (c.host_offset, c.nbytes, at)
                at += c.nbytes

    def _run_once(self, parts: Sequence[Part]) -> _Outcome:
        keeps: list[_Keeping] = []
        try:
            return self._run_keeping(parts, keeps)
        except BaseException:
            for k in keeps:
                parts[k.part].keep.release(k.block)
            raise

    def _run_keeping(self, parts: Sequence[Part], keeps: list[_Keeping]) -> _Outcome:
        ops, stream = self.ops, self.stream
        launcher = self.launcher
        failures: list[list[Failure]] = [[] for _ in parts]
        plan = place(parts, launcher.input_align, launcher.order)
        rows = plan.rows
        n = len(rows)
        if not n:
            return _Outcome(failures, keeps)
        prepared = launcher.prepare(rows, stream)
        dev_bytes, host_bytes, state = prepared.device_bytes, prepared.host_bytes, prepared.state
        checks = crc_checks(plan)
        checksummer = getattr(ops, "checksummer", None)
        pages = CrcRun(checks.where(checks.page), checksummer)
        outputs = CrcRun(checks.where(~checks.page), checksummer)
        # Arena: the launcher's scratch and each CRC run's, then the inputs
        # and outputs, then the launcher's guard (see the module docstring).
        pages_dev = round_up(dev_bytes, DEVICE_ALIGN)
        outputs_dev = pages_dev + round_up(pages.device_bytes, DEVICE_ALIGN)
        head = round_up(outputs_dev + outputs.device_bytes, DEVICE_ALIGN)
        guard = getattr(launcher, "guard_bytes", 0)
        base = self.arena.ensure(head + plan.nbytes + guard + DEVICE_ALIGN)
        data = base + head
        pages_host = round_up(host_bytes, 8)
        outputs_host = pages_host + pages.host_bytes
        host_ptr, host_view = host = self.scratch.ensure(max(outputs_host + outputs.host_bytes, 1))
        src_addr = [address_of(p.src) for p in parts]
        dst_addr = [address_of(p.dst) for p in parts]

        def host_bytes_of(k: int, page: bool):
            row, part = rows[k], parts[int(plan.part_of[k])]
            if page:
                at = int(row["page_crc_offset"])
                return part.src[at : at + int(row["page_crc_size"])]
            at = int(row["dst_offset"])
            return part.dst[at : at + int(row["dst_size"])]

        events = self._event_pair()
        if events is not None:
            events.start(stream)
        for c in plan.h2d:
            if c.nbytes:
                ops.htod(data + c.arena_offset, src_addr[c.part] + c.host_offset, c.nbytes, stream)
        src_ptrs = plan.src_dev + np.uint64(data)
        dst_ptrs = plan.dst_dev + np.uint64(data)
        fork = self._fork
        if fork is not None:  # the side stream's work starts once the inputs are in
            fork.begin(stream)
        bad_pages: dict = {}
        if len(pages.checks):
            # verify_checksums: the page CRC-32s first, and only pages whose
            # stored bytes are intact reach the decoder (corrupt content can
            # hang nvCOMP); one more synchronisation, only in this mode.
            pages.launch(ops, stream, data, base + pages_dev, host_ptr + pages_host, host_view[pages_host:])
            ops.synchronize(stream)
            bad_pages = pages.mismatches(host_bytes_of)
        keep = np.arange(n, dtype=np.int64)
        if bad_pages:
            keep = np.setdiff1d(keep, np.fromiter(bad_pages, dtype=np.int64, count=len(bad_pages)))
            if len(keep):
                again = launcher.prepare(rows[keep], stream)
                if again.device_bytes <= dev_bytes and again.host_bytes <= host_bytes:  # fits the scratch reserved
                    state = again.state
                else:  # decode them all: the page CRC still names the bad ones
                    keep = np.arange(n, dtype=np.int64)
        collect = None
        beside = None
        if len(keep):
            collect = launcher.launch(state, stream, src_ptrs[keep], dst_ptrs[keep], base, host)
            outputs.launch(ops, stream, data, base + outputs_dev, host_ptr + outputs_host, host_view[outputs_host:])
            if self.beside is not None:
                placed = (parts, rows[keep], plan.part_of[keep], plan.member[keep], src_ptrs[keep])
                if fork is None:
                    beside = self.beside.queue(*placed, stream)
                else:
                    try:
                        beside = self.beside.queue(*placed, fork.side)
                    finally:  # the call's later copies and its synchronisation wait for the side's work
                        fork.end(stream)
        # The kept copies first (stream order still puts them after the
        # launch): a kept part's device-only bytes are then not copied back.
        self._queue_keeps(parts, plan.d2h, data, keeps)
        keeping = {k.part: k for k in keeps}
        for c in plan.d2h:
            if not c.nbytes:
                continue
            held = keeping.get(c.part)
            pieces = [c] if held is None else _cut(c, parts[c.part].keep.device_only, held.skipped)
            self.device_only_bytes += c.nbytes - sum(piece.nbytes for piece in pieces)
            for piece in pieces:
                ops.dtoh(dst_addr[c.part] + piece.host_offset, data + piece.arena_offset, piece.nbytes, stream)
        if events is not None:
            events.stop(stream)
        with timeline.span("gpu_sync", pages=n, nbytes=plan.nbytes):
            ops.synchronize(stream)
        if events is not None:
            self.gpu_s = (self.gpu_s or 0.0) + events.seconds()
        actual = np.zeros(n, dtype=np.uint64)
        status = np.zeros(n, dtype=np.int32)
        if collect is not None:
            actual[keep], status[keep] = collect()
        mismatched = outputs.mismatches(host_bytes_of) if collect is not None else {}
        for k, found in bad_pages.items():
            mismatched.setdefault(k, []).extend(found)
        if beside is not None:
            for at, mismatch in beside().items():
                mismatched.setdefault(int(keep[at]), []).append(mismatch)
        bad = set(np.flatnonzero((actual.astype(np.int64) != rows["dst_size"]) | (status != 0)).tolist())
        for k in sorted(bad | set(mismatched)):
            text = launcher.status_text(int(status[k])) if status[k] != 0 else None
            found = {m.kind: m for m in mismatched.get(k, ())}
            # Bad stored bytes explain everything after them; a gzip CRC
            # (or the beside work's finding) speaks only for an output of the right size.
            why = found.get("page") or (None if k in bad else next(iter(found.values()), None))
            p, i = int(plan.part_of[k]), int(plan.member[k])
            table = parts[p].jobs
            failures[p].append(Failure(table.job(i), int(actual[k]), text, why, int(table.index[i])))
        return _Outcome(failures, keeps, data)

    def _event_pair(self) -> Any:
        """The runner's event pair while a timeline is recorded and its ops can time; else None (none made)."""
        if not timeline.enabled():
            return None
        if self._events is None:
            make = getattr(self.ops, "event_pair", None)
            if make is None:  # a stand-in without the GPU's clock: the call is not timed
                return None
            self._events = make()
        return self._events

    def stats(self) -> dict:
        return {
            "arena_bytes": self.arena.nbytes,
            "arena_allocations": self.arena.allocations,
            "scratch_allocations": self.scratch.allocations,
            "device_only_bytes": self.device_only_bytes,
        }

    def close(self) -> None:
        """Free the arena, the scratch and the stream (after its work is done)."""
        try:
            self.ops.synchronize(self.stream)
        finally:
            try:
                self.arena.close()
                self.scratch.close()
                if self.beside is not None:
                    self.beside.close()
                if self._fork is not None:
                    self._fork.close()
                    self._fork = None
                if self._events is not None:
                    self._events.close()
                    self._events = None
            finally:
                self.stream.close()
