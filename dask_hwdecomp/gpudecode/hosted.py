"""The GPU decoder as the GPU service hosts it: one per service process, shared by every client.

A client's decode is two requests (see :mod:`dask_hwdecomp.gpudecode.tables`):
*measure* hands the decoder the client's plan and the shared memory its
bytes lie in; the decoder measures, places and writes the Arrow buffers on
the device and answers with the measured records. *Write*, once the client
has allocated the output the measure asked for, copies the client's
buffers from the device into it. Between the two, a :class:`PendingDecode`
holds the client's share of the device output; it is closed after the
write, or when the client discards it or leaves.

Measures do not run one by one: the decoder's runner thread takes every
plan queued when it comes free (up to :data:`MERGE_BYTES` of upload) and
decodes them as one batch (:mod:`~.merge`), so concurrent reads share one
launch sequence, and the service's Python per launch is paid once for all
of them. One runner is the default: a run's time is mostly that Python
(under the service's one GIL), so a second runner made smaller runs, not
more of them at once (measured on the H200 with 16 clients: 200 to 215
decodes a second with two runners, 267 to 284 with one).

A request may come with the pages the service kept on the device when it
decompressed them (:class:`~.uploads.KeptPages`): the decoder then copies
them on the device and uploads only what they lack (:mod:`~.uploads`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import timeline
from ..gpu.simulator import simulated
from .merge import MergedPlan, PlanRecords, merge_plans, place_members
from .uploads import KeptPages, device_address, plan_uploads

__all__ = ["HostedDecoder", "PendingDecode", "DecodeRequest", "MERGE_BYTES", "MERGE_PLANS", "RUNNERS_ENV",
           "runners_from_env"]

logger = logging.getLogger("dask_hwdecomp")

# A merged decode takes queued plans while their uploads stay under this
# (a larger plan runs alone) ...
MERGE_BYTES = 512 << 20
# ... and at most this many plans.
MERGE_PLANS = 64

# The service's decoder runs this many runner threads (a tuning knob for
# profiling; 1 by default, see the module docstring).
RUNNERS_ENV = "HWDECOMP_DECODE_RUNNERS"


def runners_from_env() -> int:
    """The runner threads :data:`RUNNERS_ENV` asks for (1 when unset).

    Raises
    ------
    ValueError
        It is set to anything but a whole number from 1 to 16.
    """
    text = os.environ.get(RUNNERS_ENV, "").strip()
    if not text:
        return 1
    if not text.isdigit() or not 1 <= int(text) <= 16:
        raise ValueError(f"{RUNNERS_ENV}={text!r}: a whole number of runner threads from 1 to 16")
    return int(text)


@dataclass(frozen=True)
class DecodeRequest:
    """One client's plan and the host memory its upload ranges read.

    Attributes
    ----------
    src : memoryview
        The client's host buffer (shared memory, pinned by the service).
    plan : PlanRecords
        Checked ranges, records and upload size.
    kept : tuple of KeptPages
        Pages of ``src`` the service kept on the device (offsets relative
        to ``src``), read there instead of from ``src``.
    """

    src: memoryview
    plan: PlanRecords
    kept: tuple[KeptPages, ...] = ()


class DeviceOutput:
    """A merged decode's device output, shared by its members; freed when the last lets go."""

    def __init__(self, array: Any, users: int) -> None:
        self.array = array
        self._users = users
        self._lock = threading.Lock()

    def release(self) -> None:
        """One member is done with it (its copy synchronised, or discarded)."""
        with self._lock:
            self._users -= 1
            if self._users == 0:
                self.array = None  # back to the device pool


@dataclass
class PendingDecode:
    """One client's measured and written decode, waiting for its copy to the host.

    ``chunks`` carry the client's own placement (``place_outputs`` of its
    records alone); ``pages`` their ``error`` codes. Where a page failed,
    nothing was kept (``output`` is None) and the client gets the error.
    """

    chunks: np.ndarray
    pages: np.ndarray
    nbytes: int
    decoder: HostedDecoder
    output: DeviceOutput | None = None
    offset: int = 0
    closed: bool = field(default=False)

    @property
    def failed(self) -> bool:
        """Whether a page of this decode failed."""
        return bool(np.any(self.pages["error"]))

    def copy_to(self, dst: memoryview) -> None:
        """Copy the client's Arrow buffers (``nbytes``) into ``dst`` and wait for it.

        Raises
        ------
        ValueError
            The decode failed or is closed, or ``dst`` is not ``nbytes`` long.
        """
        if self.closed or self.output is None or self.output.array is None:
            raise ValueError("no written decode to copy")
        if len(dst) != self.nbytes:
            raise ValueError(f"an output of {len(dst)} bytes for a decode of {self.nbytes}")
        if self.nbytes:
            self.decoder._copy_out(self.output.array[self.offset : self.offset + self.nbytes], dst)

    def close(self) -> None:
        """Let go of the device output (idempotent)."""
        if self.closed:
            return
        self.closed = True
        if self.output is not None:
            self.output.release()
            self.output = None


def _kept_on_device(request: DecodeRequest, cuda: Any) -> DecodeRequest:
    """``request`` with its bytes also kept on the device, all but each range's first 16 (the warm-up).

    So a warm-up decode copies pages on the device and patches the rest
    from the host, as a read whose pages the service kept does.
    """
    host = np.frombuffer(request.src, dtype=np.uint8)
    ranges = request.plan.ranges[request.plan.ranges[:, 1] > 32]
    outputs = np.stack([ranges[:, 0] + 16, ranges[:, 1] - 16], axis=1).astype(np.int64)
    spans = np.array([[0, len(host), 0]], dtype=np.int64)
    return dataclasses.replace(request, kept=(KeptPages(cuda.to_device(host), spans, outputs),))


class _Waiting:
    """A queued request and where its runner puts the outcome."""

    def __init__(self, request: DecodeRequest) -> None:
        self.request = request
        self.queued = time.perf_counter()
        self.done = threading.Event()
        self.result: PendingDecode | None = None
        self.error: BaseException | None = None


class HostedDecoder:
    """Runs decode plans on this process's GPU (numba-cuda kernels), merging concurrent ones.

    Parameters
    ----------
    runners : int
        Threads that take queued plans and decode them, each on a stream of
        its own (see the module docstring for why one).
    copy_streams : int
        Threads (each with a stream) the copies to the clients' memory run on.

    Raises
    ------
    ImportError
        numba-cuda is not installed.
    """

    def __init__(self, runners: int = 1, copy_streams: int = 4):
        # numba-cuda through gpu/ (which sets its pooled device memory) and streams that gpu/ owns.
        from ..gpu.cuda_jit import cuda, held_context
        from ..gpu.numba_streams import NumbaStreams
        from . import runner

        self._cuda = cuda
        self._held = held_context
        self._runner = runner
        self._streams = NumbaStreams()
        # Copies run on threads of their own, each with its stream: a new
        # thread's first CUDA call costs numba a context lookup (about 1 ms).
        self._copier = ThreadPoolExecutor(max(1, copy_streams), thread_name_prefix="hwdecomp-decoder-copy")
        self._copy_local = threading.local()
        self._lock = threading.Lock()
        self._queue: list[_Waiting] = []
        self._wake = threading.Condition(self._lock)
        self._closing = False
        # numba loads a kernel into the context on its first launch, and two
        # threads loading the same kernel at once break its bookkeeping
        # ("key already in dictionary: <CUlibrary>", seen on the H200): decodes
        # run one at a time until warm_up has launched every kernel.
        self._first_launches = threading.RLock()
        self._warm = False
        self.decodes = 0
        self.runs = 0
        self.bytes_in = 0
        self.bytes_kept = 0
        self.bytes_out = 0
        # Seconds: requests waiting in the queue, merged runs, copies out.
        self.queue_s = self.run_s = self.copy_s = 0.0
        self._threads = [threading.Thread(target=self._serve, args=(self._streams.new(),), daemon=True,
                                          name=f"hwdecomp-decoder-{i}") for i in range(max(1, runners))]
        for t in self._threads:
            t.start()

    # -- what clients call ----------------------------------------------------

    def decode(self, request: DecodeRequest) -> PendingDecode:
        """Measure, place and write ``request``'s plan (merged with whatever is queued with it).

        Returns when its decode has run; the caller closes the result. A
        page error is in the result's ``pages["error"]``, not raised.

        Raises
        ------
        RuntimeError
            The decoder is closed.
        BaseException
            Whatever failed on the GPU (the context cannot be trusted after).
        """
        waiting = _Waiting(request)
        with self._wake:
            if self._closing:
                raise RuntimeError("the GPU decoder is closed")
            self._queue.append(waiting)
            self._wake.notify()
        waiting.done.wait()
        if waiting.error is not None:
            raise waiting.error
        assert waiting.result is not None
        return waiting.result

    def decode_together(self, requests: Sequence[DecodeRequest], stream: Any) -> list[PendingDecode]:
        """Decode ``requests`` as one merged batch on ``stream``, on this thread (the warm-up, tests)."""
        with self._first_launches:
            return self._run(list(requests), stream)

    def warm_up(self) -> None:
        """Decode small tables of every output kind and encoding once, together.

        numba compiles a kernel on its first launch (or loads it from its
        disk cache); doing that here, when the service starts, keeps it out
        of the first read.
        """
        from .plan import plan_file
        from .warmup import warmup_files

        requests = []
        for data in warmup_files():
            plan = plan_file(data)
            # Writable, as the shared segments of real requests are: numba
            # compiles a read-only source apart, which a cold cache would
            # then do inside a real request's deadline.
            requests.append(DecodeRequest(memoryview(bytearray(data)),
                                          PlanRecords(plan.ranges, plan.chunks, plan.pages, plan.data_bytes)))
        # One file alone, then all of them merged (the first from pages kept
        # on the device): both paths launch every kernel.
        stream = self._streams.new()
        with self._first_launches:
            for group in (requests[:1], [_kept_on_device(requests[0], self._cuda), *requests[1:]]):
                for pending in self._run(group, stream, counted=False):
                    try:
                        if pending.output is not None:
                            pending.copy_to(np.empty(pending.nbytes, np.uint8).data)
                    finally:
                        pending.close()
            # numba's simulator swaps one process-wide module per launch:
            # there, decodes stay one at a time.
            self._warm = not simulated()

    def close(self) -> None:
        """Stop the runners once the queue is empty, then close the streams (idempotent)."""
        with self._wake:
            self._closing = True
            self._wake.notify_all()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join()
        self._copier.shutdown(wait=True)
        self._streams.close()

    def stats(self) -> dict:
        """Counters: decodes, merged runs, bytes in, bytes of Arrow output written, and seconds.

        ``decode_bytes_in`` counts every byte the kernels read,
        ``decode_bytes_kept`` those copied from pages kept on the device
        rather than uploaded.

        Seconds: ``decode_queue_s`` summed over requests waiting for a
        runner, ``decode_run_s`` of the merged runs, ``decode_copy_s`` of the
        copies into the clients' memory (waiting for a copy stream included).
        """
        with self._lock:
            return {"decodes": self.decodes, "decode_runs": self.runs, "decode_bytes_in": self.bytes_in,
                    "decode_bytes_kept": self.bytes_kept, "decode_bytes_out": self.bytes_out,
                    "decode_queue_s": round(self.queue_s, 6),
                    "decode_run_s": round(self.run_s, 6), "decode_copy_s": round(self.copy_s, 6)}

    # -- the runners ------------------------------------------------------------

    def _take(self) -> list[_Waiting] | None:
        """The next merged batch: the oldest queued plan and those after it that fit; None once closed."""
        with self._wake:
            while not self._queue:
                if self._closing:
                    return None
                self._wake.wait()
            batch = [self._queue.pop(0)]
            total = batch[0].request.plan.data_bytes
            while self._queue and len(batch) < MERGE_PLANS:
                nxt = self._queue[0].request.plan.data_bytes
                if total + nxt > MERGE_BYTES:
                    break
                batch.append(self._queue.pop(0))
                total += nxt
            return batch

    def _serve(self, stream: Any) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            began, cpu = time.perf_counter(), timeline.thread_cpu()
            with self._lock:
                self.queue_s += sum(began - w.queued for w in batch)
            for w in batch:
                timeline.record("decode_queue", w.queued, began, nbytes=w.request.plan.data_bytes)
            try:
                with self._one_at_a_time_until_warm():
                    # numba's context looked up once a run, not at each of its
                    # hundreds of numba calls (each a GIL hand-off otherwise)
                    results = self._held(self._run, [w.request for w in batch], stream)
            except BaseException as exc:  # every member gets it; the service exits
                for w in batch:
                    w.error = exc
                    w.done.set()
                continue
            ended = time.perf_counter()
            with self._lock:
                self.run_s += ended - began
            timeline.record("decode_run", began, ended, cpu, plans=len(batch),
                            nbytes=sum(w.request.plan.data_bytes for w in batch),
                            out_bytes=sum(r.nbytes for r in results))
            for w, r in zip(batch, results):
                w.result = r
                w.done.set()
            # Not held while waiting for the next batch: the requests' kept
            # pages go back to the device pool when their callers let go.
            del batch, results

    def _one_at_a_time_until_warm(self):
        return contextlib.nullcontext() if self._warm else self._first_launches

    def _run(self, requests: list[DecodeRequest], stream: Any, counted: bool = True) -> list[PendingDecode]:
        """Decode ``requests`` merged; a member whose page fails is taken out and the rest run again.

        ``counted``: whether the decodes count in :meth:`stats` (not the warm-up's).
        """
        results: list[PendingDecode | None] = [None] * len(requests)
        live = list(range(len(requests)))
        while live:
            with timeline.span("decode_merge", plans=len(live)):
                merged = merge_plans([requests[i].plan for i in live])
            done = self._measure_and_write(merged, [requests[i] for i in live], stream)
            # the members that own a failed page
            bad = np.unique(np.searchsorted(merged.page_base, np.flatnonzero(done.pages["error"]), side="right") - 1)
            for k in bad.tolist():
                results[live[k]] = PendingDecode(merged.member_chunks(k, done.chunks),
                                                 merged.member_pages(k, done.pages), 0, self)
            if len(bad):  # the others are decoded again, without the failed ones
                live = [i for i in live if results[i] is None]
                continue
            output = DeviceOutput(done.array, len(live))
            with timeline.span("decode_split", plans=len(live)):
                for k, i in enumerate(live):
                    mine = merged.member_chunks(k, done.chunks)
                    base = int(done.base[k])
                    for name in ("out_valid", "out_values", "out_data"):
                        col = mine[name]
                        col[col >= 0] -= base
                    results[i] = PendingDecode(mine, merged.member_pages(k, done.pages),
                                               int(done.base[k + 1]) - base, self, output, base)
            if counted:
                with self._lock:
                    self.decodes += len(live)
                    self.runs += 1
                    self.bytes_in += merged.data_bytes
                    self.bytes_kept += done.kept_bytes
                    self.bytes_out += int(done.base[-1])
            break
        return [r for r in results if r is not None]

    def _measure_and_write(self, merged: MergedPlan, requests: list[DecodeRequest], stream: Any) -> _Written:
        """Upload, measure, place and write ``merged`` (no output where a page failed)."""
        from ..gpu.device_hold import holding

        cuda = self._cuda
        held: list = []  # the decode's inputs and scratch: freed once its stream is synchronised
        clock = _GpuClock(cuda, stream)
        try:
            with holding(held):
                clock.mark()
                data = cuda.device_array(max(1, merged.data_bytes), dtype=np.uint8, stream=stream)
                with timeline.span("decode_upload", nbytes=merged.data_bytes):
                    kept_bytes = self._upload(data, requests, merged.data_base.tolist(), stream)
                clock.mark("upload")
                with timeline.span("decode_measure", pages=len(merged.pages)):
                    measured = self._runner.measure(data, merged.chunks, merged.pages, stream=stream)
                clock.mark("measure")
            with measured.state:
                chunks, pages = measured.chunks, measured.pages
                if pages["error"].any():
                    return _Written(chunks, pages, None, np.zeros(1, np.int64), kept_bytes)
                with timeline.span("decode_place", chunks=len(chunks)):
                    base = place_members(merged, chunks)
                clock.mark("place")
                # Not held: it outlives the decode, until every member's copy.
                array = cuda.device_array(max(1, int(base[-1])), dtype=np.uint8, stream=stream)
                with holding(held), timeline.span("decode_write", nbytes=int(base[-1])):
                    errors = self._runner.write(measured.state, chunks, array, stream=stream)
                clock.mark("write")
            pages = pages.copy()
            pages["error"] = errors
            return _Written(chunks, pages, array, base, kept_bytes)
        finally:
            with timeline.span("decode_sync"):  # the inputs and scratch are freed only after it
                stream.synchronize()
            held.clear()
            clock.record("decode_gpu", nbytes=merged.data_bytes)

    def _upload(self, data: Any, requests: list[DecodeRequest], bases: list[int], stream: Any) -> int:
        """Fill ``data`` for ``requests`` (each at its base): kept pages, then the host; the bytes kept.

        Every kept output's bytes (:attr:`~.uploads.Uploads.pieces`) and
        every small host piece of every request, packed, go into one copy
        table: one upload and one launch (:func:`~.gather.copy_pieces`).
        Large host pieces are copied one by one. None of them overlap, so
        their order on ``stream`` does not matter. The runner plans every
        request of its run: planned on the threads that brought them, each
        plan took about 24 ms instead of about 1 ms on the H200 at scale
        (those threads take turns on the service's one GIL), and the reads
        got no faster.
        """
        from .gather import copy_pieces

        kept_bytes = 0
        sources, patches, big = [], [], []
        with timeline.span("upload_plan", plans=len(requests)):
            for req, base in zip(requests, bases):
                host = np.frombuffer(req.src, dtype=np.uint8)
                try:
                    up = plan_uploads(req.plan.ranges, list(req.kept))
                except ValueError as exc:  # never expected: the service made them; the host has every byte
                    logger.warning("pages kept on the device not used: %s", exc)
                    up = plan_uploads(req.plan.ranges, [])
                if len(up.pieces):
                    address = np.array([device_address(k.array) for k in req.kept], np.int64)
                    p = up.pieces
                    sources.append(np.stack([address[p[:, 0]] + p[:, 1], p[:, 2] + base, p[:, 3]], axis=1))
                    kept_bytes += int(p[:, 3].sum())
                if len(up.patches):
                    patches.append((host, up.patches + [0, 0, base]))
                big.append((host, base, up.host))
        with timeline.span("upload_gather", patches=sum(len(rows) for _, rows in patches)):
            copy_pieces(data, np.concatenate(sources) if sources else np.zeros((0, 3), np.int64), patches, stream)
        with timeline.span("upload_host", pieces=sum(len(rows) for _, _, rows in big)):
            for host, base, rows in big:
                for so, n, do in rows.tolist():
                    data[base + do : base + do + n].copy_to_device(host[so : so + n], stream=stream)
        return kept_bytes

    def device_block(self, nbytes: int) -> Any:
        """``nbytes`` of the decoder's device memory (its pool), for pages kept until a decode reads them."""
        return self._cuda.device_array(max(1, nbytes), dtype=np.uint8)

    def _copy_out(self, device: Any, dst: memoryview) -> None:
        began = time.perf_counter()
        self._copier.submit(self._copy_on_this_thread, device, dst).result()
        ended = time.perf_counter()
        with self._lock:
            self.copy_s += ended - began
        timeline.record("decode_copy", began, ended, nbytes=len(dst))

    def _copy_on_this_thread(self, device: Any, dst: memoryview) -> None:
        stream = getattr(self._copy_local, "stream", None)
        if stream is None:
            stream = self._copy_local.stream = self._streams.new()
        device.copy_to_host(np.frombuffer(dst, dtype=np.uint8), stream=stream)
        stream.synchronize()


class _GpuClock:
    """The GPU's own seconds between the marks of one run, from CUDA events on its stream (profiling only).

    Off (no event, no cost) unless this process records a timeline
    (:mod:`dask_hwdecomp.timeline`) and runs on a real device. Each
    ``gpu_<name>_s`` is the time the stream took from the mark before to
    ``name``'s: its kernels and copies, and any time it sat idle waiting
    for the host to queue them.
    """

    # Each thread's events, reused run after run (creating one cost a runner
    # about as much as a launch): a run reads its events only after its
    # stream is synchronised, before the thread's next run marks again.
    _events = threading.local()

    def __init__(self, cuda: Any, stream: Any) -> None:
        self._cuda, self._stream = cuda, stream
        self._marks: list | None = [] if timeline.enabled() and not simulated() else None
        self._t0 = time.perf_counter()

    def mark(self, name: str = "") -> None:
        """An event on the stream after what was queued so far; ``name`` the step it closes."""
        if self._marks is not None:
            events = self._events.__dict__.setdefault("pool", [])
            if len(self._marks) == len(events):
                events.append(self._cuda.event(timing=True))
            event = events[len(self._marks)]
            event.record(stream=self._stream)
            self._marks.append((name, event))

    def record(self, kind: str, **fields: Any) -> None:
        """Record the run as one span of ``kind`` with its ``gpu_<name>_s`` (after the stream is synchronised)."""
        if not self._marks:
            return
        for (_, a), (name, b) in zip(self._marks, self._marks[1:]):
            fields[f"gpu_{name}_s"] = self._cuda.event_elapsed_time(a, b) / 1e3
        timeline.record(kind, self._t0, time.perf_counter(), **fields)


@dataclass(frozen=True)
class _Written:
    """A merged decode after its write: the placed records, the pages' errors, the device output."""

    chunks: np.ndarray  # merged CHUNK records, placed member by member
    pages: np.ndarray  # merged PAGE records, ``error`` after measure and write
    array: Any  # the device output, or None where a page failed
    base: np.ndarray  # each member's first output byte, and the total
    kept_bytes: int  # bytes copied from pages kept on the device
