"""One connection of a reading process to the GPU service, attached to one hosted backend.

A :class:`Connection` sends requests and matches their replies by request
id on a reader thread of its own; each request is an :class:`InFlight`
whose :meth:`InFlight.wait` keeps the request's deadline
(:mod:`~dask_hwdecomp.service.deadline`: from when the service took it up,
a second plus time for its bytes and those queued ahead of it, at most
``gpu_timeout_s``). When the service is lost (it closed the connection,
exited, or this side killed it) every request in flight fails at once with
:class:`ServiceGone`, and the reason says which way it went.
"""

from __future__ import annotations

import itertools
import os
import signal
import socket
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as wait_for_first
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import BackendUnavailableError, HwdecompError
from ..jobs import Algo
from ..options import Options
from . import wire
from .deadline import deadline_s
from .launch import connect, how_it_ended
from .rundir import ServiceAddress, ServiceUnreachable
from .shm import SharedSegment
from .sockets import peer_of

__all__ = ["Connection", "Capabilities", "InFlight", "TakenUp", "ServiceGone", "Overdue"]


class ServiceGone(HwdecompError):
    """The GPU service died, was killed, or did not answer in time."""


class Overdue(HwdecompError):
    """The GPU service did not answer a request within its deadline; the reason says which."""


class TakenUp(NamedTuple):
    """When the service took a request up (this process's clock), and what it said then."""

    at: float
    ahead: int
    bytes_per_s: int


class InFlight:
    """A request sent to the service: its answer and, once the service says so, when it was taken up."""

    __slots__ = ("sent", "answer", "started")

    def __init__(self) -> None:
        self.sent = time.monotonic()
        self.answer: Future = Future()
        self.started: Future = Future()  # a TakenUp

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


@dataclass(frozen=True)
class Capabilities:
    """What the attached backend said in its Hello."""

    name: str
    algorithms: frozenset
    max_job_bytes: int | None
    overwrites_gaps: bool


class Connection:
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
        self._pending: dict[int, InFlight] = {}
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

    def _attach(self, backend: str, options: Options, timeout_s: float) -> Capabilities:
        self.sock.settimeout(timeout_s)
        try:
            try:
                wire.send(self.sock, wire.Attach(backend=backend, options=options.to_dict(), pid=os.getpid()))
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
        return Capabilities(msg.name, frozenset(Algo(a) for a in msg.algorithms), msg.max_job_bytes,
                             msg.overwrites_gaps)

    def send(self, msg: wire.Message, blob: bytes = b"", fds: Sequence[int] = ()) -> None:
        with self._send_lock:
            wire.send(self.sock, msg, blob, fds)

    def share(self, segment: SharedSegment) -> None:
        """Pass ``segment``'s descriptor to the service once on this connection."""
        with self._send_lock:  # checked and sent together: shared exactly once
            if segment.id not in self.shared:
                wire.send(self.sock, wire.Share(seg_id=segment.id, nbytes=segment.nbytes), fds=[segment.fd])
                self.shared.add(segment.id)

    def request(self, make) -> InFlight:
        """Send ``make(rid)`` (and its blob); the request's ``answer`` future gets the reply message.

        Raises
        ------
        ServiceGone
            The service was gone already (nothing was sent).
        """
        flight = InFlight()
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
                    flight.started.set_result(TakenUp(time.monotonic(), msg.ahead, msg.bytes_per_s))
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
            reason = how_it_ended(self.pid)
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
