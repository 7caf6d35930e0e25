"""What ``hwdecomp demo`` refuses before it writes a sample or starts a cluster.

Each check raises :class:`~dask_hwdecomp.cli.errors.UsageError`: one line,
exit 2, where the cluster would otherwise start and fail in its workers.
"""

from __future__ import annotations

from .errors import UsageError

__all__ = ["check_path", "resolve_options"]


def check_path(path: str) -> None:
    """Refuse a path that names nothing.

    Raises
    ------
    UsageError
        Nothing is at ``path`` (file, directory or glob).
    """
    from fsspec.core import url_to_fs

    fs, where = url_to_fs(path)
    if not (fs.exists(where) or fs.glob(where)):
        raise UsageError(f"no Parquet file or directory at {path!r}")


def resolve_options(backend: str | None, decode: str | None) -> dict:
    """The ``backend`` and ``decode`` the workers read with, refused here if they cannot run.

    Parameters
    ----------
    backend, decode : str or None
        As given on the command line; None takes the option in force
        (``HWDECOMP_*``, else the library's default), as a read would.

    Returns
    -------
    dict
        ``{"backend": ..., "decode": ...}``, resolved.

    Raises
    ------
    UsageError
        The backend's probe says why it cannot run here.
    """
    from ..decompress import registry
    from ..options import current_options

    opts = current_options(backend=backend, decode=decode)
    if opts.backend != "auto":
        reason = registry.probe(opts.backend)
        if reason is not None:
            raise UsageError(f"backend {opts.backend!r} cannot run here: {reason} (use --backend auto or cpu)")
    return {"backend": opts.backend, "decode": opts.decode}
