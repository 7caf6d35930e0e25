"""The service's Unix socket: who is at the other end, whether one listens, and taking the address.

Plumbing both sides use: the service binds and checks its peers, a client
checks that the process it reached is the service it started.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from dataclasses import dataclass

from .rundir import ServiceAddress

__all__ = ["Peer", "peer_of", "listening", "bind"]

_CRED = struct.Struct("3i")


@dataclass(frozen=True)
class Peer:
    """The process at the other end of a Unix socket, as the kernel says."""

    pid: int
    uid: int
    gid: int


def peer_of(sock: socket.socket) -> Peer:
    """The kernel's credentials of ``sock``'s peer (``SO_PEERCRED``)."""
    return Peer(*_CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)))


def listening(path) -> bool:
    """True if something accepts connections on the socket ``path``."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def bind(address: ServiceAddress) -> socket.socket | None:
    """The service's listening socket, or None when another service already listens.

    Taken under the address's lock file, so of services started at once
    exactly one listens; a stale socket left by a killed service is replaced.
    """
    with open(address.lock, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if listening(address.socket):
            return None
        try:
            os.unlink(address.socket)
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(str(address.socket))
        finally:
            os.umask(old)
        sock.listen(256)
        return sock
