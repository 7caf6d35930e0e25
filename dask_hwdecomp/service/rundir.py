"""Where a node's GPU services listen, and who may use the place.

Each service listens on a Unix socket in one directory per user: the
``service_dir`` option, else ``$XDG_RUNTIME_DIR/dask-hwdecomp``, else
``/tmp/dask-hwdecomp-<uid>``. The directory is created with mode 0700 and
refused unless it is a real directory (not a link), owned by this user and
closed to everyone else: only this user's processes can reach a socket in
it, and the service checks each peer's credentials as well.

A service is named by what it hosts: the GPU (its UUID, so every worker
process of the node that sees the GPU under whatever index reaches the same
service) and the table of backend factories it was started with.

Which GPU a reading process uses (:func:`gpu_key`): the one it sees, where
it sees one (``CUDA_VISIBLE_DEVICES`` naming one, as dask-cuda sets it for
each of its workers); where it sees several (a plain worker on a node of
several GPUs), the next in turn among the node's processes, from a counter
in the service directory taken under a lock, so that the workers spread
evenly over the GPUs. A process keeps its GPU for its life: every page it
reads goes to that GPU's service, none crosses to another GPU.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ServiceUnreachable

__all__ = ["ServiceAddress", "service_dir", "address_for", "gpu_key", "visible_gpus", "take_turn",
           "ServiceUnreachable"]

# The file whose counter hands the GPUs out in turn, in the service directory.
_TURN_FILE = "gpu-turn"


def service_dir(configured: str | None = None, create: bool = True) -> Path:
    """The directory of this user's service sockets, created (unless ``create`` is False) and checked.

    Without ``create``, a directory that does not exist is returned as it
    is: no service runs there.

    Raises
    ------
    ServiceUnreachable
        It cannot be created, or another user could reach into it.
    """
    if configured:
        path = Path(configured)
    elif os.environ.get("XDG_RUNTIME_DIR"):
        path = Path(os.environ["XDG_RUNTIME_DIR"]) / "dask-hwdecomp"
    else:
        path = Path("/tmp") / f"dask-hwdecomp-{os.getuid()}"
    if not create and not os.path.lexists(path):
        return path
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError as exc:
        raise ServiceUnreachable(f"cannot create the GPU service directory {path}: {exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise ServiceUnreachable(f"the GPU service directory {path} is not a directory")
    if st.st_uid != os.getuid():
        raise ServiceUnreachable(f"the GPU service directory {path} belongs to uid {st.st_uid}, not {os.getuid()}")
    if st.st_mode & 0o077:
        raise ServiceUnreachable(
            f"the GPU service directory {path} has mode {stat.S_IMODE(st.st_mode):o}; "
            "it must be 700 (others could reach the service)")
    return path


def visible_gpus() -> list[str]:
    """The UUIDs of the GPUs this process sees, in device order (empty without one).

    Reads device attributes only: no CUDA context is created.
    """
    from ..gpu.device import device_count, device_uuid

    try:
        count = device_count()
        uuids = [device_uuid(k) for k in range(count)]
    except Exception:  # a driver that fails on the query: no GPU to use
        return []
    return [u for u in uuids if u]


def take_turn(gpus: Sequence[str], directory: Path) -> str:
    """The next of ``gpus`` in turn among the processes that share ``directory``.

    The turn is a counter in ``directory`` (:data:`_TURN_FILE`), read and
    advanced under an exclusive lock, so processes that start at once
    still take every GPU in turn.

    Raises
    ------
    ServiceUnreachable
        The counter cannot be opened.
    """
    if not gpus:
        raise ValueError("no GPU to take a turn on")
    path = directory / _TURN_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise ServiceUnreachable(f"cannot open the GPU turn counter {path}: {exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        turn = int(text) if text.isdigit() else 0
        data = str(turn + 1).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        return gpus[turn % len(gpus)]
    finally:
        os.close(fd)  # releases the lock


_chosen_lock = threading.Lock()
_chosen: dict = {}  # (pid, directory) -> the GPU this process took


def gpu_key(configured_dir: str | None = None) -> str:
    """The UUID of the GPU this process reads with (``"none"`` without one).

    The GPU it sees, or, where it sees several, its turn among the node's
    processes (see the module docstring), taken once and kept.

    Raises
    ------
    ServiceUnreachable
        It sees several GPUs and the service directory or its counter is
        unusable.
    """
    gpus = visible_gpus()
    if len(gpus) <= 1:
        return gpus[0] if gpus else "none"
    directory = service_dir(configured_dir)
    key = (os.getpid(), str(directory))  # a forked child takes its own turn
    with _chosen_lock:
        if key not in _chosen:
            _chosen[key] = take_turn(gpus, directory)
        return _chosen[key]


@dataclass(frozen=True)
class ServiceAddress:
    """Where one service listens and what it hosts.

    Attributes
    ----------
    socket : Path
        The Unix socket.
    gpu : str
        The GPU's UUID (``"none"``): the service sees only this GPU.
    factories : tuple of (str, str)
        ``(backend name, "module:function")`` it may create.
    """

    socket: Path
    gpu: str
    factories: tuple[tuple[str, str], ...]

    @property
    def lock(self) -> Path:
        """The file a starting service locks while it takes the socket."""
        return self.socket.with_suffix(".lock")

    @property
    def start_lock(self) -> Path:
        """The file a reader locks while it starts the service (the others wait)."""
        return self.socket.with_suffix(".start")

    @property
    def log(self) -> Path:
        """Where a service started by a reader writes its log."""
        return self.socket.with_suffix(".log")


def address_for(factories: Mapping[str, str], configured_dir: str | None = None,
                gpu: str | None = None) -> ServiceAddress:
    """The address of the service hosting ``factories`` on this process's GPU.

    Raises
    ------
    ServiceUnreachable
        The service directory is unusable.
    """
    table = tuple(sorted(factories.items()))
    gpu = gpu_key(configured_dir) if gpu is None else gpu
    digest = hashlib.sha256(repr((gpu, table)).encode()).hexdigest()[:20]
    return ServiceAddress(service_dir(configured_dir) / f"{digest}.sock", gpu, table)
