"""A GPU backend whose work runs in the node's GPU service.

:class:`ServiceBackend` implements the backend protocol in the process that
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
  batch. If every page decodes, the batch is retried once on a fresh
  service (it was innocent: it only shared the GPU, or a call, with the
  bad one); failing again raises ``CorruptPageError`` saying the GPU failed
  on a batch the CPU decodes, which the router redoes on the CPU only with
  ``cpu_retry``, or, for a batch-level error, that error as it was;
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
import fcntl
import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as wait_for_first
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..decompress.backends import BACKEND_MODULES
from ..decompress.cpu import decompress_one
from ..errors import (
    BackendUnavailableError,
    ChecksumError,
    CorruptPageError,
    HwdecompError,
    PageLocation,
)
from ..gpu.errors import CudaError, NvcompError
from ..jobs import ALGOS, Algo, Job, JobTable, as_table
from ..options import Options
from . import wire
from .deadline import deadline_s
from .keeping import KeptRuns
from .rundir import ServiceAddress, ServiceUnreachable, address_for
from .shm import SharedBuffer, SharedPool, SharedSegment
from .sockets import peer_of

__all__ = ["ServiceBackend", "ServiceGone", "Overdue", "GPU_FACTORIES", "start_service", "service_command", "connect", "query", "node_stats", "wait_for_exit"]

# The backends a node's GPU service hosts, in its one CUDA context.
GPU_FACTORIES: Mapping[str, str] = {
    name: f"{module}:create" for name, module in BACKEND_MODULES.items() if module is not None
}

_ERRORS = {c.__name__: c for c in (CorruptPageError, ChecksumError, CudaError, NvcompError,
                                     BackendUnavailableError, HwdecompError)}


class ServiceGone(HwdecompError):
    """The GPU service died, was killed, or did not answer in time."""


class Overdue(HwdecompError):
    """The GPU service did not answer a request within its deadline; the reason says which."""


class _TakenUp(NamedTuple):
    """When the service took a request up (this process's clock), and what it said then."""

    at: float
    ahead: int
    bytes_per_s: int


class _InFlight:
    """A request sent to the service: its answer and, once the service says so, when it was taken up."""

    __slots__ = ("sent", "answer", "started")

    def __init__(self) -> None:
        self.sent = time.monotonic()
        self.answer: Future = Future()
        self.started: Future = Future()  # a _TakenUp

    def wait(self, nbytes: int, limit_s: float, wait_s: float = 0.0) -> wire.Message:
        """The answer, within the request's deadline (:func:`~dask_hwdecomp.service.deadline.deadline_s`).

        Parameters
        ----------
        nbytes : int
            The request's bytes in and out.
        limit_s : float
            ``gpu_timeout_s``: the longest wait from when it was sent.
        wait_s : float
            How long the service's batcher may hold it for other parts.

        Raises
        ------
        Overdue
            No answer in time (the caller kills the service).
        ServiceGone
            The service was lost first.
        """
        until = self.sent + limit_s
        wait_for_first([self.answer, self.started], timeout=max(until - time.monotonic(), 0.0),
                       return_when=FIRST_COMPLETED)
        if self.started.done():
            up = self.started.result()
            allowed = deadline_s(up.ahead + nbytes, up.bytes_per_s, limit_s, wait_s)
            reason = f"did not answer within {limit_s:g} s (gpu_timeout_s)"
            if up.at + allowed < until:
                until = up.at + allowed
                reason = (f"did not answer within {allowed:.1f} s of taking the request up ({_size(nbytes)} "
                          f"in and out, {_size(up.ahead)} ahead of it, at {_size(up.bytes_per_s)}/s)")
        else:
            reason = f"did not take the request up within {limit_s:g} s (gpu_timeout_s)"
        try:
            lost = self.answer.exception(timeout=max(until - time.monotonic(), 0.0))
        except FutureTimeout:
            raise Overdue(reason) from None
        if lost is not None:
            # A fresh exception: the future's own, raised, would hold this
            # frame (and the request's buffers) in a cycle with the future.
            raise ServiceGone(lost.reason if isinstance(lost, HwdecompError) else str(lost)) from None
        return self.answer.result()


def _size(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if nbytes < 1024:
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} GiB"


def service_command(address: ServiceAddress, idle_s: float = 2.0, persist: bool = False) -> tuple[list, dict]:
    """(argv, environment) of a service process for ``address``: it sees only the address's GPU."""
    env = dict(os.environ)
    if address.gpu != "none":
        env["CUDA_VISIBLE_DEVICES"] = address.gpu
    cmd = [sys.executable, "-m", "dask_hwdecomp.service", "--socket", str(address.socket),
           "--gpu", address.gpu, "--idle-s", str(idle_s)]
    cmd += [a for name, factory in address.factories for a in ("--backend", f"{name}={factory}")]
    if persist:
        cmd.append("--persist")
    return cmd, env


def start_service(address: ServiceAddress) -> subprocess.Popen:
    """Start a service process for ``address`` (it exits at once if one already listens).

    It runs in a session of its own (it outlives its starter), and logs to
    ``address.log``.

    Raises
    ------
    ServiceUnreachable
        The process cannot be started.
    """
    cmd, env = service_command(address)
    try:
        with open(address.log, "ab") as log:
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    start_new_session=True, close_fds=True)
    except OSError as exc:
        raise ServiceUnreachable(f"cannot start the GPU service: {exc}") from None
    with _started_lock:
        for pid in [pid for pid, p in _started.items() if p.poll() is not None]:
            del _started[pid]  # reaped
        _started[proc.pid] = proc
    return proc


# Services this process started, by pid: their exit status says how one died.
_started: dict[int, subprocess.Popen] = {}
_started_lock = threading.Lock()


def _how_it_ended(pid: int) -> str:
    with _started_lock:
        proc = _started.get(pid)
    if proc is None:
        return "closed its connection"
    try:
        return f"exited with status {proc.wait(timeout=30)}"
    except subprocess.TimeoutExpired:
        return "closed its connection"


class _StartLock:
    """The right to start the service of an address, held by one reading process at a time.

    Readers that start together (the workers of a new cluster) would each
    start a service, and all but one would exit again; the one holding this
    lock starts it and the others wait for it to listen. The lock is a
    ``flock``: it is released when its holder closes it or dies.
    """

    def __init__(self, path: Path):
        try:
            self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise ServiceUnreachable(f"cannot start the GPU service: {exc}") from None

    def acquired(self) -> bool:
        """Take the lock if nobody holds it (never blocks)."""
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # type: ignore[arg-type]
        except BlockingIOError:
            return False
        return True

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def connect(address: ServiceAddress, timeout_s: float, start: bool = True) -> socket.socket:
    """A connection to the service of ``address``, started if none listens.

    Raises
    ------
    ServiceUnreachable
        None listens (``start=False``), or the one started exited or did not
        listen within ``timeout_s``; or the peer is not this user's process.
    """
    deadline = time.monotonic() + timeout_s
    proc: subprocess.Popen | None = None
    lock: _StartLock | None = None
    try:
        while True:
            sock = _attempt_connect(address)
            if sock is not None:
                return sock
            if not start:
                raise ServiceUnreachable(f"no GPU service listens on {address.socket}")
            if proc is None:
                if lock is None:
                    lock = _StartLock(address.start_lock)
                if lock.acquired():  # else another reader is starting it: wait for it to listen
                    proc = start_service(address)
            elif proc.poll() not in (None, 0):
                raise ServiceUnreachable(
                    f"the GPU service exited with status {proc.returncode} at start "
                    f"(its log: {address.log})")
            elif proc.poll() == 0:
                proc = None  # another service took the socket: connect to it
            if time.monotonic() > deadline:
                raise ServiceUnreachable(f"the GPU service did not listen within {timeout_s:.0f} s "
                                         f"(its log: {address.log})")
            time.sleep(0.02)
    finally:
        if lock is not None:
            lock.close()


def _attempt_connect(address: ServiceAddress) -> socket.socket | None:
    """A connection to the listening service, or None when none listens.

    Raises
    ------
    ServiceUnreachable
        The socket cannot be reached for another reason, or its peer is
        not this user's process.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(address.socket))
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None
    except OSError as exc:
        sock.close()
        raise ServiceUnreachable(f"cannot reach the GPU service at {address.socket}: {exc}") from None
    peer = peer_of(sock)
    if peer.uid != os.getuid():
        sock.close()
        raise ServiceUnreachable(f"the GPU service socket {address.socket} belongs to uid {peer.uid}")
    return sock


def query(socket_path, msg: wire.Message, timeout_s: float = 10.0) -> wire.Message | None:
    """Send ``msg`` (a ``StatsRequest`` or ``Stop``) to a running service without attaching.

    Returns its reply (None for ``Stop``, which has none).

    Raises
    ------
    ServiceUnreachable
        None listens there.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        try:
            sock.connect(str(socket_path))
        except OSError as exc:
            raise ServiceUnreachable(f"no GPU service listens on {socket_path}: {exc}") from None
        wire.send(sock, msg)
        if isinstance(msg, wire.Stop):
            return None
        reply, _, fds = wire.receive(sock)
        for fd in fds:
            os.close(fd)
        return reply
    finally:
        sock.close()


def wait_for_exit(pid: int, timeout_s: float) -> bool:
    """Whether service ``pid`` exited within ``timeout_s`` (reaped if this process started it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # another user's process: not a service of ours
            return False
        try:  # a service this process started stays a zombie until reaped
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


def node_stats(directory) -> list[dict]:
    """The counters of every service listening in ``directory`` (stale sockets skipped)."""
    out: list[dict] = []
    if not Path(directory).is_dir():
        return out
    for path in sorted(Path(directory).glob("*.sock")):
        try:
            reply = query(path, wire.StatsRequest(0))
        except (ServiceUnreachable, OSError, EOFError, wire.WireError):
            continue  # its service is gone
        if isinstance(reply, wire.Stats):
            out.append({"socket": str(path), **reply.values})
    return out


@dataclass(frozen=True)
class _Capabilities:
    """What the attached backend said in its Hello."""

    name: str
    algorithms: frozenset
    max_job_bytes: int | None
    overwrites_gaps: bool


class _Attachment:
    """One connection to the service, attached to one hosted backend.

    Raises
    ------
    BackendUnavailableError
        The service could not create the backend (the message says why).
    ServiceUnreachable
        No service could be reached, or it refused us.
    """

    def __init__(self, address: ServiceAddress, backend: str, options: Options, timeout_s: float):
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._pending: dict[int, _InFlight] = {}
        self._ids = itertools.count(1)
        self.shared: set[int] = set()
        self.gone: str | None = None
        for attempt in range(3):
            self.sock = connect(address, timeout_s)
            self.pid = peer_of(self.sock).pid
            try:
                hello = self._attach(backend, options, timeout_s)
                break
            except EOFError:  # it was leaving as we came (idle): a fresh one takes the socket
                self.sock.close()
                if attempt == 2:
                    raise ServiceUnreachable("the GPU service closed every attach") from None
            except BaseException:
                self.sock.close()
                raise
        self.capabilities = hello
        self._reader = threading.Thread(target=self._read, name=f"hwdecomp-service-{self.pid}", daemon=True)
        self._reader.start()

    def _attach(self, backend: str, options: Options, timeout_s: float) -> _Capabilities:
        self.sock.settimeout(timeout_s)
        try:
            try:
                wire.send(self.sock, wire.Attach(backend, options.to_dict(), os.getpid()))
            except OSError:
                pass  # it may have refused us before reading: its answer is still there
            msg, _, fds = wire.receive(self.sock)
        except TimeoutError:
            raise BackendUnavailableError(
                f"the GPU service did not create backend {backend!r} within {timeout_s:.0f} s") from None
        except OSError:
            raise EOFError from None
        finally:
            self.sock.settimeout(None)
        for fd in fds:
            os.close(fd)
        if isinstance(msg, wire.Unavailable):
            raise BackendUnavailableError(
                f"backend {backend!r} cannot start in the GPU service: {msg.error_type}: {msg.message}")
        if isinstance(msg, wire.Refused):
            raise ServiceUnreachable(f"the GPU service refused to attach: {msg.reason}")
        if not isinstance(msg, wire.Hello):
            raise ServiceUnreachable(f"the GPU service answered Attach with {type(msg).__name__}")
        return _Capabilities(msg.name, frozenset(Algo(a) for a in msg.algorithms), msg.max_job_bytes,
                             msg.overwrites_gaps)

    def send(self, msg: wire.Message, blob: bytes = b"", fds: Sequence[int] = ()) -> None:
        with self._send_lock:
            wire.send(self.sock, msg, blob, fds)

    def share(self, segment: SharedSegment) -> None:
        """Pass ``segment``'s descriptor to the service once on this connection."""
        with self._send_lock:  # checked and sent together: shared exactly once
            if segment.id not in self.shared:
                wire.send(self.sock, wire.Share(segment.id, segment.nbytes), fds=[segment.fd])
                self.shared.add(segment.id)

    def request(self, make) -> _InFlight:
        """Send ``make(rid)`` (and its blob); the request's ``answer`` future gets the reply message.

        Raises
        ------
        ServiceGone
            The service was gone already (nothing was sent).
        """
        flight = _InFlight()
        with self._lock:
            if self.gone is not None:
                raise ServiceGone(self.gone)
            rid = next(self._ids)
            self._pending[rid] = flight
        msg, blob = make(rid)
        try:
            self.send(msg, blob)
        except OSError:
            self.die("closed its connection")
        return flight

    def notify(self, msg: wire.Message) -> None:
        """Send a message that has no reply (ignored once the service is gone)."""
        if self.gone is None:
            try:
                self.send(msg)
            except OSError:
                pass

    def _read(self) -> None:
        reason = ""
        failed = ""  # the last batch-level failure the service sent: why it then exits
        while True:
            try:
                msg, _, fds = wire.receive(self.sock)
            except (EOFError, OSError):
                break
            except wire.WireError as exc:
                reason = f"sent a message that fails validation ({exc})"
                break
            for fd in fds:
                os.close(fd)
            rid = getattr(msg, "rid", None)
            if isinstance(msg, wire.Refused) and rid == -1:
                reason = f"refused a message ({msg.reason})"
                break
            if isinstance(msg, wire.Started):
                with self._lock:
                    flight = self._pending.get(msg.rid)
                if flight is not None and not flight.started.done():
                    flight.started.set_result(_TakenUp(time.monotonic(), msg.ahead, msg.bytes_per_s))
                continue
            if isinstance(msg, wire.Failed) and msg.error_type != BackendUnavailableError.__name__:
                failed = f"failed a batch ({msg.error_type}: {msg.message})"
            with self._lock:
                flight = self._pending.pop(rid, None) if rid is not None else None
            if flight is not None:
                flight.answer.set_result(msg)
        if not reason and self.gone is None:
            # The service ended the connection: its exit status says how.
            # Not when this side let go (close, kill): waiting for the
            # status would hold close() until the service exits, idle_s later.
            # A service that failed a call exits at once, and the requests
            # that shared that call are told which failure took it down, as
            # when the reader that got the failure kills it first.
            reason = _how_it_ended(self.pid)
            if failed:
                reason = f"{reason} after another request {failed}"
        self.die(reason)

    def die(self, reason: str) -> None:
        """Mark the service gone for us and fail every request in flight (first reason wins)."""
        with self._lock:
            if self.gone is None:
                self.gone = reason
            pending, self._pending = self._pending, {}
        for flight in pending.values():
            flight.answer.set_exception(ServiceGone(self.gone))

    def kill(self, reason: str) -> None:
        """Kill the service (it hung, or its context is lost): every client restarts it.

        ``reason`` is what one request of this connection met; the others
        in flight are told the service was killed for it.
        """
        self.die(f"killed by this reader: another request {reason}")
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass
        self.close()

    def close(self) -> None:
        """Leave the service (it exits once its last client has left)."""
        self.die("closed")
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        reader = getattr(self, "_reader", None)
        if reader is not None and reader is not threading.current_thread():
            reader.join(timeout=5)


@dataclass(frozen=True)
class _BufferRef:
    """Where a caller's view lies in a shared segment, and the staging buffer if copied."""

    segment: SharedSegment
    offset: int
    nbytes: int
    staged: SharedBuffer | None


@dataclass(frozen=True)
class _Request:
    """One run as sent: the segments it touches and the message parts."""

    src: _BufferRef
    dst: _BufferRef
    blob: bytes
    njobs: int
    nprotect: int
    kept: KeptRuns | None = None  # where the tokens of outputs kept on the device go

    def message(self, rid: int) -> tuple[wire.Run, bytes]:
        return wire.Run(rid, self.src.segment.id, self.src.offset, self.src.nbytes, self.dst.segment.id,
                        self.dst.offset, self.dst.nbytes, self.njobs, self.nprotect,
                        self.kept is not None), self.blob


@dataclass(frozen=True)
class _Failure:
    """A run that did not answer: why, and the batch-level error if the service sent one."""

    reason: str
    error: HwdecompError | None


class ServiceBackend:
    """A backend whose work runs in the node's GPU service (see the module docstring).

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
    """

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
        self.timeouts = 0  # services this backend killed: a request of its own was overdue
        self.foreign_copies = 0
        self._lock = threading.Lock()
        self._closed = False
        self._attachment: _Attachment | None = None
        self._local = threading.local()  # the batch keeping its outputs on this thread, if any
        self._pool = SharedPool(cap_bytes or pinned_cap(options), on_free=self._forget)
        try:
            caps = self._attached().capabilities
        except BaseException:
            self._pool.close()
            raise
        self.name = caps.name
        self.algorithms = caps.algorithms
        self.max_job_bytes = caps.max_job_bytes
        self.overwrites_gaps = caps.overwrites_gaps

    # -- the attachment's life ---------------------------------------------

    def _attached(self) -> _Attachment:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"backend {self.label!r} is closed")
            att = self._attachment
            if att is None or att.gone is not None:
                if att is not None:
                    att.close()
                    self.restarts += 1
                    self._attachment = None
                att = self._attachment = _Attachment(self.address, self.label, self.options,
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

    def host_buffer(self, nbytes: int):
        """A buffer in shared memory the service maps in place (``close()`` gives it back).

        Raises
        ------
        MemoryError
        """
        return self._pool.get(nbytes)

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
                   protect: Sequence[tuple[int, int]] = ()) -> int:
        """Decompress ``jobs`` in the service; outputs are in ``dst`` on return.

        ``src`` and ``dst`` not from :meth:`host_buffer` are copied through
        shared buffers (slower; counted in ``stats()["foreign_copies"]``).
        Returns the pages the service's backend redid on the CPU (see
        :meth:`GpuBackend.decompress <dask_hwdecomp.decompress.gpu_backend.GpuBackend.decompress>`).

        Raises
        ------
        CorruptPageError
            A page failed (named), or the GPU service died or hung twice on
            a batch the CPU decodes (see the module docstring).
        CudaError, NvcompError
            The batch failed as a whole on the service and again on a fresh
            one, and the CPU decodes every page (a GPU that fails whatever
            it is given).
        ServiceUnreachable
            No service can be reached or started (nothing was decompressed).
        """
        jobs = as_table(jobs)
        if not len(jobs):
            return 0
        mine = np.isin(jobs.algo_codes(), [ALGOS.index(a) for a in self.algorithms])
        if not mine.all():
            job = jobs.job(int(np.argmax(~mine)))
            raise CorruptPageError(f"{job.algo.value} is not decoded by {self.name}", job.location)
        staged: list[SharedBuffer] = []
        try:
            src_ref = self._ref(src, staged, copy_in=True)
            # A gap-writing backend rewrites bytes between outputs: stage them too.
            dst_ref = self._ref(dst, staged, copy_in=bool(self.overwrites_gaps))
            # Outputs kept on the device are named by where they lie in the
            # shared buffer: not for a staged copy.
            kept = getattr(self._local, "kept", None) if dst_ref.staged is None else None
            request = _Request(src_ref, dst_ref, wire.pack_jobs(jobs) + wire.pack_protect(protect),
                               len(jobs), len(protect), kept)
            nbytes = int(jobs.rows["src_size"].sum() + jobs.rows["dst_size"].sum())
            outcome = self._attempt(jobs, request, nbytes)
            if isinstance(outcome, _Failure):  # raises unless a retry succeeds
                outcome = self._recover(jobs, src, dst, request, nbytes, outcome)
            if dst_ref.staged is not None and dst_ref.staged.view is not None:
                memoryview(dst).cast("B")[:] = dst_ref.staged.view[: dst_ref.nbytes]
            return outcome
        finally:
            for buf in staged:
                buf.close()

    def _ref(self, view: memoryview, staged: list, copy_in: bool) -> _BufferRef:
        view = memoryview(view).cast("B")
        n = len(view)
        found = None
        if n:
            found = self._pool.find(int(np.frombuffer(view, dtype=np.uint8).ctypes.data), n)
        if found is not None:
            seg, off = found
            return _BufferRef(seg, off, n, None)
        buf = self._pool.get(max(n, 1))
        staged.append(buf)
        segment, buf_view = buf.segment, buf.view
        if segment is None or buf_view is None:  # a fresh buffer is open
            raise RuntimeError("the shared pool lent a closed buffer")
        self.foreign_copies += 1
        if copy_in:
            buf_view[:n] = view
        return _BufferRef(segment, 0, n, buf)

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
        att = self._attached()
        try:
            att.share(request.src.segment)
            att.share(request.dst.segment)
            flight = att.request(request.message)
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
                request.kept.add(att, request.dst.segment.id, request.dst.offset, request.dst.nbytes, reply.kept)
            return reply.redone
        if isinstance(reply, wire.Corrupt):
            if not 0 <= reply.index < len(jobs):
                raise HwdecompError(f"the GPU service named page {reply.index} of a batch of {len(jobs)}")
            raise _ERRORS.get(reply.error_type, CorruptPageError)(reply.message, jobs[reply.index].location)
        if isinstance(reply, wire.Refused):
            raise HwdecompError(f"the GPU service refused a batch: {reply.reason}")
        if not isinstance(reply, wire.Failed):
            raise HwdecompError(f"the GPU service answered a batch with {type(reply).__name__}")
        # The batch failed as a whole; the service exits (its context cannot be trusted).
        att.kill(f"failed a batch ({reply.error_type}: {reply.message})")
        exc_type = _ERRORS.get(reply.error_type)
        error: HwdecompError
        if exc_type is CudaError:
            error = CudaError(reply.message, code=reply.code, name=reply.name)
        elif exc_type is not None:
            error = exc_type(reply.message)
        else:
            error = HwdecompError(f"{reply.error_type}: {reply.message}")
        return _Failure(f"failed the batch as a whole ({reply.message})", error)

    def _recover(self, jobs: Sequence[Job] | JobTable, src, dst, request: _Request, nbytes: int,
                 failure: _Failure) -> int:
        """Find the bad page on the CPU; send a batch the CPU decodes once more (its redone pages); else raise.

        Every batch in flight when the service was lost comes here, the
        innocent ones too (their pages shared a GPU call, or the GPU, with
        the bad one): the CPU tells them apart, and only a batch the CPU
        decodes is sent again, so the bad one cannot take the fresh service
        down with the innocent ones' retries. That holds for a call that
        failed as a whole (a CUDA error: the bad page's illegal address
        fails every task whose pages shared its call) as for a death or a
        hang; only a batch that fails on the fresh service too raises.
        """
        reason, exc = failure.reason, failure.error
        self.recoveries += 1
        what = f"the {self.label} GPU service {reason} on this batch of {len(jobs)} pages; it was restarted"
        src_v, dst_v = memoryview(src).cast("B"), memoryview(dst).cast("B")
        for job in jobs:  # the caller's order: the first bad page is the one named
            try:
                decompress_one(job, src_v, dst_v)
            except CorruptPageError as bad:  # ChecksumError stays one
                raise type(bad)(f"{what}; on the CPU: {bad.reason}", bad.location) from exc
        again = self._attempt(jobs, request, nbytes)
        if not isinstance(again, _Failure):
            self.retried += 1
            return again
        if exc is not None:  # the GPU fails on pages the CPU decodes: the GPU's error, as it was
            message = f"{exc.reason} ({what}; the CPU decodes every page; sent again: {again.reason})"
            if isinstance(exc, CudaError):
                raise CudaError(message, code=exc.code, name=exc.name) from None
            raise type(exc)(message) from None
        files = {j.location.file for j in jobs if j.location is not None}
        raise CorruptPageError(
            f"the {self.label} GPU service failed twice on this batch of {len(jobs)} pages ({reason}; "
            f"then {again.reason}); the CPU decodes every page of it; the service was restarted "
            "(set cpu_retry=True to decompress such batches on the CPU)",
            PageLocation(file=files.pop()) if len(files) == 1 else None,
        ) from again.error

    def stats(self) -> dict:
        """The shared pool (``pinned_*``), the service's counters and its backend's, this client's faults.

        This client's: ``restarts`` (services it attached to again after a
        loss), ``recoveries`` (batches whose service was lost under them),
        ``retried`` (of those, batches the CPU decodes, done again on a fresh
        service), ``timeouts`` (services it killed: a request of its own was
        overdue).

        Raises
        ------
        ServiceGone, ServiceUnreachable
        """
        att = self._attached()
        reply = att.request(lambda rid: (wire.StatsRequest(rid), b"")).answer.result(timeout=60)
        if not isinstance(reply, wire.Stats):
            raise HwdecompError(f"the GPU service answered a stats request with {type(reply).__name__}")
        out = {f"pinned_{k}": v for k, v in self._pool.stats().items()}
        out["restarts"] = self.restarts
        out["recoveries"] = self.recoveries
        out["retried"] = self.retried
        out["timeouts"] = self.timeouts
        out["foreign_copies"] = self.foreign_copies
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
            self._pool.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
