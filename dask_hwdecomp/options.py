"""Reader options: one dataclass, environment variables, a context manager.

Precedence, strongest first: keywords given to a read
(``hwdecomp_options=`` or ``read_table(**options)``), for ``dd.read_parquet``
the :func:`options` context in force at the call, the innermost
:func:`options` context of the thread doing the read, ``HWDECOMP_*``
environment variables, then the defaults below.

``dd.read_parquet`` resolves nothing itself: the keywords given to it and
the :func:`options` context in force when it is called travel with the graph
(:func:`graph_options`), so a ``with options(...)`` block around
``dd.read_parquet`` applies wherever and whenever the graph computes. The
workers' ``HWDECOMP_*`` environment applies underneath.

Byte sizes (``batch_bytes``, ``max_page_bytes``, ``max_batch_bytes``) take
an integer or a string such as ``"64MiB"`` or ``"1GB"``
(``dask.utils.parse_bytes``), as options and as environment variables.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import difflib
import numbers
import os
import threading
import types
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from dask.utils import parse_bytes

from .backend_table import BACKEND_TABLE

__all__ = [
    "Options",
    "parse_option_texts",
    "options",
    "current_options",
    "as_option_dict",
    "graph_options",
    "BACKENDS",
    "DECODES",
    "BYTE_SIZES",
    "GPU_BACKEND_OPTIONS",
    "UnknownOptionWarning",
]

BACKENDS = ("auto", *(e.name for e in BACKEND_TABLE))
DECODES = ("auto", "gpu", "cpu")
_GiB = 1 << 30
_MiB = 1 << 20
# Options that are byte counts: they also take "64MiB", "1GB", ...
BYTE_SIZES = ("batch_bytes", "max_page_bytes", "max_batch_bytes", "pinned_bytes")
# The smallest pinned_bytes: a few batches' buffers.
_MIN_PINNED = 64 * _MiB
# What a GPU backend is created with (streams, batcher, host CRC check, its
# CPU redo pool): backends of equal values are one and the same.
GPU_BACKEND_OPTIONS = ("streams", "batch_bytes", "batch_latency_ms", "verify_checksums", "cpu_threads",
                       "zstd_stream_walk")
# HWDECOMP_* variables that are not options (test and library locations,
# the timeline, the GPU service's decoder runners, switch interval and launches).
_OTHER_ENV = frozenset({"HWDECOMP_CORPUS", "HWDECOMP_FUZZ_SECONDS", "HWDECOMP_NVCOMP_LIB", "HWDECOMP_TIMELINE",
                        "HWDECOMP_DECODE_RUNNERS", "HWDECOMP_SWITCH_INTERVAL_MS", "HWDECOMP_HELD_LAUNCHES"})


class UnknownOptionWarning(UserWarning):
    """An ``HWDECOMP_*`` environment variable names no option (a typo?)."""


def _byte_size(name: str, value: Any) -> Any:
    """``value`` as an int when it is a byte-size string, else unchanged."""
    if isinstance(value, str):
        try:
            return parse_bytes(value)
        except ValueError:
            raise ValueError(f"{name} must be a byte size such as 1048576 or '1MiB', got {value!r}") from None
    return value


def _of_kind(name: str, kind: str, value: Any) -> Any:
    """``value`` as an option of ``kind`` (its annotation: bool, int, float or str) takes it.

    numpy's booleans and numbers become Python's. A string for a boolean is
    refused, not read: ``"false"`` is true in Python, and words are what
    the ``HWDECOMP_*`` variables take.

    Raises
    ------
    ValueError
        ``value`` is not of ``kind``.
    """
    if kind == "bool":
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        words = " (words such as 'false' are for HWDECOMP_* variables)" if isinstance(value, str) else ""
        raise ValueError(f"{name} must be True or False, got {value!r}{words}")
    is_bool = isinstance(value, (bool, np.bool_))
    if kind == "int":
        if isinstance(value, numbers.Integral) and not is_bool:
            return int(value)
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if kind == "float":
        if isinstance(value, numbers.Real) and not is_bool:
            return float(value)
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {value!r}")
    return value


def _default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Options:
    """How dask_hwdecomp reads.

    Each value must be of its option's kind: ``True`` or ``False`` for the
    switches (numpy's booleans too; a string such as ``"false"`` is refused
    rather than taken as true, as Python would take it: words are for the
    ``HWDECOMP_*`` variables), an integer for counts, an integer or a size
    string for byte sizes, a number for times, a string for the rest.
    numpy's numbers are taken as Python's.

    Parameters
    ----------
    backend : {"auto", "hardware", "nvcomp", "cpu"}
        Where pages are decompressed. ``"auto"`` takes, per codec, the
        hardware engine where the GPU has one, else nvCOMP where a GPU and
        nvCOMP are present, else the CPU pool; it never fails for lack of a
        GPU. Naming a backend that cannot run here raises
        :class:`~dask_hwdecomp.errors.BackendUnavailableError`. Codecs no GPU
        decodes (BROTLI, multi-member GZIP pages) always run on the CPU pool,
        and the read's report says so.
    cpu_threads : int
        Threads of the CPU decompression pool.
    batch_bytes : int or str
        Byte budget (uncompressed bytes) of one batch (the pieces of a
        partition decompressed together; a partition whose pages exceed it
        is read in several batches) and of one GPU call (the parts of
        concurrent tasks a stream runs at once). The default, with four
        streams, was the fastest host-to-host point on an H200 (1 MiB pages:
        256 per call; 4 streams overlap copies in, decompression and copies
        out).
    verify_checksums : bool
        Also check each page's CRC-32 where the writer stored one (on the
        GPU for GPU backends); a mismatch raises
        :class:`~dask_hwdecomp.errors.ChecksumError`. A GZIP page's CRC-32
        and a Zstd frame's content checksum are always checked. True keeps
        ``backend="auto"`` without a GPU on the page path (the CPU pool),
        which pyarrow's own read is not.
    max_page_bytes : int or str
        Largest uncompressed page accepted; a bigger declared size raises
        :class:`~dask_hwdecomp.errors.LimitExceededError` before anything is
        allocated. pyarrow's own read does not enforce it: set to anything
        but the default, it keeps ``backend="auto"`` without a GPU on the
        page path (the CPU pool), as ``verify_checksums`` does.
    max_batch_bytes : int or str
        Largest uncompressed image of one batch (all its pieces, headers and
        footers included); a bigger total of declared page sizes raises
        :class:`~dask_hwdecomp.errors.LimitExceededError` before the buffer
        is allocated. Bounds what a file's headers can make a reader claim.
        Set to anything but the default, it keeps ``backend="auto"``
        without a GPU on the page path, as ``max_page_bytes`` does.
    streams : int
        CUDA streams of each GPU backend in the GPU service: each runs one
        GPU call at a time, so copies and decompression of successive calls
        overlap.
    cpu_retry : bool
        Retry a page that a GPU backend could not decompress on the CPU pool
        (reported) instead of raising.
    on_unsupported : {"warn", "raise"}
        What to do with a file this path cannot serve (encrypted, unknown
        codec): read it through pyarrow's own reader with a warning, or
        raise :class:`~dask_hwdecomp.errors.UnsupportedFeatureError`.
    batch_latency_ms : float
        How long a worker's batcher waits for pages of concurrent tasks to
        join a GPU call.
    gpu_timeout_s : float
        The longest a reader waits for the GPU service to answer one request
        (a batch's decompression, a decode's measure or write), from when it
        is sent, however large the request or the queue ahead of it. Within
        it each request has its own deadline, counted from when the service
        takes it up: 1 s, plus ``batch_latency_ms``, plus its bytes in and
        out and those of every request taken up before it at 1 GiB/s on a
        GPU (:mod:`dask_hwdecomp.service.deadline`; a one-page batch: about
        a second). Past either the service is taken for hung, killed and
        restarted: the batch's bad page is found on the CPU and named in a
        :class:`~dask_hwdecomp.errors.CorruptPageError`, and the other
        batches it held, every reader's, keep their CPU output (decoded on
        the CPU to find the bad page), reported.
    zstd_stream_walk : bool
        With nvCOMP, also walk every Huffman literal stream of each Zstd
        page on the GPU and decode a page whose stream is not consumed
        exactly again with libzstd (:mod:`dask_hwdecomp.decompress.zstd_walks`):
        a corrupt page that both decoders accept, where nvCOMP reads zeros
        and libzstd (pyarrow) the neighbouring stream's bytes, then gives
        pyarrow's rows. On by default: at scale on an H100 Zstd reads took
        as long with it as without (its kernel runs beside nvCOMP's
        decoding); False saves its GPU time and the stream search's CPU
        (docs/gpu.md).
    decode : {"auto", "gpu", "cpu"}
        Where the uncompressed pages are decoded into Arrow columns.
        ``"auto"`` (the default) decodes on the GPU every column chunk the
        GPU decoder supports when a GPU backend decompresses the read, and
        the rest (nested columns, INT96 timestamps, ...) through pyarrow;
        without a GPU backend pyarrow decodes everything. At scale on an
        H100 it read 1.00 to 2.42 times as fast as pyarrow on every codec at
        4x4 and 16x1 clusters, 0.95 to 1.95 times at 1x16
        (``benchmarks/results/2026-12-06-h100-sweep``). ``"gpu"`` is the
        same but raises :class:`~dask_hwdecomp.errors.BackendUnavailableError`
        where no GPU backend can run, rather than decode on the CPU; it
        cannot be combined with ``backend="cpu"``. ``"cpu"``: pyarrow
        decodes every column; with ``backend="auto"`` the GPU then
        decompresses only the files of the codecs where that beat pyarrow's
        own read (SNAPPY, GZIP) and pyarrow reads the others itself
        (:mod:`dask_hwdecomp.routing.ways`). The read's report says, per
        column, where it was decoded and why not on the GPU.
    pinned_bytes : int
        Most host memory a reading process keeps shared with the GPU
        service, which registers (pins) it once and reuses it: the file
        bytes, decompressed pages and GPU-decoded Arrow buffers of its reads
        in flight. 0 (the default): 4 GiB or 4 ``batch_bytes``, at most a
        quarter of the RAM. GPU-decoded columns are Arrow arrays over this
        memory, without a copy, while those alive take at most an eighth of
        it; past that (a long ``persist``) they are copied into ordinary
        memory, and the read's report counts the copies
        (``ReadReport.output_copies``): pinned memory stays bounded and a
        read never waits for memory to be pinned afresh.
    service_dir : str
        Directory of the GPU service sockets (mode 0700, this user's); empty:
        ``$XDG_RUNTIME_DIR/dask-hwdecomp``, else ``/tmp/dask-hwdecomp-<uid>``.
        Every process of a node that names the same directory and GPU shares
        one service.

    Raises
    ------
    ValueError
        A value of the wrong kind, or out of range.
    TypeError
        An unknown option name.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Options:
        # Python's own TypeError for an unknown keyword names no option; this one names the closest.
        unknown = set(kwargs) - _NAMES
        if unknown:
            raise TypeError(_unknown_options(unknown))
        return super().__new__(cls)

    backend: str = "auto"
    cpu_threads: int = dataclasses.field(default_factory=_default_threads)
    batch_bytes: int = 256 * _MiB
    verify_checksums: bool = False
    max_page_bytes: int = 1 * _GiB
    max_batch_bytes: int = 16 * _GiB
    streams: int = 4
    cpu_retry: bool = False
    on_unsupported: str = "warn"
    batch_latency_ms: float = 2.0
    gpu_timeout_s: float = 60.0
    pinned_bytes: int = 0
    service_dir: str = ""
    decode: str = "auto"
    zstd_stream_walk: bool = True

    def __post_init__(self):
        for name in BYTE_SIZES:
            object.__setattr__(self, name, _byte_size(name, getattr(self, name)))
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _of_kind(f.name, str(f.type), getattr(self, f.name)))
        if self.backend not in BACKENDS:
            raise ValueError(
                f"backend {self.backend!r} is not one of {', '.join(BACKENDS)}"
            )
        if self.decode not in DECODES:
            raise ValueError(f"decode {self.decode!r} is not one of {', '.join(DECODES)}")
        if self.decode == "gpu" and self.backend == "cpu":
            raise ValueError(
                "decode='gpu' needs a GPU backend, but backend='cpu' decompresses on the CPU: "
                "set backend to 'auto', 'hardware' or 'nvcomp', or decode to 'auto' or 'cpu'"
            )
        if self.on_unsupported not in ("warn", "raise"):
            raise ValueError(
                f"on_unsupported {self.on_unsupported!r} is not 'warn' or 'raise'"
            )
        for name in ("cpu_threads", "batch_bytes", "max_page_bytes", "max_batch_bytes", "streams"):
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not self.batch_latency_ms >= 0:  # NaN too
            raise ValueError(f"batch_latency_ms must be >= 0, got {self.batch_latency_ms!r}")
        if not self.gpu_timeout_s > 0:
            raise ValueError(f"gpu_timeout_s must be > 0, got {self.gpu_timeout_s!r}")
        if self.pinned_bytes and self.pinned_bytes < _MIN_PINNED:
            raise ValueError(f"pinned_bytes must be 0 (the default) or at least {_MIN_PINNED >> 20} MiB, "
                             f"got {self.pinned_bytes!r}")

    def replace(self, **changes: Any) -> Options:
        """Return a copy with ``changes`` applied (unknown names raise)."""
        unknown = set(changes) - _NAMES
        if unknown:
            raise TypeError(_unknown_options(unknown))
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


_NAMES = frozenset(f.name for f in dataclasses.fields(Options))


def _unknown_options(names) -> str:
    """The message for option names that are not options: each with the closest option, if one is close."""
    known = [f.name for f in dataclasses.fields(Options)]
    parts = []
    for name in sorted(names):
        close = difflib.get_close_matches(name, known, n=1)
        parts.append(f"{name} (did you mean {close[0]}?)" if close else name)
    listed = "" if len(parts) == sum("did you mean" in p for p in parts) else f"; the options are {', '.join(known)}"
    return f"unknown hwdecomp option(s): {', '.join(parts)}{listed}"


_warned_env: set[str] = set()
_warned_lock = threading.Lock()


def _warn_unknown_env(environ: Mapping[str, str], known: set[str]) -> None:
    """Warn once per process about each ``HWDECOMP_*`` variable that names no option."""
    for key in environ:
        if not key.startswith("HWDECOMP_") or key in known or key in _OTHER_ENV:
            continue
        with _warned_lock:
            if key in _warned_env:
                continue
            _warned_env.add(key)
        close = difflib.get_close_matches(key, sorted(known), n=1)
        hint = f"; did you mean {close[0]}?" if close else f"; the options are {', '.join(sorted(known))}"
        warnings.warn(
            f"environment variable {key} is not a dask_hwdecomp option and is ignored{hint}",
            UnknownOptionWarning,
            stacklevel=4,
        )


def parse_option_texts(texts: Mapping[str, str]) -> dict:
    """Options written as text (``{"streams": "8", "batch_bytes": "64MiB"}``), parsed as their variables are.

    Parameters
    ----------
    texts : mapping of str to str
        Option names and their values as an ``HWDECOMP_*`` variable would
        give them.

    Returns
    -------
    dict
        The options with typed values, for :class:`Options` or
        ``hwdecomp_options``.

    Raises
    ------
    TypeError
        A name is not an option.
    ValueError
        A value does not parse as its option's type.
    """
    unknown = set(texts) - _NAMES
    if unknown:
        raise TypeError(_unknown_options(unknown))
    return _parse_env({"HWDECOMP_" + name.upper(): text for name, text in texts.items()})


def _parse_env(environ: Mapping[str, str]) -> dict:
    out: dict[str, Any] = {}
    _warn_unknown_env(environ, {"HWDECOMP_" + f.name.upper() for f in dataclasses.fields(Options)})
    for field in dataclasses.fields(Options):
        key = "HWDECOMP_" + field.name.upper()
        if key not in environ:
            continue
        raw = environ[key].strip()
        kind = field.type
        try:
            if kind == "bool":
                if raw.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError(raw)
                out[field.name] = raw.lower() in ("1", "true", "yes", "on")
            elif field.name in BYTE_SIZES:
                out[field.name] = parse_bytes(raw)
            elif kind == "int":
                out[field.name] = int(raw)
            elif kind == "float":
                out[field.name] = float(raw)
            else:
                out[field.name] = raw
        except ValueError:
            what = "byte size (an integer, or a string such as 64MiB)" if field.name in BYTE_SIZES else kind
            raise ValueError(f"environment variable {key}={raw!r} is not a valid {what}") from None
    return out


# Read-only default: every change sets a new mapping (see options()).
_context: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "hwdecomp_options", default=types.MappingProxyType({})
)


def current_options(**overrides: Any) -> Options:
    """Resolve the options in force here, with ``overrides`` on top.

    Parameters
    ----------
    **overrides
        Option values that win over context, environment and defaults.

    Returns
    -------
    Options

    Raises
    ------
    TypeError
        An unknown option name.
    ValueError
        An invalid value, or an invalid ``HWDECOMP_*`` variable.
    """
    merged = _parse_env(os.environ)
    merged.update(_context.get())
    merged.update({k: v for k, v in overrides.items() if v is not None})
    return Options().replace(**merged)


def as_option_dict(value) -> dict:
    """``hwdecomp_options`` as a dict of option values.

    Parameters
    ----------
    value : Options, dict or None
        An :class:`Options` gives every one of its fields (it is a complete
        set of options), except ``cpu_threads`` left at its default: that
        default is the core count of the machine that reads, which a graph
        made elsewhere must not fix. A dict gives its own keys; None gives
        nothing.

    Raises
    ------
    TypeError
        Anything else.
    """
    if value is None:
        return {}
    if isinstance(value, Options):
        out = value.to_dict()
        if out["cpu_threads"] == _default_threads():
            del out["cpu_threads"]
        return out
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(
        f"hwdecomp_options must be a dask_hwdecomp.Options or a dict of option values, got {type(value).__name__}"
    )


def graph_options(explicit=None) -> dict:
    """The options a ``dd.read_parquet`` call puts in its graph.

    The :func:`options` context in force now, with ``explicit`` (the call's
    ``hwdecomp_options``) on top; the environment and the defaults are left
    to the process that reads. Validated here, so a bad value fails at the
    call.

    Raises
    ------
    TypeError
        An unknown option name, or ``explicit`` of the wrong type.
    ValueError
        An invalid value.
    """
    merged = {**_context.get(), **as_option_dict(explicit)}
    Options().replace(**merged)  # the workers' environment is not this one's
    return merged


@contextlib.contextmanager
def options(**changes: Any) -> Iterator[Options]:
    """Set options for reads made in this thread inside the ``with`` block.

    A ``dd.read_parquet`` called inside the block keeps these options in its
    graph: they apply when it computes, inside the block or not.

    Examples
    --------
    >>> import dask_hwdecomp
    >>> with dask_hwdecomp.options(backend="cpu"):  # doctest: +SKIP
    ...     table = dask_hwdecomp.read_table("data.parquet")
    """
    resolved = current_options(**changes)  # validate now, not at read time
    token = _context.set({**_context.get(), **changes})
    try:
        yield resolved
    finally:
        _context.reset(token)
