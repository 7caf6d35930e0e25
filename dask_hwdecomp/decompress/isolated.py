"""A GPU backend that runs in a sidecar process, so a bad page cannot kill the reader.

:class:`IsolatedBackend` implements the backend protocol in the process that
reads (a dask worker, or any caller of ``read_table``) and never creates a
CUDA context there: the real backend (nvCOMP or the hardware engine, with
its streams, pools and batcher) lives in a child process,
:mod:`dask_hwdecomp.gpu.sidecar`. Host buffers come from a pool of shared
memory segments (:mod:`dask_hwdecomp.gpu.shm`) that both processes map: the
reader fetches into them and the child copies to and from the GPU in place.

Failures, and what the caller sees:

* a page the GPU rejects (a status, a wrong size): the child names its index,
  and :class:`~dask_hwdecomp.errors.CorruptPageError` names its file, row
  group, column and page, as in process;
* the child dies (a poisoned context exits it, or it is killed), fails the
  batch as a whole, or does not answer within the deadline
  (``gpu_timeout_s`` plus time for the batch's bytes): the child is killed,
  every request in flight fails, and the next call starts a fresh child.
  Each failed batch is then decompressed on this thread by the CPU decoders
  to find the bad page: if one is corrupt, ``CorruptPageError`` names it and
  says the GPU process failed on this batch. If every page decodes, a death
  or hang is retried once on a fresh child (the batch may only have shared
  the GPU with the bad one); failing again raises ``CorruptPageError`` saying
  the GPU failed on a batch the CPU decodes, which the router redoes on the
  CPU only with ``cpu_retry``. A batch-level error is raised as it was.

The child is a fresh interpreter (``python -m``), never a fork: forking a
process that holds CUDA state is undefined, and ``multiprocessing``'s spawn
would re-run an unguarded user script and refuses to start children of a
daemonic worker process.
"""

from __future__ import annotations

import itertools
import os
import pickle
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from multiprocessing.connection import Connection

import numpy as np

from ..errors import (
    BackendUnavailableError,
    ChecksumError,
    CorruptPageError,
    HwdecompError,
    PageLocation,
)
from ..format.codecs import Algo
from ..format.layout import Job
from ..gpu.check import CudaError, NvcompError
from ..gpu.shm import SharedBuffer, SharedPool
from ..gpu.wire import pack_jobs
from ..options import Options
from .cpu import decompress_one

__all__ = ["IsolatedBackend", "SidecarGone"]

# Bytes per second the deadline grants a batch on top of gpu_timeout_s: a
# hundredth of what the GPU does, so only a hang ever reaches it.
_DEADLINE_BYTES_PER_S = 200 << 20
_ERRORS = {c.__name__: c for c in (CorruptPageError, ChecksumError, CudaError, NvcompError,
                                     BackendUnavailableError, HwdecompError)}


class SidecarGone(HwdecompError):
    """The sidecar process died, was killed, or did not answer in time."""


class _Sidecar:
    """One running child: its process, connection, reader thread and requests.

    Raises
    ------
    BackendUnavailableError
        The child could not create the backend, or did not start in time.
    """

    def __init__(self, label: str, factory: str, options: Options, startup_timeout_s: float):
        self.label = label
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._pending: dict[int, Future] = {}
        self._ids = itertools.count(1)
        self.gone: str | None = None
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        # The child imports what this process can (tests put factories on sys.path).
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "dask_hwdecomp.gpu.sidecar", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        self.pid = self.proc.pid
        self.conn = Connection(ours.detach())
        try:
            self._send({"factory": factory, "options": options, "parent_pid": os.getpid()})
            if not self.conn.poll(startup_timeout_s):
                raise BackendUnavailableError(
                    f"the GPU process of backend {label!r} did not start within {startup_timeout_s:.0f} s")
            try:
                hello = pickle.loads(self.conn.recv_bytes())
            except (EOFError, OSError):
                rc = self.proc.wait(timeout=30)
                raise BackendUnavailableError(
                    f"the GPU process of backend {label!r} exited at startup with status {rc}") from None
            if hello[0] == "unavailable":
                raise BackendUnavailableError(
                    f"backend {label!r} cannot start in its GPU process: {hello[1]}: {hello[2]}")
        except BaseException:
            self._reap(kill=True)
            raise
        _, self.name, algos, self.max_job_bytes, self.overwrites_gaps = hello
        self.algorithms = frozenset(Algo(a) for a in algos)
        self._reader = threading.Thread(target=self._read, name=f"hwdecomp-sidecar-{self.pid}", daemon=True)
        self._reader.start()

    def _send(self, msg) -> None:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        with self._send_lock:
            self.conn.send_bytes(data)

    def request(self, kind: str, *args) -> Future:
        """Send ``(kind, rid, *args)``; the future gets the reply tuple.

        Raises
        ------
        SidecarGone
        """
        fut: Future = Future()
        with self._lock:
            if self.gone is not None:
                raise SidecarGone(self.gone)
            rid = next(self._ids)
            self._pending[rid] = fut
        try:
            self._send((kind, rid, *args))
        except OSError:
            self.die("closed its connection")
        return fut

    def notify(self, *msg) -> None:
        """Send a message that has no reply (ignored once the child is gone)."""
        if self.gone is None:
            try:
                self._send(msg)
            except OSError:
                pass

    def _read(self) -> None:
        while True:
            try:
                msg = pickle.loads(self.conn.recv_bytes())
            except (EOFError, OSError):
                break
            with self._lock:
                fut = self._pending.pop(msg[1], None)
            if fut is not None:
                fut.set_result(msg)
        try:
            rc: int | str = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            rc = "unknown"
        self.die(f"exited with status {rc}")

    def die(self, reason: str) -> None:
        """Mark the child gone and fail every request in flight (first reason wins)."""
        with self._lock:
            if self.gone is None:
                self.gone = reason
            pending, self._pending = self._pending, {}
        for fut in pending.values():
            fut.set_exception(SidecarGone(self.gone))

    def kill(self, reason: str) -> None:
        """Kill the child now (it hung, or its context is lost) and reap it."""
        self.die(reason)
        self._reap(kill=True)

    def close(self, timeout_s: float = 30.0) -> None:
        """Ask the child to finish its requests and exit; kill it past ``timeout_s``."""
        if self.gone is None:
            self.notify("close")
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        self.die("closed")
        self._reap(kill=True)

    def _reap(self, kill: bool) -> None:
        if kill and self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=60)  # a process stuck in the driver takes a while
        except subprocess.TimeoutExpired:  # pragma: no cover - left to the OS
            pass
        self.conn.close()
        reader = getattr(self, "_reader", None)
        if reader is not None and reader is not threading.current_thread():
            reader.join(timeout=5)


class IsolatedBackend:
    """A backend whose work runs in a sidecar process (see the module docstring).

    Parameters
    ----------
    label : str
        The backend's name (``"nvcomp"``, ``"hardware"``), for messages.
    factory : str
        ``"module:function"``; ``function(options)`` creates the backend in
        the child (``dask_hwdecomp.decompress.nvcomp:create``).
    options : Options
        Passed to the factory; ``gpu_timeout_s`` is read here.
    cap_bytes : int, optional
        Most bytes of shared host memory kept (default: ``pinned_cap``).
    startup_timeout_s : float
        Longest wait for a child to create its backend (CUDA init included).

    Raises
    ------
    BackendUnavailableError
        The first child could not create the backend; the message says why.
    """

    def __init__(self, label: str, factory: str, options: Options, cap_bytes: int | None = None,
                 startup_timeout_s: float = 180.0):
        from .gpubase import pinned_cap

        self.label = label
        self.factory = factory
        self.options = options
        self.startup_timeout_s = startup_timeout_s
        self.restarts = 0
        self.recoveries = 0
        self.foreign_copies = 0
        self._lock = threading.Lock()
        self._closed = False
        self._sidecar: _Sidecar | None = None
        self._pool = SharedPool(cap_bytes or pinned_cap(options), on_free=self._forget)
        try:
            child = self._child()
        except BaseException:
            self._pool.close()
            raise
        self.name = child.name
        self.algorithms = child.algorithms
        self.max_job_bytes = child.max_job_bytes
        self.overwrites_gaps = child.overwrites_gaps

    # -- the child's life ---------------------------------------------------

    def _child(self) -> _Sidecar:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"backend {self.label!r} is closed")
            child = self._sidecar
            if child is None or child.gone is not None:
                if child is not None:
                    child.close(timeout_s=0)
                    self.restarts += 1
                child = self._sidecar = _Sidecar(self.label, self.factory, self.options,
                                                 self.startup_timeout_s)
            return child

    @property
    def pid(self) -> int | None:
        """The current child's process id (None before a restart starts it)."""
        child = self._sidecar
        return None if child is None or child.gone is not None else child.pid

    def _forget(self, seg_id: int) -> None:
        child = self._sidecar
        if child is not None:
            child.notify("forget", seg_id)

    # -- the protocol -------------------------------------------------------

    def host_buffer(self, nbytes: int):
        """A buffer in shared memory the child maps in place (``close()`` gives it back).

        Raises
        ------
        MemoryError
        """
        return self._pool.get(nbytes)

    def decompress(self, jobs: Sequence[Job], src: memoryview, dst: memoryview,
                   protect: Sequence[tuple[int, int]] = ()) -> int:
        """Decompress ``jobs`` in the child; outputs are in ``dst`` on return.

        ``src`` and ``dst`` not from :meth:`host_buffer` are copied through
        shared buffers (slower; counted in ``stats()["foreign_copies"]``).
        Returns the pages the child's backend redid on the CPU (see
        :meth:`GpuBackend.decompress <dask_hwdecomp.decompress.gpubase.GpuBackend.decompress>`).

        Raises
        ------
        CorruptPageError
            A page failed (named), or the GPU process died or hung twice on
            a batch the CPU decodes (see the module docstring).
        CudaError, NvcompError
            The batch failed as a whole, and the CPU decodes every page.
        """
        if not jobs:
            return 0
        for job in jobs:
            if job.algo not in self.algorithms:
                raise CorruptPageError(f"{job.algo.value} is not decoded by {self.name}", job.location)
        staged: list[SharedBuffer] = []
        try:
            src_ref = self._ref(src, staged, copy_in=True)
            # A gap-writing backend rewrites bytes between outputs: stage them too.
            dst_ref = self._ref(dst, staged, copy_in=bool(self.overwrites_gaps))
            segments = tuple({(seg.id, seg.fd, seg.nbytes) for seg in (src_ref[3], dst_ref[3])})
            request = (segments, src_ref[:3], dst_ref[:3],
                       np.asarray(protect, dtype=np.int64).reshape(-1, 2).tobytes(), pack_jobs(jobs))
            nbytes = sum(j.src_size + j.dst_size for j in jobs)
            deadline = self.options.gpu_timeout_s + nbytes / _DEADLINE_BYTES_PER_S
            outcome = self._attempt(jobs, request, deadline)
            if isinstance(outcome, tuple):  # raises unless a retry succeeds
                outcome = self._recover(jobs, src, dst, request, deadline, outcome)
            if dst_ref[4] is not None:
                memoryview(dst).cast("B")[:] = dst_ref[4].view[: dst_ref[2]]
            return outcome
        finally:
            for buf in staged:
                buf.close()

    def _ref(self, view: memoryview, staged: list, copy_in: bool):
        """(seg_id, offset, nbytes, segment, staging buffer or None) of a caller's view."""
        view = memoryview(view).cast("B")
        n = len(view)
        found = None
        if n:
            found = self._pool.find(int(np.frombuffer(view, dtype=np.uint8).ctypes.data), n)
        if found is not None:
            seg, off = found
            return seg.id, off, n, seg, None
        buf = self._pool.get(max(n, 1))
        staged.append(buf)
        segment, buf_view = buf.segment, buf.view
        if segment is None or buf_view is None:  # a fresh buffer is open
            raise RuntimeError("the shared pool lent a closed buffer")
        self.foreign_copies += 1
        if copy_in:
            buf_view[:n] = view
        return segment.id, 0, n, segment, buf

    def _attempt(self, jobs: Sequence[Job], request: tuple, deadline: float):
        """Run once in a child: on success the pages it redid on the CPU (int), else (why, error).

        Raises
        ------
        CorruptPageError
            The child named a failed page.
        """
        child = self._child()
        try:
            fut = child.request("run", *request)
            reply = fut.result(timeout=deadline)
        except FutureTimeout:
            reason = f"did not answer within {deadline:.0f} s (gpu_timeout_s)"
            child.kill(reason)
            return reason, None
        except SidecarGone as gone:
            return f"died ({gone.reason})", None
        kind = reply[0]
        if kind == "ok":
            return reply[2]
        if kind == "corrupt":
            _, _, index, cls, message = reply
            raise _ERRORS.get(cls, CorruptPageError)(message, jobs[index].location)
        _, _, cls, message, code, name = reply  # "error": the batch failed as a whole
        child.kill(f"failed a batch ({cls}: {message})")
        exc_type = _ERRORS.get(cls)
        exc: HwdecompError
        if exc_type is CudaError:
            exc = CudaError(message, code=code, name=name)
        elif exc_type is not None:
            exc = exc_type(message)
        else:
            exc = HwdecompError(f"{cls}: {message}")
        return f"failed the batch as a whole ({message})", exc

    def _recover(self, jobs, src, dst, request, deadline, failure) -> int:
        """Find the bad page on the CPU; retry a death or hang once (its redone pages); else raise."""
        reason, exc = failure
        self.recoveries += 1
        what = f"the {self.label} GPU process {reason} on this batch of {len(jobs)} pages; it was restarted"
        src_v, dst_v = memoryview(src).cast("B"), memoryview(dst).cast("B")
        for job in jobs:  # the caller's order: the first bad page is the one named
            try:
                decompress_one(job, src_v, dst_v)
            except CorruptPageError as bad:  # ChecksumError stays one
                raise type(bad)(f"{what}; on the CPU: {bad.reason}", bad.location) from exc
        if exc is not None:
            message = f"{exc.reason} ({what}; the CPU decodes every page)"
            if isinstance(exc, CudaError):
                raise CudaError(message, code=exc.code, name=exc.name) from None
            raise type(exc)(message) from None
        failure = self._attempt(jobs, request, deadline)
        if not isinstance(failure, tuple):
            return failure
        files = {j.location.file for j in jobs if j.location is not None}
        raise CorruptPageError(
            f"the {self.label} GPU process failed twice on this batch of {len(jobs)} pages ({reason}; "
            f"then {failure[0]}); the CPU decodes every page of it; the process was restarted "
            "(set cpu_retry=True to decompress such batches on the CPU)",
            PageLocation(file=files.pop()) if len(files) == 1 else None,
        ) from failure[1]

    def stats(self) -> dict:
        """The shared pool (``pinned_*``), the child's batcher and arenas, restarts."""
        child = self._child()
        reply = child.request("stats").result(timeout=60)
        out = {f"pinned_{k}": v for k, v in self._pool.stats().items()}
        out["restarts"] = self.restarts
        out["recoveries"] = self.recoveries
        out["foreign_copies"] = self.foreign_copies
        out.update({f"child_{k}" if k == "pid" else k: v for k, v in reply[2].items()})
        return out

    def close(self) -> None:
        """Stop the child (it finishes its requests first), then free the shared pool."""
        with self._lock:
            self._closed = True
            child, self._sidecar = self._sidecar, None
        try:
            if child is not None:
                child.close()
        finally:
            self._pool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
