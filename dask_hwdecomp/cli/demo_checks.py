"""What ``hwdecomp demo`` refuses before it writes a sample or starts a cluster.

Each check raises :class:`~dask_hwdecomp.cli.errors.UsageError`: one line,
exit 2, where the cluster would otherwise start and fail in its workers.
"""

from __future__ import annotations

from .errors import UsageError

__all__ = ["check_path", "check_sample_options", "resolve_options"]


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


def check_sample_options(path: str | None, given: dict) -> None:
    """Refuse an option of the sample dataset given with a PATH, which would ignore it.

    Parameters
    ----------
    path : str or None
        The dataset given on the command line (None: the demo writes a sample).
    given : dict
        ``{flag: value}`` of the sample's options, None where not given.

    Raises
    ------
    UsageError
        ``path`` and one of the sample's options are both given.
    """
    if path is None:
        return
    for flag, value in given.items():
        if value is not None:
            raise UsageError(f"{flag} is for the sample the demo writes without PATH; {path!r} is read as it is")


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
        The options cannot be combined (``decode="gpu"`` with
        ``backend="cpu"``) or an ``HWDECOMP_*`` value is invalid; the
        backend's probe says why it cannot run here; or ``decode="gpu"``
        where no GPU backend's probe passes.
    """
    from ..backend_table import GPU_BACKENDS
    from ..options import current_options
    from ..routing import registry

    try:
        opts = current_options(backend=backend, decode=decode)
    except ValueError as exc:
        # Each worker's plugin would raise the same at its setup, after the cluster started.
        raise UsageError(str(exc)) from None
    if opts.backend != "auto":
        reason = registry.probe(opts.backend)
        if reason is not None:
            raise UsageError(f"backend {opts.backend!r} cannot run here: {reason} (use --backend auto or cpu)")
    if opts.decode == "gpu":
        reasons = {name: registry.probe(name) for name in GPU_BACKENDS}
        if all(reason is not None for reason in reasons.values()):
            why = "; ".join(f"{name}: {reason}" for name, reason in reasons.items())
            raise UsageError(f"decode 'gpu' cannot run here: no GPU backend can ({why}) (use --decode auto or cpu)")
    return {"backend": opts.backend, "decode": opts.decode}
