"""The engines a run compares: a dict of named variants, pyarrow included.

Each variant says how to call ``dd.read_parquet`` (``engine`` and extra
keywords) or why it cannot run here. ``pyarrow`` is the plain CPU baseline;
``hwdecomp-auto`` is what a user gets by default; ``hwdecomp-<backend>``
pins one backend. ``ipc-ceiling`` is a reference, not an engine: the
uncompressed files' Arrow IPC twins read through ``dd.from_map``
(:mod:`.ceiling`), on the uncompressed row only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..decompress import registry

__all__ = ["Variant", "engine_variants", "ceiling_variant", "BASELINE", "DEFAULT", "CEILING", "CEILING_LABEL"]

BASELINE = "pyarrow"
DEFAULT = "hwdecomp-auto"
CEILING = "ipc-ceiling"
CEILING_LABEL = "Arrow IPC ceiling (uncompressed IPC files, memory-mapped, no decoding)"


@dataclass
class Variant:
    """One way of reading.

    Attributes
    ----------
    name : str
    engine : object
        ``engine=`` for ``dd.read_parquet`` (None when unavailable).
    kwargs : dict
        Further keywords for ``dd.read_parquet``.
    backend : str or None
        The hwdecomp backend pinned, ``"auto"``, or None for pyarrow.
    unavailable : str or None
        Why it cannot run here.
    reader : callable or None
        ``reader(parquet_dir) -> dask DataFrame`` in place of
        ``dd.read_parquet`` (the ceiling).
    codecs : tuple of str or None
        The only codec rows it is measured on (None: all).
    reads_ipc : bool
        It reads the dataset's Arrow IPC files (their bytes are its file bytes).
    """

    name: str
    engine: object = None
    kwargs: dict = field(default_factory=dict)
    backend: str | None = None
    unavailable: str | None = None
    reader: Callable | None = None
    codecs: tuple | None = None
    reads_ipc: bool = False

    def applies_to(self, codec: str) -> bool:
        return self.codecs is None or codec in self.codecs

    @property
    def is_hwdecomp(self) -> bool:
        return self.backend is not None


def _hwdecomp_engine():
    """The engine class, or (None, why not)."""
    try:
        from dask_hwdecomp import hwdecomp
    except (ImportError, AttributeError) as exc:
        return None, f"the hwdecomp Dask engine cannot be imported: {exc}"
    return hwdecomp, None


def engine_variants(backends=("auto", "cpu", "nvcomp", "hardware"), options: dict | None = None) -> dict:
    """``{name: Variant}``: pyarrow, then hwdecomp with each backend asked for.

    Parameters
    ----------
    backends : sequence of str
        hwdecomp backends to include (``"auto"`` and registry names).
    options : dict, optional
        Further ``hwdecomp_options`` for every hwdecomp variant.

    Returns
    -------
    dict
        Unavailable variants are included, with the reason.
    """
    out = {BASELINE: Variant(BASELINE, engine="pyarrow")}
    engine, why = _hwdecomp_engine()
    for backend in backends:
        name = f"hwdecomp-{backend}"
        reason = why
        if reason is None and backend not in ("auto", "cpu"):
            reason = registry.probe(backend)
        opts = {**(options or {}), "backend": backend}
        out[name] = Variant(
            name,
            engine=engine if reason is None else None,
            kwargs={"hwdecomp_options": opts},
            backend=backend,
            unavailable=reason,
        )
    return out


def ceiling_variant() -> Variant:
    """The decode-free ceiling, measured on the uncompressed row only."""
    from .ceiling import read_ipc_ceiling

    return Variant(CEILING, reader=read_ipc_ceiling, codecs=("uncompressed",), reads_ipc=True)
