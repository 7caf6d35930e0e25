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
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import BackendUnavailableError
from ..options import GPU_BACKEND_OPTIONS, Options
from . import wire
from .deadline import GPU_BYTES_PER_S
from .kept import KeptStore
from .rundir import ServiceAddress
from .session import Session
from .sockets import peer_of

__all__ = ["Service", "load_run_steps"]

logger = logging.getLogger(__name__)

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
    jobs = [Job(algo=Algo.SNAPPY, src_offset=0, src_size=8, dst_offset=0, dst_size=8, codec=0, location=here,
                preamble=1),
            Job(algo=Algo.ZSTD, src_offset=8, src_size=8, dst_offset=8, dst_size=8, codec=0, location=here)]
    src, dst = memoryview(bytearray(16)), memoryview(bytearray(16))
    for protect in ([], [(0, 1)]):
        run = wire.Run(rid=0, src_seg=0, src_offset=0, src_nbytes=len(src), dst_seg=0, dst_offset=0,
                       dst_nbytes=len(dst), njobs=len(jobs), nprotect=len(protect), keep=False)
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
    """What :meth:`Service.stats` reports under these names (sessions count ``refused`` and ``runs``)."""

    connections: int = 0
    refused: int = 0
    runs: int = 0


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
        self._connections: set[Session] = set()
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
        if backend.deadline_bytes_per_s is not None:
            return int(backend.deadline_bytes_per_s)
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
                wire.send(sock, wire.Refused(rid=-1, reason=f"uid {peer.uid} may not attach to this service"))
            except OSError:
                pass
            sock.close()
            return
        conn = Session(self, sock, peer)
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
                    from ..gpudecode.hosted import HostedDecoder, runners_from_env

                    self._decoder = HostedDecoder(runners=runners_from_env())
                    logger.info("created the GPU decoder")
                except Exception as exc:
                    self._decoder_error = f"{type(exc).__name__}: {exc}"
                    logger.warning("the GPU decoder cannot be created: %s", self._decoder_error)
            if self._decoder is None:
                raise BackendUnavailableError(f"the GPU decoder cannot run in the service: {self._decoder_error}")
            return self._decoder

    def detach(self, key: tuple | None, conn: Session) -> None:
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
                   "hosted_backends": len(self._hosted), **asdict(self.counters)}
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
            values = backend.stats()
            calls += int(values.get("calls", 0))
            pages += int(values.get("pages", 0))
        return {**out, "gpu_calls": calls, "gpu_pages": pages}


def _close_backend(backend) -> None:
    try:
        backend.close()
    except Exception:  # closing the rest matters more
        logger.exception("closing a backend failed")
