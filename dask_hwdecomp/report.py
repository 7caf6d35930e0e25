"""What a read did: backends per codec, pages, bytes, time per stage.

Every read fills a :class:`ReadReport`. Reports reach the user three ways:
``read_table(..., report=r)`` accumulates into ``r``; :func:`collect_reports`
gathers the reads made inside its block (under dask's threaded, synchronous
and processes schedulers too); under ``distributed`` each figure is also handed to
``distributed.metrics.context_meter`` so it shows in the dashboard's fine
performance metrics (see :mod:`dask_hwdecomp.engine.metrics`).
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import threading
import time
import warnings
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from . import report_processes, timeline

__all__ = ["ReadReport", "CodecStats", "DecodeStats", "Fallback", "collect_reports", "STAGES", "PYARROW_NO_GPU", "PYARROW_CHOSEN", "PYARROW_READERS",
           "UNKNOWN_CODEC", "DECODED_ON", "NOT_GATHERED", "NotGatheredWarning"]

STAGES = ("io", "kernel_load", "scan", "decompress", "gpu_decode", "decode", "pyarrow")
# Where a column was decoded into Arrow: by the GPU decoder, or by pyarrow
# from the uncompressed image (or, without a GPU, by pyarrow's own reader).
DECODED_ON = ("gpu", "pyarrow")

# The backend a report names when pyarrow's own reader decompressed (``auto``
# on a machine where no GPU backend can run). pyarrow does not say how many
# pages it read: such rows count bytes from the footer, never pages.
PYARROW_NO_GPU = "pyarrow (no GPU)"
# The backend a report names when ``auto`` had a GPU but chose pyarrow's own
# reader as the faster way for a file (:mod:`dask_hwdecomp.routing.ways`).
PYARROW_CHOSEN = "pyarrow (faster here)"
# Both: rows whose bytes come from the footer, never pages.
PYARROW_READERS = (PYARROW_NO_GPU, PYARROW_CHOSEN)
# The codec of a pyarrow row whose footer was not read again for the report
# (a file on a remote filesystem, where that would cost a request).
UNKNOWN_CODEC = "UNKNOWN"
# What a collect_reports block that gathered nothing under a distributed
# client says: its computes ran on the workers, whose reads it cannot see.
NOT_GATHERED = (
    "the reads ran on distributed workers, which collect_reports does not see; register "
    "dask_hwdecomp.engine.plugin.HwdecompPlugin on the cluster and read "
    "dask_hwdecomp.engine.metrics.cluster_report(client)"
)


class NotGatheredWarning(UserWarning):
    """A :func:`collect_reports` block closed empty while a ``distributed`` client was in use."""


class Fallback(NamedTuple):
    """A file read through pyarrow's own reader, and why."""

    path: str
    reason: str


@dataclass
class CodecStats:
    """Totals for one (backend, codec) pair."""

    pages: int = 0
    jobs: int = 0
    compressed_bytes: int = 0
    uncompressed_bytes: int = 0
    seconds: float = 0.0


@dataclass
class DecodeStats:
    """Totals of one column decoded in one place, for one reason.

    Attributes
    ----------
    chunks : int
        Column chunks (one per row group read). For a file on another
        filesystem that pyarrow read through ``dd.read_parquet`` without a
        GPU, whose footer is not read again: the Arrow chunks pyarrow
        returned.
    rows : int
        Rows of those chunks (before any row filter; in that same case, the
        rows returned).
    arrow_bytes : int
        Bytes of the Arrow arrays decoded (for pyarrow's columns, as the
        read returned them: after row filters).
    """

    chunks: int = 0
    rows: int = 0
    arrow_bytes: int = 0


@dataclass
class ReadReport:
    """Counters of one or many reads; ``+=`` merges two reports.

    Attributes
    ----------
    files : int
        Files read.
    by_backend : dict
        ``{(backend, codec): CodecStats}``; codec is the Parquet codec name.
    stages : dict
        Seconds per stage: ``io`` (fetching bytes), ``kernel_load`` (numba
        loading the compiled scan and layout kernels from its cache, or
        compiling them: once per process, on its first page-path read, and
        no part of that read's scan), ``scan`` (footer and page headers,
        layout), ``decompress``, ``gpu_decode`` (decoding column
        chunks into Arrow buffers on the GPU, copies to the host included),
        ``decode`` (pyarrow decoding the uncompressed image, the columns the
        GPU did not decode, and putting the table together), ``pyarrow`` (a whole read by pyarrow's own
        reader, its I/O, decompression and decoding in one: backend
        ``pyarrow (no GPU)``).
    fallbacks : list of Fallback
        Files read through pyarrow's own reader, with the reason.
    retries : list of str
        Pages a GPU backend failed on that were redone on the CPU
        (``cpu_retry=True``), with the error.
    redone : dict
        ``{backend: pages}``: pages the backend failed on and redid on the
        CPU itself (the hardware engine: an operation that failed, or one
        in a batch whose outputs could not be trusted).
    batches : int
        Batched decompression calls made.
    unreachable : dict
        ``{backend: why}``: GPU backends that probed available but could not
        be used (``backend="auto"``): the GPU service could not be reached
        or started, or could not create the backend. Their pages were
        decompressed on the CPU pool and counted under ``cpu``.
    columns : dict
        ``{(column, where, why): DecodeStats}``: where each column read from
        the files was decoded into Arrow (``"gpu"`` or ``"pyarrow"``) and,
        for pyarrow, why not on the GPU (``"decode='cpu'"``, ``"no GPU
        backend in use"``, ``"nested column"``, ...; empty for ``"gpu"``).
        Hive partition columns are not read from the files and not listed.
    output_copies : int
        GPU-decoded batches whose Arrow buffers were copied out of the
        memory shared with the GPU service, because the outputs still alive
        over it (a ``persist``) exceed their share of ``pinned_bytes``.
    output_copied_bytes : int
        Bytes those copies took.
    not_gathered : str
        Empty, or why the figures may miss reads: a :func:`collect_reports`
        block that gathered nothing while a ``distributed`` client was in
        use says that the reads ran on the workers and where to read them
        (:data:`NOT_GATHERED`).
    """

    files: int = 0
    by_backend: dict = field(default_factory=lambda: defaultdict(CodecStats))
    stages: dict = field(default_factory=lambda: {s: 0.0 for s in STAGES})
    fallbacks: list[Fallback] = field(default_factory=list)
    retries: list = field(default_factory=list)
    redone: dict = field(default_factory=lambda: defaultdict(int))
    batches: int = 0
    unreachable: dict = field(default_factory=dict)
    columns: dict = field(default_factory=lambda: defaultdict(DecodeStats))
    output_copies: int = 0
    output_copied_bytes: int = 0
    not_gathered: str = ""

    def add_decode(self, column: str, where: str, chunks: int, rows: int, arrow_bytes: int, why: str = "") -> None:
        """Count ``chunks`` of ``column`` decoded on ``where`` (one of :data:`DECODED_ON`)."""
        if where not in DECODED_ON:
            raise ValueError(f"where {where!r} is not one of {', '.join(DECODED_ON)}")
        s = self.columns[(column, where, why)]
        s.chunks += chunks
        s.rows += rows
        s.arrow_bytes += arrow_bytes

    def add_jobs(self, backend: str, codec: str, pages: int, jobs: int, cbytes: int, ubytes: int, seconds: float) -> None:
        s = self.by_backend[(backend, codec)]
        s.pages += pages
        s.jobs += jobs
        s.compressed_bytes += cbytes
        s.uncompressed_bytes += ubytes
        s.seconds += seconds

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a block of work into ``stages[name]``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            t1 = time.perf_counter()
            self.stages[name] += t1 - t0
            timeline.record(f"stage_{name}", t0, t1)

    def __iadd__(self, other: ReadReport) -> ReadReport:
        self.files += other.files
        for (backend, codec), s in other.by_backend.items():
            self.add_jobs(backend, codec, s.pages, s.jobs, s.compressed_bytes, s.uncompressed_bytes, s.seconds)
        for k, v in other.stages.items():
            self.stages[k] = self.stages.get(k, 0.0) + v
        self.fallbacks.extend(other.fallbacks)
        self.retries.extend(other.retries)
        for backend, pages in other.redone.items():
            self.redone[backend] += pages
        self.batches += other.batches
        for backend, why in other.unreachable.items():
            self.unreachable.setdefault(backend, why)
        for (column, where, why), d in other.columns.items():
            self.add_decode(column, where, d.chunks, d.rows, d.arrow_bytes, why)
        self.output_copies += other.output_copies
        self.output_copied_bytes += other.output_copied_bytes
        self.not_gathered = self.not_gathered or other.not_gathered
        return self

    @property
    def backends(self) -> dict:
        """``{codec: sorted list of backends that decompressed it}``."""
        out: dict = defaultdict(set)
        for (backend, codec) in self.by_backend:
            out[codec].add(backend)
        return {k: sorted(v) for k, v in out.items()}

    def to_dict(self) -> dict:
        """A JSON-ready summary."""
        return {
            "files": self.files,
            "batches": self.batches,
            "stages_s": dict(self.stages),
            "by_backend": [
                {"backend": b, "codec": c, **s.__dict__, **({"pages": None} if b in PYARROW_READERS else {})}
                for (b, c), s in sorted(self.by_backend.items())
            ],
            "fallbacks": [list(f) for f in self.fallbacks],
            "retries": list(self.retries),
            "redone": dict(self.redone),
            "unreachable": dict(self.unreachable),
            "columns": [
                {"column": c, "decoded_on": w, "why_not_gpu": why, **d.__dict__}
                for (c, w, why), d in sorted(self.columns.items())
            ],
            "output_copies": self.output_copies,
            "output_copied_bytes": self.output_copied_bytes,
            "not_gathered": self.not_gathered,
        }

    def summary(self) -> str:
        """Human-readable lines: one per (backend, codec), then stages."""
        lines = [f"nothing gathered: {self.not_gathered}"] if self.not_gathered else []
        for (b, c), s in sorted(self.by_backend.items()):
            if b in PYARROW_READERS:
                lines.append(_pyarrow_line(b, c, s))
                continue
            lines.append(
                f"{c:>12} on {b:<8} {s.pages:>8} pages {s.compressed_bytes / 1e6:>10.1f} MB -> "
                f"{s.uncompressed_bytes / 1e6:>10.1f} MB"
            )
        # The tasks of a compute read at once: their seconds add up past the wall time.
        lines.append("stages (seconds summed over reads, which may run at once: can exceed the wall time): "
                     + ", ".join(f"{k} {v:.3f}s" for k, v in self.stages.items()))
        for path, why in self.fallbacks:
            lines.append(f"read by pyarrow (fallback): {path}: {why}")
        for why in self.retries:
            lines.append(f"retried on cpu: {why}")
        for backend, pages in sorted(self.redone.items()):
            lines.append(f"redone on cpu: {pages} page(s) that failed on {backend}")
        for backend, why in sorted(self.unreachable.items()):
            lines.append(f"read on cpu: GPU backend {backend} could not be used: {why}")
        if self.output_copies:
            lines.append(f"copied out of pinned memory: {self.output_copies} GPU-decoded batch(es), "
                         f"{self.output_copied_bytes / 1e6:.1f} MB (outputs still alive exceed their share of "
                         "pinned_bytes)")
        lines.extend(self.decode_lines())
        return "\n".join(lines)

    def decoded_on(self) -> dict:
        """``{where: {"columns": n, "chunks": n, "arrow_bytes": n}}``: the columns' totals per decode place."""
        out: dict = {}
        for (column, where, _), d in self.columns.items():
            total = out.setdefault(where, {"columns": set(), "chunks": 0, "arrow_bytes": 0})
            total["columns"].add(column)
            total["chunks"] += d.chunks
            total["arrow_bytes"] += d.arrow_bytes
        return {w: {**t, "columns": len(t["columns"])} for w, t in sorted(out.items())}

    def decode_lines(self) -> list[str]:
        """Where the columns were decoded, with why not on the GPU.

        One line for all of them when every column was decoded in the same
        place for the same reason; else one line per column and place.
        """
        places = {(w, why) for (_, w, why) in self.columns}
        if len(places) == 1 and len(self.columns) > 1:
            ((where, why),) = places
            stats = list(self.columns.values())
            if len({(d.chunks, d.rows) for d in stats}) == 1:
                counts = f"{stats[0].chunks} chunks and {stats[0].rows} rows each"
            else:
                counts = f"{sum(d.chunks for d in stats)} chunks in all"
            return [
                f"all {len(stats)} columns decoded on {where}: {counts}, "
                f"{sum(d.arrow_bytes for d in stats) / 1e6:.1f} MB Arrow" + (f" (not on the GPU: {why})" if why else "")
            ]
        return [
            f"column {c!r} decoded on {w}: {d.chunks} chunks, {d.rows} rows, {d.arrow_bytes / 1e6:.1f} MB Arrow"
            + (f" (not on the GPU: {why})" if why else "")
            for (c, w, why), d in sorted(self.columns.items())
        ]

    def __str__(self) -> str:
        return self.summary()


def _pyarrow_line(backend: str, codec: str, s: CodecStats) -> str:
    if codec == UNKNOWN_CODEC:
        return f"{'?':>12} on {backend}: codecs and sizes not read (remote files); pages not counted"
    return (
        f"{codec:>12} on {backend} {'?':>8} pages {s.compressed_bytes / 1e6:>10.1f} MB -> "
        f"{s.uncompressed_bytes / 1e6:>10.1f} MB (sizes from the footer; pyarrow does not count pages)"
    )


_lock = threading.Lock()
# The blocks open in this context, outermost first. dask's threaded and
# synchronous schedulers run tasks in the context of the thread that
# computes, so a block sees the reads of the computes it starts and not
# those of other threads.
_blocks: contextvars.ContextVar[tuple] = contextvars.ContextVar("hwdecomp_collectors", default=())


@contextlib.contextmanager
def collect_reports() -> Iterator[ReadReport]:
    """Gather the reads made inside the block: its own, nested blocks' included.

    A read counts in every block open in the context that made it: the
    thread that entered the block, the tasks of the dask computes it runs
    with the threaded, synchronous or processes scheduler (a processes
    scheduler's reports arrive when the block closes), nested blocks
    included. Reads made by other threads, or by threads that do not carry
    this context (a plain ``threading.Thread``, a ``distributed`` worker),
    are not: under ``distributed`` register
    :class:`~dask_hwdecomp.engine.plugin.HwdecompPlugin` and read
    :func:`dask_hwdecomp.engine.metrics.cluster_report` (or the dashboard's
    metrics). A block that closes having gathered nothing while a
    ``distributed`` client is in use says so in its report's
    ``not_gathered`` and in ``str(report)``, and warns once per process
    (:class:`NotGatheredWarning`). Two threads
    computing with the processes scheduler at the same time cannot be told
    apart: the block that closes first gets both computes' reads.

    Examples
    --------
    >>> with collect_reports() as report:  # doctest: +SKIP
    ...     df = dd.read_parquet(path, engine=hwdecomp).compute(scheduler="threads")
    >>> report.backends  # doctest: +SKIP
    {'SNAPPY': ['cpu']}
    """
    report = ReadReport()
    token = _blocks.set(_blocks.get() + (report,))
    report_processes.open_block()
    try:
        yield report
    finally:
        try:
            for spooled in report_processes.sweep():
                _deliver(spooled)
        finally:
            report_processes.close_block()
            _blocks.reset(token)
        if not (report.files or report.by_backend or report.columns) and _distributed_client():
            report.not_gathered = NOT_GATHERED
            _warn_not_gathered()


def _distributed_client() -> bool:
    """Whether a ``distributed`` client is in use in this process (computes run on its workers)."""
    if "distributed" not in sys.modules:
        return False  # nobody made a client: do not import distributed for the question
    from distributed import default_client

    try:
        default_client()
    except ValueError:
        return False
    return True


_warned_not_gathered = False


def _warn_not_gathered() -> None:
    global _warned_not_gathered
    with _lock:
        if _warned_not_gathered:
            return
        _warned_not_gathered = True
    warnings.warn(f"collect_reports gathered nothing: {NOT_GATHERED}", NotGatheredWarning, stacklevel=4)


def _deliver(report: ReadReport) -> None:
    """Add ``report`` to every block open in this context."""
    for block in _blocks.get():
        with _lock:
            block += report


def publish(report: ReadReport) -> None:
    """Hand a finished read's report to the blocks open in this context.

    In a worker process of dask's processes scheduler, which holds no block,
    the report goes back to the process that computes.
    """
    if _blocks.get():
        _deliver(report)
    else:
        report_processes.send(report)
