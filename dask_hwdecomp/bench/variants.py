"""The engines a run compares: a dict of named variants, pyarrow included.

Each variant says how to call ``dd.read_parquet`` (``engine`` and extra
keywords) or why it cannot run here. ``pyarrow`` is the plain CPU baseline;
``hwdecomp-auto`` reads at the options' defaults (``decode="auto"``: on a
GPU machine, the GPU decodes the columns it supports); ``hwdecomp-<backend>``
pins one backend, and ``hwdecomp-<backend>-decode-<decode>`` sets another
``decode`` (``hwdecomp-auto-decode-cpu``: pyarrow decodes every column, the
GPU decompressing the codecs where that is faster than pyarrow's own read). ``ipc-ceiling`` is a reference, not an engine: the
uncompressed files' Arrow IPC twins read through ``dd.from_map``
(:mod:`.ceiling`), on the uncompressed row only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..routing import registry

__all__ = ["Variant", "engine_variants", "ceiling_variant", "variant_name", "BASELINE", "DEFAULT", "CEILING",
           "CEILING_LABEL", "DECODES", "DECODE_CPU"]

BASELINE = "pyarrow"
DEFAULT = "hwdecomp-auto"
CEILING = "ipc-ceiling"
CEILING_LABEL = "Arrow IPC ceiling (uncompressed IPC files, memory-mapped, no decoding)"
# The ``decode`` option's values; "auto" is the default, left out of a variant's name and options.
DECODES = ("auto", "gpu", "cpu")
# hwdecomp-auto with pyarrow decoding every column: the read before GPU decoding.
DECODE_CPU = "hwdecomp-auto-decode-cpu"


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
    decode : str or None
        The ``decode`` option of an hwdecomp variant (None for the others).
    """

    name: str
    engine: object = None
    kwargs: dict = field(default_factory=dict)
    backend: str | None = None
    unavailable: str | None = None
    reader: Callable | None = None
    codecs: tuple | None = None
    reads_ipc: bool = False
    decode: str | None = None

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


def variant_name(backend: str, decode: str = "auto") -> str:
    """``hwdecomp-<backend>``, with ``-decode-<decode>`` unless ``decode`` is ``"auto"``."""
    return f"hwdecomp-{backend}" + ("" if decode == "auto" else f"-decode-{decode}")


def engine_variants(backends=("auto", "cpu", "nvcomp", "hardware"), options: dict | None = None,
                    decodes=("auto",)) -> dict:
    """``{name: Variant}``: pyarrow, then hwdecomp with each backend and ``decode`` asked for.

    Parameters
    ----------
    backends : sequence of str
        hwdecomp backends to include (``"auto"`` and registry names).
    options : dict, optional
        Further ``hwdecomp_options`` for every hwdecomp variant.
    decodes : sequence of str
        ``decode`` options crossed with every backend (:data:`DECODES`), set
        explicitly; ``"auto"`` keeps the plain name. The CPU
        backend has no GPU to decode on, so it gets its plain variant only
        (``decode="cpu"`` would read exactly as it does).

    Returns
    -------
    dict
        Unavailable variants are included, with the reason.

    Raises
    ------
    ValueError
        A ``decode`` not in :data:`DECODES`.
    """
    unknown = [d for d in decodes if d not in DECODES]
    if unknown:
        raise ValueError(f"unknown decode(s) {unknown}; choose from {', '.join(DECODES)}")
    out = {BASELINE: Variant(BASELINE, engine="pyarrow")}
    engine, why = _hwdecomp_engine()
    for backend in backends:
        probed = why
        if probed is None and backend not in ("auto", "cpu"):
            probed = registry.probe(backend)
        for decode in decodes if backend != "cpu" else ("auto",):
            name = variant_name(backend, decode)
            reason = probed
            opts = {**(options or {}), "backend": backend}
            opts["decode"] = decode
            out[name] = Variant(
                name,
                engine=engine if reason is None else None,
                kwargs={"hwdecomp_options": opts},
                backend=backend,
                unavailable=reason,
                decode=decode,
            )
    return out


def ceiling_variant() -> Variant:
    """The decode-free ceiling, measured on the uncompressed row only."""
    from .ceiling import read_ipc_ceiling

    return Variant(CEILING, reader=read_ipc_ceiling, codecs=("uncompressed",), reads_ipc=True)
