"""The GPU service: one process per GPU and user on a node, shared by every reader.

It owns the only CUDA context on its GPU and hosts the GPU backends in it
(the hardware engine and nvCOMP, created on first attach from the factory
table it was started with). Every worker process of the node attaches over a
Unix socket (:mod:`~dask_hwdecomp.service.rundir`); the pages of all tasks of
all workers reach the same backend, whose batcher merges those that arrive
within ``batch_latency_ms`` into one batched call per stream.

Security: the socket sits in a directory of mode 0700, and each connection's
peer credentials (``SO_PEERCRED``) must name this user, else it is refused
and logged. Memory comes as file descriptors (:class:`~dask_hwdecomp.service.wire.Share`).
A message that fails validation is refused and logged, never executed.

Faults: a batch that fails as a whole (a CUDA error: nothing on the context
can be trusted after an illegal address) is reported to its caller, and the
service exits; a service that dies or hangs is killed by the client that
waited for it. Clients start a fresh service on their next call
(:mod:`~dask_hwdecomp.service.client`). So that a client can tell a hang
from a queue, the service says when it takes a request up
(:class:`~dask_hwdecomp.service.wire.Started`, with the bytes of the
requests taken up before it and not yet answered, and the rate it grants:
:mod:`~dask_hwdecomp.service.deadline`); the request's deadline counts
from there. A hosted backend may declare that rate
(``deadline_bytes_per_s``); otherwise a service on a GPU grants
:data:`~dask_hwdecomp.service.deadline.GPU_BYTES_PER_S` and one without a
GPU (the CPU stand-ins of the tests, the decoder under numba's simulator)
none, leaving only ``gpu_timeout_s``.

Life: a reader starts the service when it finds none; the service exits a
moment (``idle_s``) after its last client leaves, unless started to
``persist`` (``hwdecomp service run --persist``) or told to ``Stop``.
"""

from __future__ import annotations

import fcntl
import importlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import timeline
from ..errors import BackendUnavailableError, CorruptPageError
from ..gpudecode.checks import PlanError, check_plan
from ..gpudecode.tables import PageError
from ..options import GPU_BACKEND_OPTIONS, Options
from . import wire
from .deadline import GPU_BYTES_PER_S
from .kept import KeptStore, RunKeeper
from .rundir import ServiceAddress
from .shm import SegmentMap
from .sockets import Peer, bind, listening, peer_of

__all__ = ["Service", "Peer", "peer_of", "bind", "listening"]

logger = logging.getLogger(__name__)

# Measured decodes a client may leave waiting for their writes: each holds
# device memory until written or discarded.
MAX_PENDING_DECODES = 64


def _tokens(values: list) -> list[int]:
    """The kept-pages tokens a message names (the wire lets a list be all strings: none then)."""
    return [t for t in values if isinstance(t, int)]


def _load(factory: str):
    module, _, func = factory.partition(":")
    return getattr(importlib.import_module(module), func)


def load_run_steps() -> None:
    """Load the compiled host steps of a decompression run (numba's, from its cache or compiled).

    A run's host checks (:func:`~dask_hwdecomp.decompress.table_checks.find_suspects`)
    and its call's placement (:func:`~dask_hwdecomp.gpu.staging.place`) are
    compiled code that numba loads on first use with each argument type:
    half a second from its cache on a loaded machine, three seconds to
    compile on a cold one. Inside a run's deadline that would take a fresh
    service for hung. So they are called here with the types a run passes
    them: jobs and protected ranges as the wire unpacks them (none, or
    some), writable shared buffers.
    """
    from ..decompress.table_checks import find_suspects
    from ..errors import PageLocation
    from ..gpu.staging import Part, place
    from ..jobs import ALGOS, Algo, Job

    here = PageLocation()
    jobs = [Job(Algo.SNAPPY, 0, 8, 0, 8, 0, here, preamble=1), Job(Algo.ZSTD, 8, 8, 8, 8, 0, here)]
    src, dst = memoryview(bytearray(16)), memoryview(bytearray(16))
    for protect in ([], [(0, 1)]):
        run = wire.Run(0, 0, 0, len(src), 0, 0, len(dst), len(jobs), len(protect), False)
        table, ranges = wire.unpack_jobs(run, wire.pack_jobs(jobs) + wire.pack_protect(protect))
        find_suspects(table, src, len(src), len(dst), 1 << 20, frozenset(Algo))
        place([Part(table, src, dst, ranges)], lambda algo: 1, ALGOS.index)




@dataclass
class _Hosted:
    """One backend the service hosts, and how many connections use it."""

    backend: Any
    users: int = 0


@dataclass
class _Counters:
    connections: int = 0
    refused: int = 0
    runs: int = 0
    failed_runs: int = 0


class Service:
    """The service of one address (see the module docstring).

    Parameters
    ----------
    address : ServiceAddress
    listener : socket.socket
        From :func:`bind`; owned.
    idle_s : float
        Exit this long after the last client left.
    persist : bool
        Never exit for want of clients.
    allowed_uid : int, optional
        The only user who may attach (default: this process's).
    """

    def __init__(self, address: ServiceAddress, listener: socket.socket, idle_s: float = 2.0,
                 persist: bool = False, allowed_uid: int | None = None):
        self.address = address
        self.factories: Mapping[str, str] = dict(address.factories)
        self.idle_s = idle_s
        self.persist = persist
        self.allowed_uid = os.getuid() if allowed_uid is None else allowed_uid
        self._listener = listener
        # Whose socket file is ours to remove at exit (a successor may have replaced it).
        self._inode = os.stat(address.socket).st_ino
        self._lock = threading.Lock()
        self._hosted: dict[tuple, _Hosted] = {}
        self._connections: set[_Connection] = set()
        self._idle_since: float | None = time.monotonic()
        self._stop = threading.Event()
        self.counters = _Counters()
        self._decoder: Any = None
        self._decoder_error: str | None = None
        self._warming = False
        self._warm = threading.Event()  # set once a warm-up started has ended
        self._run_steps = threading.Event()  # set once load_run_steps has ended
        # Bytes (in and out) of the requests taken up and not yet answered,
        # by queue: the backends' batchers ("run") and the decoder ("decode").
        self._taken_lock = threading.Lock()
        self._taken = {"run": 0, "decode": 0}
        self._taken_up = 0  # requests taken up so far
        self.kept = KeptStore()

    # -- the accept loop ---------------------------------------------------

    def serve(self) -> int:
        """Accept clients until stopped or idle; then close everything. Returns 0."""
        self._listener.settimeout(0.1)
        logger.info("hwdecomp service %d listening on %s (GPU %s, backends %s)", os.getpid(),
                    self.address.socket, self.address.gpu, dict(self.factories))
        # While the first clients attach (a backend takes seconds to create on a GPU).
        threading.Thread(target=self._load_run_steps, name="hwdecomp-run-steps", daemon=True).start()
        try:
            while not self._stop.is_set():
                try:
                    sock, _ = self._listener.accept()
                except TimeoutError:
                    self._exit_if_idle()
                    continue
                except OSError:
                    break
                self._welcome(sock)
        finally:
            self._shut()
        return 0

    def warm_decoder_once(self) -> None:
        """Warm the GPU decoder up in the background, once: a client that decodes on the GPU attached.

        Not on a service without a GPU (the tests' services, whose decoder
        runs in numba's simulator).
        """
        with self._lock:
            if self._warming or self.address.gpu == "none":
                return
            self._warming = True
        threading.Thread(target=self._warm_decoder, name="hwdecomp-decoder-warm-up", daemon=True).start()

    def _warm_decoder(self) -> None:
        """Create the GPU decoder and compile (or load) its kernels before the first read needs them."""
        try:
            self.decoder().warm_up()
            logger.info("the GPU decoder is warm")
        except Exception as exc:  # the first decode reports it to its client
            logger.warning("warming the GPU decoder up failed: %s: %s", type(exc).__name__, exc)
        finally:
            self._warm.set()

    def _load_run_steps(self) -> None:
        try:
            load_run_steps()
        except Exception as exc:  # a run then loads them itself, within its deadline
            logger.warning("loading the compiled steps of a run failed: %s: %s", type(exc).__name__, exc)
        finally:
            self._run_steps.set()

    def wait_for_run_steps(self) -> None:
        """Return once :func:`load_run_steps` has ended: a run is taken up only then."""
        self._run_steps.wait()

    def wait_until_warm(self) -> None:
        """Return once the decoder's warm-up, if one was started, has ended.

        A decode is taken up only then: compiling the kernels (seconds, on a
        cold cache) is not part of any decode's deadline.
        """
        with self._lock:
            warming = self._warming
        if warming:
            self._warm.wait()

    def deadline_rate(self, backend: Any) -> int:
        """Bytes a second the deadline rule grants the requests of ``backend``'s clients (0: none known)."""
        declared = getattr(backend, "deadline_bytes_per_s", None)
        if declared is not None:
            return int(declared)
        return GPU_BYTES_PER_S if self.address.gpu != "none" else 0

    def take_up(self, queue: str, nbytes: int) -> int:
        """Count a request of ``nbytes`` into ``queue``; the bytes taken up before it, not yet answered."""
        with self._taken_lock:
            ahead = self._taken[queue]
            self._taken[queue] = ahead + nbytes
            self._taken_up += 1
        return ahead

    def put_down(self, queue: str, nbytes: int) -> None:
        """A request :meth:`take_up` counted is answered (or failed)."""
        with self._taken_lock:
            self._taken[queue] -= nbytes

    def _welcome(self, sock: socket.socket) -> None:
        sock.settimeout(None)
        peer = peer_of(sock)
        if peer.uid != self.allowed_uid:
            self.counters.refused += 1
            logger.warning("refused a connection from pid %d of uid %d: only uid %d may attach",
                           peer.pid, peer.uid, self.allowed_uid)
            try:
                wire.send(sock, wire.Refused(-1, f"uid {peer.uid} may not attach to this service"))
            except OSError:
                pass
            sock.close()
            return
        conn = _Connection(self, sock, peer)
        with self._lock:
            self._connections.add(conn)
            self._idle_since = None
            self.counters.connections += 1
        conn.start()

    def _exit_if_idle(self) -> None:
        with self._lock:
            idle = self._idle_since
        if not self.persist and idle is not None and time.monotonic() - idle >= self.idle_s:
            logger.info("no client for %.1f s: exiting", self.idle_s)
            self._stop.set()

    def stop(self, reason: str) -> None:
        """Stop accepting; clients are disconnected once their runs finish."""
        logger.info("stopping: %s", reason)
        self._stop.set()

    def _shut(self) -> None:
        with open(self.address.lock, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if os.stat(self.address.socket).st_ino == self._inode:
                    os.unlink(self.address.socket)
            except OSError:
                pass
            self._listener.close()
        with self._lock:
            conns = list(self._connections)
        for conn in conns:
            conn.hang_up()
        for conn in conns:
            conn.join()
        with self._lock:
            hosted, self._hosted = list(self._hosted.values()), {}
        for h in hosted:
            _close_backend(h.backend)
        with self._lock:
            decoder, self._decoder = self._decoder, None
        if decoder is not None:
            decoder.close()

    # -- hosted backends ---------------------------------------------------

    def attach(self, name: str, fields: dict) -> tuple[tuple, Any]:
        """(key, backend) for a client; created on first use, shared after.

        Raises
        ------
        wire.WireError
            An unknown backend name or invalid options.
        Exception
            Whatever the factory raises (the backend cannot be created).
        """
        factory = self.factories.get(name)
        if factory is None:
            raise wire.WireError(f"this service hosts {sorted(self.factories)}, not {name!r}")
        try:
            options = Options(**fields)
        except (TypeError, ValueError) as exc:
            raise wire.WireError(f"invalid options: {exc}") from None
        key = (name, *(getattr(options, f) for f in GPU_BACKEND_OPTIONS))
        with self._lock:
            hosted = self._hosted.get(key)
            if hosted is None:
                hosted = self._hosted[key] = _Hosted(_load(factory)(options))
                logger.info("created backend %s for options %s", name, key[1:])
            hosted.users += 1
            return key, hosted.backend

    def decoder(self):
        """The GPU decoder, created on first use and shared by every client.

        Raises
        ------
        BackendUnavailableError
            It cannot be created here (numba-cuda missing, no device); the
            reason is kept and given to every later caller.
        """
        with self._lock:
            if self._decoder is None and self._decoder_error is None:
                try:
                    from ..gpudecode.hosted import HostedDecoder

                    self._decoder = HostedDecoder()
                    logger.info("created the GPU decoder")
                except Exception as exc:
                    self._decoder_error = f"{type(exc).__name__}: {exc}"
                    logger.warning("the GPU decoder cannot be created: %s", self._decoder_error)
            if self._decoder is None:
                raise BackendUnavailableError(f"the GPU decoder cannot run in the service: {self._decoder_error}")
            return self._decoder

    def detach(self, key: tuple | None, conn: _Connection) -> None:
        """A connection left: close its backend if nobody else uses it."""
        closing = None
        with self._lock:
            self._connections.discard(conn)
            hosted = self._hosted.get(key) if key is not None else None
            if hosted is not None:
                hosted.users -= 1
                if hosted.users == 0:
                    closing = self._hosted.pop(key).backend  # type: ignore[arg-type]
            if not self._connections:
                self._idle_since = time.monotonic()
        if closing is not None:
            _close_backend(closing)

    def stats(self) -> dict:
        """The service's counters, the bytes of requests taken up, the GPU calls and pages of its backends."""
        with self._lock:
            out = {"service_pid": os.getpid(), "gpu": self.address.gpu,
                   "clients": sum(1 for c in self._connections if c.key is not None),
                   "hosted_backends": len(self._hosted), "connections": self.counters.connections,
                   "refused": self.counters.refused, "runs": self.counters.runs}
            hosted = [h.backend for h in self._hosted.values()]
            decoder = self._decoder
            maps = [c.segments for c in self._connections]
        with self._taken_lock:  # requests taken up and not yet answered, in bytes in and out
            out["taken_run_bytes"] = self._taken["run"]
            out["taken_decode_bytes"] = self._taken["decode"]
            out["taken_up"] = self._taken_up
        # Page-locking the connected clients' segments (on each connection's reader thread).
        out["all_host_registrations"] = sum(m.registrations for m in maps)
        out["all_host_register_s"] = round(sum(m.register_s for m in maps), 6)
        out["all_host_pinned_bytes"] = sum(m.pinned_bytes for m in maps)
        if decoder is not None:
            out.update(decoder.stats())
            out.update(self.kept.stats())
        calls = pages = 0
        for backend in hosted:
            stats = getattr(backend, "stats", None)
            values = stats() if stats is not None else {}
            calls += int(values.get("calls", 0))
            pages += int(values.get("pages", 0))
        return {**out, "gpu_calls": calls, "gpu_pages": pages}


def _close_backend(backend) -> None:
    try:
        backend.close()
    except Exception:  # closing the rest matters more
        logger.exception("closing a backend failed")


@dataclass(eq=False)
class _Connection:
    """One client: its reader thread, its segments, its runs in flight."""

    service: Service
    sock: socket.socket
    peer: Peer
    key: tuple | None = None
    backend: Any = None
    segments: SegmentMap = field(default_factory=SegmentMap)
    rate: int = 0  # bytes a second its requests' deadlines grant (Service.deadline_rate)
    runs: set = field(default_factory=set)
    decodes: dict = field(default_factory=dict)  # measure rid -> PendingDecode
    send_lock: threading.Lock = field(default_factory=threading.Lock)
    lock: threading.Lock = field(default_factory=threading.Lock)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._serve, name=f"hwdecomp-client-{self.peer.pid}", daemon=True)
        self.thread.start()

    def send(self, msg: wire.Message) -> None:
        try:
            with self.send_lock:
                wire.send(self.sock, msg)
        except OSError:
            pass  # the client is gone; its reader loop ends on EOF

    def hang_up(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass

    def join(self) -> None:
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join()

    def _refuse(self, rid: int, reason: str) -> None:
        self.service.counters.refused += 1
        logger.warning("refused a message from pid %d: %s", self.peer.pid, reason)
        self.send(wire.Refused(rid, reason))

    def _serve(self) -> None:
        try:
            if self._attach():
                self._loop()
        finally:
            with self.lock:
                runs = list(self.runs)
            for t in runs:
                t.join()
            with self.lock:
                pending, self.decodes = list(self.decodes.values()), {}
            for p in pending:
                p.close()
            self.service.kept.drop(self)
            self.segments.close()
            self.sock.close()
            self.service.detach(self.key, self)

    def _attach(self) -> bool:
        try:
            msg, _, fds = wire.receive(self.sock)
        except (EOFError, OSError):
            return False
        except wire.WireError as exc:
            self._refuse(-1, str(exc))
            return False
        for fd in fds:
            os.close(fd)
        if isinstance(msg, wire.StatsRequest):  # hwdecomp service status
            self.send(wire.Stats(msg.rid, self.service.stats()))
            return False
        if isinstance(msg, wire.Stop):  # hwdecomp service stop
            self.service.stop(f"asked by pid {self.peer.pid}: {msg.reason}")
            return False
        if not isinstance(msg, wire.Attach):
            self._refuse(-1, f"the first message must be Attach, not {type(msg).__name__}")
            return False
        try:
            self.key, self.backend = self.service.attach(msg.backend, dict(msg.options))
        except wire.WireError as exc:
            self._refuse(-1, str(exc))
            return False
        except BaseException as exc:  # the factory failed: the client raises it
            logger.warning("backend %s cannot be created: %s: %s", msg.backend, type(exc).__name__, exc)
            self.send(wire.Unavailable(type(exc).__name__, str(exc)))
            return False
        if msg.options.get("decode", "cpu") != "cpu":
            self.service.warm_decoder_once()
        b = self.backend
        self.rate = self.service.deadline_rate(b)
        register = getattr(b, "register_host", None)
        self.segments = SegmentMap(register)
        self.send(wire.Hello(b.name, sorted(a.value for a in b.algorithms), b.max_job_bytes,
                             bool(getattr(b, "overwrites_gaps", False)), os.getpid()))
        return True

    def _loop(self) -> None:
        while True:
            try:
                msg, blob, fds = wire.receive(self.sock)
            except (EOFError, OSError):
                return
            except wire.FrameError as exc:
                self._refuse(-1, str(exc))
                return
            except wire.WireError as exc:
                self._refuse(-1, str(exc))
                continue
            if isinstance(msg, wire.Share):
                if len(fds) != 1:
                    for fd in fds:
                        os.close(fd)
                    self._refuse(-1, f"Share carried {len(fds)} descriptors, not 1")
                    continue
                try:
                    self.segments.add(msg.seg_id, fds[0])
                except OSError as exc:
                    self._refuse(-1, f"segment {msg.seg_id} cannot be mapped: {exc}")
                continue
            for fd in fds:
                os.close(fd)
            if isinstance(msg, wire.Run):
                self._start_run(msg, blob)
            elif isinstance(msg, wire.Measure):
                self._start(msg.rid, self._measure, msg, blob)
            elif isinstance(msg, wire.Write):
                self._start(msg.rid, self._write, msg, blob)
            elif isinstance(msg, wire.Discard):
                with self.lock:
                    pending = self.decodes.pop(msg.measure, None)
                if pending is not None:
                    pending.close()
            elif isinstance(msg, wire.Drop):
                self.service.kept.drop(self, _tokens(msg.kept))
            elif isinstance(msg, wire.Forget):
                self.segments.forget(msg.seg_id)
            elif isinstance(msg, wire.StatsRequest):
                self.send(wire.Stats(msg.rid, self._stats()))
            elif isinstance(msg, wire.Stop):
                self.service.stop(f"asked by pid {self.peer.pid}: {msg.reason}")
            else:
                self._refuse(-1, f"a client may not send {type(msg).__name__}")

    def _view(self, seg: int, offset: int, nbytes: int) -> memoryview:
        whole = self.segments.view(seg)
        if offset < 0 or nbytes < 0 or offset + nbytes > len(whole):
            raise wire.WireError(f"range {offset}+{nbytes} is outside segment {seg} of {len(whole)} bytes")
        return whole[offset : offset + nbytes]

    def _start_run(self, run: wire.Run, blob: bytes) -> None:
        try:
            src = self._view(run.src_seg, run.src_offset, run.src_nbytes)
            dst = self._view(run.dst_seg, run.dst_offset, run.dst_nbytes)
        except KeyError as exc:
            self._refuse(run.rid, f"run {run.rid} names segment {exc.args[0]}, which was not shared")
            return
        except wire.WireError as exc:
            self._refuse(run.rid, f"run {run.rid}: {exc}")
            return
        # Unpacked on the run's thread: a job table of thousands of pages
        # takes milliseconds the connection's next messages need not wait.
        self._spawn(self._unpack_and_run, (run, blob, src, dst), f"hwdecomp-run-{self.peer.pid}-{run.rid}")

    def _unpack_and_run(self, run: wire.Run, blob: bytes, src: memoryview, dst: memoryview) -> None:
        try:
            jobs, protect = wire.unpack_jobs(run, blob)
        except wire.WireError as exc:
            self._refuse(run.rid, f"run {run.rid}: {exc}")
            with self.lock:
                self.runs.discard(threading.current_thread())
            return
        self.service.counters.runs += 1
        self._run(run, jobs, src, dst, protect)

    def _spawn(self, target, args: tuple, name: str) -> None:
        """Run ``target(*args)`` on a thread of its own, joined before the connection closes."""
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self.lock:
            self.runs.add(t)
        t.start()

    def _fail_and_exit(self, rid: int, exc: BaseException, what: str) -> None:
        """Report ``rid`` failed as a whole, then exit: the CUDA context cannot be trusted."""
        self.send(wire.Failed(rid, type(exc).__name__, str(exc), int(getattr(exc, "code", -1)),
                              str(getattr(exc, "name", ""))))
        logger.error("a %s failed as a whole (%s: %s): exiting, the context cannot be trusted",
                     what, type(exc).__name__, exc)
        logging.shutdown()
        os._exit(3)

    @contextmanager
    def _taken_up(self, rid: int, queue: str, nbytes: int) -> Iterator[None]:
        """Tell the client ``rid`` is taken up (its deadline starts); count it in ``queue`` until the block ends."""
        ahead = self.service.take_up(queue, nbytes)
        try:
            self.send(wire.Started(rid, ahead, self.rate))
            yield
        finally:
            self.service.put_down(queue, nbytes)

    def _keeper(self, run: wire.Run) -> RunKeeper | None:
        """Where ``run``'s outputs are kept on the device: when asked, by a backend that can, for a decoder."""
        if not run.keep or not getattr(self.backend, "keeps_outputs", False):
            return None
        try:
            decoder = self.service.decoder()
        except BackendUnavailableError:
            return None
        return RunKeeper(self.service.kept, decoder.device_block)

    def _run(self, run: wire.Run, jobs, src: memoryview, dst: memoryview, protect) -> None:
        rid = run.rid
        keeper = self._keeper(run)
        kw: dict[str, Any] = {} if keeper is None else {"keep": keeper}
        began = time.perf_counter()
        try:
            self.service.wait_for_run_steps()
            with self._taken_up(rid, "run", int(jobs.rows["src_size"].sum() + jobs.rows["dst_size"].sum())):
                if getattr(self.backend, "overwrites_gaps", False):
                    redone = self.backend.decompress(jobs, src, dst, protect=protect, **kw)
                else:
                    redone = self.backend.decompress(jobs, src, dst, **kw)
        except CorruptPageError as exc:
            if keeper is not None:
                keeper.release_all()
            index = exc.location.page if exc.location is not None else None
            if index is None:  # not tied to a job: the batch as a whole
                self.send(wire.Failed(rid, type(exc).__name__, exc.reason, -1, ""))
            else:
                self.send(wire.Corrupt(rid, int(index), type(exc).__name__, exc.reason))
        except BaseException as exc:  # the batch failed as a whole
            self._fail_and_exit(rid, exc, "batch")
        else:
            token = -1
            if keeper is not None and keeper.pages:
                token = self.service.kept.put(self, run.dst_seg, run.dst_offset, keeper.pages)
            self.send(wire.Done(rid, int(redone or 0), token))
        finally:
            timeline.record("run", began, time.perf_counter(), pid=self.peer.pid, jobs=len(jobs),
                            nbytes=len(dst))
            with self.lock:
                self.runs.discard(threading.current_thread())

    # -- the GPU decoder ------------------------------------------------------

    def _start(self, rid: int, work, msg, blob: bytes) -> None:
        self._spawn(self._decode_guarded, (rid, work, msg, blob), f"hwdecomp-decode-{self.peer.pid}-{rid}")

    def _decode_guarded(self, rid: int, work, msg, blob: bytes) -> None:
        try:
            work(msg, blob)
        except (KeyError, wire.WireError, PlanError) as exc:
            what = f"names segment {exc.args[0]}, which was not shared" if isinstance(exc, KeyError) else str(exc)
            self._refuse(rid, f"decode {rid}: {what}")
        except BackendUnavailableError as exc:
            self.send(wire.Failed(rid, type(exc).__name__, str(exc), -1, ""))
        except BaseException as exc:  # a GPU failure
            self._fail_and_exit(rid, exc, "decode")
        finally:
            with self.lock:
                self.runs.discard(threading.current_thread())

    def _corrupt(self, rid: int, pages) -> bool:
        bad = np.flatnonzero(pages["error"])
        if not len(bad):
            return False
        i = int(bad[0])
        code = int(pages["error"][i])
        name = PageError(code).name if code in PageError._value2member_map_ else str(code)
        self.send(wire.Corrupt(rid, i, "CorruptPageError", f"the GPU decoder found it invalid ({name})"))
        return True

    def _measure(self, msg: wire.Measure, blob: bytes) -> None:
        with timeline.span("measure", pid=self.peer.pid, nbytes=msg.data_bytes):
            self._measure_now(msg, blob)

    def _measure_now(self, msg: wire.Measure, blob: bytes) -> None:
        from ..gpudecode.hosted import DecodeRequest
        from ..gpudecode.merge import PlanRecords

        kept = self.service.kept.take(self, _tokens(msg.kept), msg.src_seg, msg.src_offset, msg.src_nbytes)
        try:
            decoder = self.service.decoder()
            src = self._view(msg.src_seg, msg.src_offset, msg.src_nbytes)
            ranges, chunks, pages = wire.unpack_plan(msg, blob)
            check_plan(ranges, chunks, pages, msg.data_bytes, msg.src_nbytes)
            with self.lock:
                if len(self.decodes) >= MAX_PENDING_DECODES:
                    raise wire.WireError(f"more than {MAX_PENDING_DECODES} measured decodes wait for their write")
            self.service.warm_decoder_once()  # a no-op once started, as it is when a decoding client attaches
            self.service.wait_until_warm()
            with self._taken_up(msg.rid, "decode", msg.data_bytes + msg.src_nbytes):
                pending = decoder.decode(DecodeRequest(src, PlanRecords(ranges, chunks, pages, msg.data_bytes),
                                                       tuple(kept)))
        finally:  # read (the decode's stream synchronised) or not at all
            self.service.kept.release(kept)
        if self._corrupt(msg.rid, pending.pages):
            pending.close()
            return
        with self.lock:
            self.decodes[msg.rid] = pending
        self.send(wire.Measured(msg.rid, [int(x) for x in pending.chunks["null_count"]],
                                [int(x) for x in pending.chunks["data_bytes"]]))

    def _write(self, msg: wire.Write, blob: bytes) -> None:
        with self.lock:
            pending = self.decodes.pop(msg.measure, None)
        if pending is None:
            raise wire.WireError(f"no measured decode {msg.measure} waits for a write")
        try:
            dst = self._view(msg.dst_seg, msg.dst_offset, msg.dst_nbytes)
            chunks = pending.chunks
            placed = wire.unpack_placements(blob, len(chunks))
            if msg.dst_nbytes != pending.nbytes or not np.array_equal(placed, wire.placements(chunks)):
                raise wire.WireError("a placement other than place_outputs' of the measured chunks "
                                     f"({msg.dst_nbytes} bytes; the decode wrote {pending.nbytes})")
            with self._taken_up(msg.rid, "decode", msg.dst_nbytes), \
                    timeline.span("write", pid=self.peer.pid, nbytes=msg.dst_nbytes):
                pending.copy_to(dst)
            self.send(wire.Done(msg.rid, 0, -1))
        finally:
            pending.close()

    def _stats(self) -> dict:
        out: dict[str, Any] = {}
        stats = getattr(self.backend, "stats", None)
        if stats is not None:
            # The backend's own pinned pool is unused here: buffers are the clients'.
            out.update({k: v for k, v in stats().items() if not k.startswith("pinned_")})
        out["mapped_segments"] = len(self.segments)
        out["host_registrations"] = self.segments.registrations
        out["host_registration_failures"] = self.segments.registration_failures
        out["host_register_s"] = round(self.segments.register_s, 6)
        out.update(self.service.stats())
        return {k: v for k, v in out.items() if isinstance(v, (int, float, str, bool))}
