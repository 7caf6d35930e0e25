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
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import ServiceUnreachable

__all__ = ["ServiceAddress", "service_dir", "address_for", "gpu_key", "ServiceUnreachable"]


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


def gpu_key() -> str:
    """The UUID of the GPU this process calls device 0 (``"none"`` without one).

    Reads a device attribute only: no CUDA context is created.
    """
    from ..gpu.device import device_uuid

    try:
        return device_uuid(0) or "none"
    except Exception:  # a driver that fails on the query: a service without a GPU
        return "none"


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
    gpu = gpu_key() if gpu is None else gpu
    digest = hashlib.sha256(repr((gpu, table)).encode()).hexdigest()[:20]
    return ServiceAddress(service_dir(configured_dir) / f"{digest}.sock", gpu, table)
