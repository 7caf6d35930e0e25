"""Starting the node's GPU service, and reaching it without attaching.

The first reader that finds no service listening starts one
(:func:`start_service`: a fresh interpreter in a session of its own, so it
outlives its starter); readers that start together take turns on a lock
file, so exactly one starts it and the others wait for it to listen
(:func:`connect`). :func:`query`, :func:`node_stats` and
:func:`wait_for_exit` serve the ``hwdecomp service`` command and the
benchmarks: they reach a running service without attaching a backend.

The service is a fresh interpreter (``python -m``), never a fork: forking a
process that holds CUDA state is undefined, and ``multiprocessing``'s spawn
would re-run an unguarded user script and refuses to start children of a
daemonic worker process.
"""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import wire
from .rundir import ServiceAddress, ServiceUnreachable
from .sockets import peer_of

__all__ = ["service_command", "start_service", "how_it_ended", "connect", "query", "wait_for_exit", "node_stats"]


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


def how_it_ended(pid: int) -> str:
    """How service ``pid`` ended, as its clients are told: its exit status if this process started it."""
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
                    # The reader that held the lock may have started it since this
                    # reader's attempt above (and let go once connected): look again
                    # under the lock, or a second service starts only to exit.
                    sock = _attempt_connect(address)
                    if sock is not None:
                        return sock
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
