"""A GPU backend whose work runs in the node's GPU service.

:class:`ServiceClient` implements the backend protocol in the process that
reads (a dask worker, or any caller of ``read_table``) and never creates a
CUDA context there: the real backend (nvCOMP or the hardware engine, with
its streams, pools and batcher) lives in the GPU service
(:mod:`~dask_hwdecomp.service.server`), one process per GPU and user on the
node, which every reading process attaches to. Host buffers come from a pool
of shared memory segments (:mod:`~dask_hwdecomp.service.shm`), passed to the
service once per connection as descriptors: the reader fetches into them and
the service copies to and from the GPU in place.

The first backend that finds no service starts one (a session of its own,
so it outlives its starter; concurrent starters end with exactly one); it
exits once its last client has left.

Failures, and what the caller sees:

* a page the GPU rejects (a status, a wrong size): the service names its
  index, and :class:`~dask_hwdecomp.errors.CorruptPageError` names its file,
  row group, column and page, as in process;
* the service dies (a poisoned context exits it, or it is killed), fails
  the batch as a whole, or does not answer within the request's deadline
  (:mod:`~dask_hwdecomp.service.deadline`: from when the service took the
  request up, a second plus time for its bytes and those queued ahead of
  it, at most ``gpu_timeout_s``; the waiting client kills it): every
  request in flight, every client's, fails at once, and the next call
  attaches to a fresh service. Each failed batch is then decompressed on
  this thread by the CPU decoders to find the bad page: if one is corrupt,
  ``CorruptPageError`` names it and says the GPU service failed on this
  batch. If every page decodes (the batch was innocent: it only shared
  the GPU, or a call, with the bad one), the CPU's output stands and
  :class:`~dask_hwdecomp.errors.GpuBatchFailedError` says so, which the
  router keeps, reports and logs: an innocent reader never fails for
  another's page, nor waits for the fresh service;
* no service can be reached or started: :class:`~dask_hwdecomp.service.rundir.ServiceUnreachable`,
  on which the router of ``backend="auto"`` reads on the CPU and the report
  says so.

The service is a fresh interpreter (``python -m``), never a fork: forking a
process that holds CUDA state is undefined, and ``multiprocessing``'s spawn
would re-run an unguarded user script and refuses to start children of a
daemonic worker process.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from ..backend_table import BACKEND_MODULES
from ..decompress.cpu import decompress_one
from ..errors import (
    CorruptPageError,
    GpuBatchFailedError,
    HwdecompError,
)
from ..jobs import ALGOS, Job, JobTable, as_table
from ..options import Options
from . import wire
from .connection import Connection, Overdue, ServiceGone
from .decoding import DecodeOutput, decode_in_service
from .keeping import KeptRuns
from .rundir import address_for
from .shm import SharedBuffer, SharedPool, SharedSegment
from .spares import spare_stats

__all__ = ["ServiceClient", "GPU_FACTORIES"]

# The backends a node's GPU service hosts, in its one CUDA context.
GPU_FACTORIES: Mapping[str, str] = {
    name: f"{module}:create" for name, module in BACKEND_MODULES.items() if module is not None
}


@dataclass(frozen=True)
class SharedRef:
    """Where a caller's view lies in a shared segment, and the staging buffer if copied.

    Attributes
    ----------
    segment : SharedSegment
        The segment the service maps.
    offset, nbytes : int
        The view's place in it.
    staged : SharedBuffer or None
        The pool buffer the view was copied through, if it lay outside the pool.
    """

    segment: SharedSegment
    offset: int
    nbytes: int
    staged: SharedBuffer | None


@dataclass(frozen=True)
class _Request:
    """One run as sent: the segments it touches and the message parts."""

    src: SharedRef
    dst: SharedRef
    blob: bytes
    njobs: int
    nprotect: int
    kept: KeptRuns | None = None  # where the tokens of outputs kept on the device go
    ndevice: int = 0  # device-only ranges at the blob's end

    def message(self, rid: int) -> tuple[wire.Run, bytes]:
        return wire.Run(rid=rid, src_seg=self.src.segment.id, src_offset=self.src.offset,
                        src_nbytes=self.src.nbytes, dst_seg=self.dst.segment.id, dst_offset=self.dst.offset,
                        dst_nbytes=self.dst.nbytes, njobs=self.njobs, nprotect=self.nprotect,
                        keep=self.kept is not None, ndevice=self.ndevice), self.blob


@dataclass(frozen=True)
class _Failure:
    """A run that did not answer: why, and the batch-level error if the service sent one."""

    reason: str
    error: HwdecompError | None
    sent: bool = True  # False: the service was gone before the request left; nothing was lost under it


class ServiceClient:
    """The node's GPU service as this process sees it: a backend, and the GPU decoder (see the module docstring).

    It owns the connection (:meth:`connection`, attached afresh after a
    loss), the shared memory the service maps (``pool``), the tokens of
    outputs kept on the device (:meth:`keeping`), and both requests:
    :meth:`decompress` (the backend protocol) and :meth:`decode`.

    Parameters
    ----------
    backend : str
        The hosted backend (``"nvcomp"``, ``"hardware"``: a name of ``factories``).
    options : Options
        Sent to the service, which creates the backend with them;
        ``gpu_timeout_s`` and ``service_dir`` are read here.
    factories : mapping of str to str
        ``{name: "module:function"}`` the service may create backends from;
        part of the service's address (services of other tables are others).
    cap_bytes : int, optional
        Most bytes of shared host memory kept (default: ``pinned_cap``).
    startup_timeout_s : float
        Longest wait for the service to start and create the backend (CUDA
        initialisation included).
    gpu : str, optional
        The GPU's UUID (default: this process's device 0; ``"none"``).

    Raises
    ------
    BackendUnavailableError
        The service could not create the backend; the message says why.
    ServiceUnreachable
        No service could be reached or started.

    Attributes
    ----------
    pool : SharedPool
        This client's shared memory segments (``cap_bytes`` at most held).
    """

    # Outputs stay on the device inside keeping(), not by decompress(keep=).
    keeps_outputs = False
    lz4_checked = False  # its hosted backends are GPU backends (GpuBackend.lz4_checked)
    # A client is hosted nowhere: its requests' deadlines are the service's.
    deadline_bytes_per_s: int | None = None

    def __init__(self, backend: str, options: Options, factories: Mapping[str, str] = GPU_FACTORIES,
                 cap_bytes: int | None = None, startup_timeout_s: float = 180.0, gpu: str | None = None):
        from ..decompress.gpu_backend import pinned_cap

        self.label = backend
        self.options = options
        self.address = address_for(factories, options.service_dir or None, gpu)
        self.startup_timeout_s = startup_timeout_s
        self.restarts = 0
        self.recoveries = 0
        self.retried = 0  # batches the CPU decodes, redone on a fresh service after a loss
        self.cpu_kept = 0  # of those, batches that failed there too: the CPU's output stands
        self.timeouts = 0  # services this backend killed: a request of its own was overdue
        self.foreign_copies = 0
        self._lock = threading.Lock()
        self._closed = False
        self._attachment: Connection | None = None
        self._local = threading.local()  # the batch keeping its outputs on this thread, if any
        self.pool = SharedPool(cap_bytes or pinned_cap(options), on_free=self._forget)
        try:
            caps = self.connection().capabilities
        except BaseException:
            self.pool.close()
            raise
        self.name = caps.name
        self.algorithms = caps.algorithms
        self.max_job_bytes = caps.max_job_bytes
        self.overwrites_gaps = caps.overwrites_gaps

    # -- the attachment's life ---------------------------------------------

    def connection(self) -> Connection:
        """The connection to the service, attached afresh if the last one was lost.

        Raises
        ------
        BackendUnavailableError, ServiceUnreachable
            As at construction.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError(f"backend {self.label!r} is closed")
            att = self._attachment
            if att is None or att.gone is not None:
                if att is not None:
                    att.close()
                    self.restarts += 1
                    self._attachment = None
                att = self._attachment = Connection(self.address, self.label, self.options,
                                                     self.startup_timeout_s)
            return att

    @property
    def pid(self) -> int | None:
        """The service's process id (None while detached after a loss)."""
        att = self._attachment
        return None if att is None or att.gone is not None else att.pid

    def _forget(self, seg_id: int) -> None:
        att = self._attachment
        if att is not None and seg_id in att.shared:
            att.shared.discard(seg_id)
            att.notify(wire.Forget(seg_id))

    # -- the protocol -------------------------------------------------------

    def register_host(self, ptr: int, nbytes: int) -> None:
        """None: this process's buffers are shared memory, which the service registers."""
        return None

    def host_buffer(self, nbytes: int):
        """A buffer in shared memory the service maps in place (``close()`` gives it back).

        Raises
        ------
        MemoryError
        """
        return self.pool.get(nbytes)

    @contextlib.contextmanager
    def keeping(self) -> Iterator[KeptRuns]:
        """Inside the block, this thread's runs keep their outputs on the device for a decode.

        Yields the :class:`~dask_hwdecomp.service.keeping.KeptRuns` their
        tokens are recorded in; tokens not taken by a decode are dropped in
        the service when the block ends.
        """
        saved = getattr(self._local, "kept", None)
        kept = self._local.kept = KeptRuns()
        try:
            yield kept
        finally:
            self._local.kept = saved
            kept.drop_all()

    def decompress(self, jobs: Sequence[Job] | JobTable, src: memoryview, dst: memoryview,
                   protect: Sequence[tuple[int, int]] = (), keep: Any = None) -> int:
        """Decompress ``jobs`` in the service; outputs are in ``dst`` on return.

        ``src`` and ``dst`` not from :meth:`host_buffer` are copied through
        shared buffers (slower; counted in ``stats()["foreign_copies"]``).
        ``keep`` must be None: outputs are kept on the device for a decode
        inside :meth:`keeping`, whose tokens this client holds.
        Returns the pages the service's backend redid on the CPU (see
        :meth:`GpuBackend.decompress <dask_hwdecomp.decompress.gpu_backend.GpuBackend.decompress>`).

        Raises
        ------
        CorruptPageError
            A page failed (named).
        GpuBatchFailedError
            The GPU service was lost or failed the batch twice, and the CPU
            decodes every page: the CPU's output is in ``dst`` (see the
            module docstring).
        ServiceUnreachable
            No service can be reached or started (nothing was decompressed).
        """
        if keep is not None:
            raise ValueError("a service client keeps outputs on the device inside keeping(), not by keep=")
        jobs = as_table(jobs)
        if not len(jobs):
            return 0
        mine = np.isin(jobs.algo_codes(), [ALGOS.index(a) for a in self.algorithms])
        if not mine.all():
            job = jobs.job(int(np.argmax(~mine)))
            raise CorruptPageError(f"{job.algo.value} is not decoded by {self.name}", job.location)
        staged: list[SharedBuffer] = []
        try:
            src_ref = self.shared_ref(src, staged, copy_in=True)
            # A gap-writing backend rewrites bytes between outputs: stage them too.
            dst_ref = self.shared_ref(dst, staged, copy_in=bool(self.overwrites_gaps))
            # Outputs kept on the device are named by where they lie in the
            # shared buffer: not for a staged copy.
            kept = getattr(self._local, "kept", None) if dst_ref.staged is None else None
            only = kept.device_only_within(len(dst)) if kept is not None else np.zeros((0, 2), np.int64)
            request = _Request(src_ref, dst_ref,
                               wire.pack_jobs(jobs) + wire.pack_protect(protect) + wire.pack_device_only(only),
                               len(jobs), len(protect), kept, len(only))
            nbytes = int(jobs.rows["src_size"].sum() + jobs.rows["dst_size"].sum())
            outcome = self._attempt(jobs, request, nbytes)
            if isinstance(outcome, _Failure) and not outcome.sent:
                # Lost before this batch reached it: a fresh service takes it.
                outcome = self._attempt(jobs, request, nbytes)
            if isinstance(outcome, _Failure):
                self._recover(jobs, src, dst, outcome)
            if dst_ref.staged is not None and dst_ref.staged.view is not None:
                memoryview(dst).cast("B")[:] = dst_ref.staged.view[: dst_ref.nbytes]
            return outcome
        finally:
            for buf in staged:
                buf.close()

    def shared_ref(self, view: memoryview, staged: list, copy_in: bool) -> SharedRef:
        """Where ``view`` lies in this client's shared memory, staged through a pool buffer if it lies elsewhere.

        Parameters
        ----------
        view : memoryview
            A caller's buffer.
        staged : list
            Gets the staging buffer, if one was taken: the caller closes it
            once the service is done with it.
        copy_in : bool
            Copy ``view``'s bytes into the staging buffer (an input; an
            output is copied back by the caller).
        """
        view = memoryview(view).cast("B")
        n = len(view)
        found = None
        if n:
            found = self.pool.find(int(np.frombuffer(view, dtype=np.uint8).ctypes.data), n)
        if found is not None:
            seg, off = found
            return SharedRef(seg, off, n, None)
        buf = self.pool.get(max(n, 1))
        staged.append(buf)
        segment, buf_view = buf.segment, buf.view
        if segment is None or buf_view is None:  # a fresh buffer is open
            raise RuntimeError("the shared pool lent a closed buffer")
        self.foreign_copies += 1
        if copy_in:
            buf_view[:n] = view
        return SharedRef(segment, 0, n, buf)

    def _attempt(self, jobs: Sequence[Job] | JobTable, request: _Request, nbytes: int) -> int | _Failure:
        """Run once: on success the pages the service redid on the CPU, else a :class:`_Failure`.

        ``nbytes``: the jobs' bytes in and out, which the deadline grants time for.

        Raises
        ------
        CorruptPageError
            The service named a failed page.
        ServiceUnreachable
            No service can be reached or started.
        """
        att = self.connection()
        try:
            att.share(request.src.segment)
            att.share(request.dst.segment)
            flight = att.request(request.message)
        except ServiceGone as gone:
            return _Failure(f"was gone ({gone.reason})", None, sent=False)
        except OSError as exc:
            att.die(f"closed its connection ({exc})")
            return _Failure(f"was gone (closed its connection: {exc})", None, sent=False)
        try:
            reply = flight.wait(nbytes, self.options.gpu_timeout_s, self.options.batch_latency_ms / 1000)
        except Overdue as late:
            self.timeouts += 1
            att.kill(late.reason)
            return _Failure(late.reason, None)
        except ServiceGone as gone:
            return _Failure(f"died ({gone.reason})", None)
        except OSError as exc:
            att.die(f"closed its connection ({exc})")
            return _Failure(f"died (closed its connection: {exc})", None)
        if isinstance(reply, wire.Done):
            if request.kept is not None and reply.kept >= 0:
                request.kept.add(att, request.dst.segment.id, request.dst.offset, request.dst.nbytes, reply.kept,
                                 device_only=request.ndevice > 0)
            return reply.redone
        if isinstance(reply, wire.Corrupt):
            if not 0 <= reply.index < len(jobs):
                raise HwdecompError(f"the GPU service named page {reply.index} of a batch of {len(jobs)}")
            raise wire.corrupt_error(reply, jobs[reply.index].location)
        if isinstance(reply, wire.Refused):
            raise HwdecompError(f"the GPU service refused a batch: {reply.reason}")
        if not isinstance(reply, wire.Failed):
            raise HwdecompError(f"the GPU service answered a batch with {type(reply).__name__}")
        # The batch failed as a whole; the service exits (its context cannot be trusted).
        att.kill(f"failed a batch ({reply.error_type}: {reply.message})")
        error = wire.failure_error(reply)
        return _Failure(f"failed the batch as a whole ({reply.message})", error)

    def _recover(self, jobs: Sequence[Job] | JobTable, src, dst, failure: _Failure) -> NoReturn:
        """Decode the batch on the CPU: name its bad page, or keep the CPU's output.

        Every batch in flight when the service was lost comes here, the
        innocent ones too (their pages shared a GPU call, or the GPU, with
        the bad one): the CPU tells them apart. A page the CPU rejects is
        the batch's :class:`CorruptPageError`. A batch the CPU decodes has
        its output in ``dst`` by then, so it is not sent to the GPU again
        (a fresh service takes seconds to start: sent again, an innocent
        batch waited for it, and a bad page the CPU decodes took that
        service down too): :class:`GpuBatchFailedError` says so. That
        holds for a call that failed as a whole (a CUDA error: the bad
        page's illegal address fails every task whose pages shared its
        call) as for a death or a hang.
        """
        reason, exc = failure.reason, failure.error
        self.recoveries += 1
        what = f"the {self.label} GPU service {reason} on this batch of {len(jobs)} pages; it was restarted"
        # Released before raising: the exception's frames must not keep the shared buffers exported.
        with memoryview(src).cast("B") as src_v, memoryview(dst).cast("B") as dst_v:
            for job in jobs:  # the caller's order: the first bad page is the one named
                try:
                    decompress_one(job, src_v, dst_v)
                except CorruptPageError as bad:  # ChecksumError stays one
                    failed = bad
                    break
            else:
                failed = None
        if failed is not None:
            raise type(failed)(f"{what}; on the CPU: {failed.reason}", failed.location) from exc
        self.cpu_kept += 1
        raise GpuBatchFailedError(f"{what}; the CPU decodes every page: its output is used") from exc

    def decode(self, plan, src: memoryview, kept: KeptRuns | None = None) -> DecodeOutput:
        """Decode ``plan``'s column chunks in the service (:func:`~dask_hwdecomp.service.decoding.decode_in_service`).

        Parameters
        ----------
        plan : DecodePlan
            From :func:`dask_hwdecomp.gpudecode.plan.plan_batch`.
        src : memoryview
            The host buffer the plan's ranges read (the batch's pages).
        kept : KeptRuns, optional
            The batch's runs whose outputs the service kept on the device.

        Raises
        ------
        CorruptPageError, BackendUnavailableError, DecoderLost
        """
        return decode_in_service(self, plan, src, kept)

    def stats(self) -> dict:
        """The shared pool (``pinned_*``), the service's counters and its backend's, this client's faults.

        This client's: ``restarts`` (services it attached to again after a
        loss), ``recoveries`` (batches whose service was lost under them),
        ``cpu_kept`` (of those, batches the CPU decodes, whose CPU output
        stood), ``retried`` (decodes sent again to a fresh service after a
        loss), ``timeouts`` (services it killed: a request of its own was
        overdue), ``spare_*`` (the ordinary memory its copied outputs
        landed in: reused, fresh, kept unused; :mod:`.spares`).

        Raises
        ------
        ServiceGone, ServiceUnreachable
        """
        att = self.connection()
        reply = att.request(lambda rid: (wire.StatsRequest(rid), b"")).answer.result(timeout=60)
        if not isinstance(reply, wire.Stats):
            raise HwdecompError(f"the GPU service answered a stats request with {type(reply).__name__}")
        out = {f"pinned_{k}": v for k, v in self.pool.stats().items()}
        out["restarts"] = self.restarts
        out["recoveries"] = self.recoveries
        out["retried"] = self.retried
        out["cpu_kept"] = self.cpu_kept
        out["timeouts"] = self.timeouts
        out["foreign_copies"] = self.foreign_copies
        out.update(spare_stats(self))
        out.update(reply.values)
        return out

    def close(self) -> None:
        """Leave the service, then free the shared pool."""
        with self._lock:
            self._closed = True
            att, self._attachment = self._attachment, None
        try:
            if att is not None:
                att.close()
        finally:
            self.pool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
