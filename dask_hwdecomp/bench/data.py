"""Benchmark datasets on disk: one directory of files per (table, codec).

Layout under ``root``::

    <name>/<codec>/part-0000.parquet ...
    <name>/ipc/part-0000.arrow ...
    <name>/manifest.json

Every codec directory holds the same rows; ``ipc`` holds the uncompressed
files again as Arrow IPC files, the decode-free ceiling's input
(:mod:`.ceiling`). A manifest records how the data
was made, so a second run with the same settings reuses it.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from .ceiling import write_ipc_copy, write_twin
from .tables import KINDS, bytes_per_row, make_table

__all__ = ["CODECS", "Dataset", "generate", "writer_pool", "from_user", "describe_dir"]

# Our codec names -> pyarrow's ``compression`` argument. pyarrow's "lz4"
# writes the LZ4_RAW codec.
CODECS = {
    "uncompressed": "none",
    "snappy": "snappy",
    "gzip": "gzip",
    "lz4_raw": "lz4",
    "zstd": "zstd",
}


@dataclass
class Dataset:
    """One table written in several codecs.

    Attributes
    ----------
    name : str
        ``"lineitem"``, ``"entropy"`` or ``"user"``.
    dirs : dict
        ``{codec: directory}``; ``"uncompressed"`` is always present (the
        decode-only bound).
    rows : int
    arrow_bytes : int
        Size of the table in Arrow memory (``pyarrow.Table.nbytes``).
    file_bytes : dict
        ``{codec: bytes on disk}``.
    files : int
        Files per codec.
    ipc_dir : Path or None
        The uncompressed files as Arrow IPC files (the decode-free ceiling).
    """

    name: str
    dirs: dict
    rows: int
    arrow_bytes: int
    file_bytes: dict = field(default_factory=dict)
    files: int = 0
    ipc_dir: Path | None = None

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "dirs": {k: str(v) for k, v in self.dirs.items()},
            "rows": self.rows,
            "arrow_bytes": self.arrow_bytes,
            "file_bytes": self.file_bytes,
            "files": self.files,
            "ipc_dir": None if self.ipc_dir is None else str(self.ipc_dir),
            "ipc_bytes": self.ipc_bytes,
        }

    @property
    def ipc_bytes(self) -> int | None:
        """Bytes of the Arrow IPC files on disk (None without them)."""
        return None if self.ipc_dir is None else _dir_bytes(self.ipc_dir, "*.arrow")


def _dir_bytes(path: Path, pattern: str = "*.parquet") -> int:
    return sum(p.stat().st_size for p in Path(path).glob(pattern))


@dataclass(frozen=True)
class _Part:
    """One file of a generated dataset, as sent to a writer process (picklable)."""

    kind: str
    index: int
    rows: int
    first_row: int
    seed: int
    dirs: dict
    row_group_rows: int | None


def _write_part(part: _Part) -> int:
    """Build one part's rows and write them in every codec, and the IPC twin; its Arrow bytes.

    Module-level, with a picklable argument: it runs in spawned processes.
    """
    table = make_table(part.kind, part.rows, part.seed + part.index, part.first_row)
    use_dictionary = KINDS[part.kind][1]
    for codec, path in part.dirs.items():
        pq.write_table(
            table,
            Path(path) / f"part-{part.index:04d}.parquet",
            compression=CODECS[codec],
            use_dictionary=use_dictionary,
            row_group_size=part.row_group_rows,
        )
    write_twin(Path(part.dirs["uncompressed"]) / f"part-{part.index:04d}.parquet")
    return table.nbytes


@contextlib.contextmanager
def writer_pool(processes: int):
    """Processes that write the parts of datasets, for :func:`generate`; None for one (this process writes).

    Processes, not threads: building a table is numpy work that holds the
    GIL for much of its time. They are spawned (never forked: the caller
    may hold a CUDA context or threads), when the first part is submitted;
    one pool serves every dataset of a run, so they start once.
    """
    if processes <= 1:
        yield None
        return
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


def _write_parts(parts: list[_Part], pool: Executor | None, progress=None) -> int:
    """Write ``parts`` in ``pool`` (None: in this process); their Arrow bytes, summed."""
    total = 0
    if pool is None:
        for part in parts:
            total += _write_part(part)
            if progress:
                progress(1)
        return total
    futures = [pool.submit(_write_part, part) for part in parts]
    for fut in futures:
        total += fut.result()
        if progress:
            progress(1)
    return total


def generate(
    root,
    kind: str,
    arrow_bytes: int,
    files: int,
    codecs=tuple(CODECS),
    seed: int = 42,
    processes: int | None = None,
    row_group_rows: int | None = None,
    progress=None,
    pool: Executor | None = None,
) -> Dataset:
    """Write (or reuse) table ``kind`` of about ``arrow_bytes`` in every codec.

    Parameters
    ----------
    root : path
        Directory the dataset goes under (``root/kind``).
    kind : {"lineitem", "entropy"}
    arrow_bytes : int
        Target size of the table in Arrow memory.
    files : int
        Files per codec (a Dask partition each, by default).
    codecs : sequence of str
        Keys of :data:`CODECS`; ``"uncompressed"`` is always added.
    seed : int
    processes : int, optional
        Processes writing files at once (default: one per core, at most one
        per file). The data is the same for any number.
    row_group_rows : int, optional
        Rows per row group (default: pyarrow's).
    progress : callable, optional
        Called with the number of files done, after each file.
    pool : Executor, optional
        Where the files are written (:func:`writer_pool`), in place of a
        pool of ``processes`` of its own.

    Returns
    -------
    Dataset

    Raises
    ------
    KeyError
        An unknown kind or codec.
    """
    codecs = ["uncompressed"] + [c for c in codecs if c != "uncompressed"]
    for c in codecs:
        CODECS[c]  # noqa: B018 - raise KeyError early
    base = Path(root) / kind
    wanted = {
        "kind": kind,
        "arrow_bytes": int(arrow_bytes),
        "files": int(files),
        "codecs": codecs,
        "seed": seed,
        "row_group_rows": row_group_rows,
    }
    manifest = base / "manifest.json"
    dirs = {c: base / c for c in codecs}
    if manifest.exists():
        old = json.loads(manifest.read_text())
        if old.get("made_with") == wanted:
            if progress:
                progress(files)
            ipc = write_ipc_copy(dirs["uncompressed"], processes)  # kept data from before the twins existed
            return Dataset(kind, dirs, old["rows"], old["table_bytes"], {c: _dir_bytes(d) for c, d in dirs.items()}, files, ipc)
    if base.exists():
        shutil.rmtree(base)
    for d in dirs.values():
        d.mkdir(parents=True)
    per_row = bytes_per_row(kind)
    rows_per_file = max(1, int(arrow_bytes / per_row / files))
    processes = min(processes or os.cpu_count() or 1, files)
    parts = [_Part(kind, i, rows_per_file, i * rows_per_file, seed, dirs, row_group_rows) for i in range(files)]
    with contextlib.nullcontext(pool) if pool is not None else writer_pool(processes) as writers:
        total = _write_parts(parts, writers, progress)
    rows = rows_per_file * files
    ipc = write_ipc_copy(dirs["uncompressed"], processes)  # the parts wrote their twins: nothing left to do
    manifest.write_text(json.dumps({"made_with": wanted, "rows": rows, "table_bytes": total}, indent=1))
    return Dataset(kind, dirs, rows, total, {c: _dir_bytes(d) for c, d in dirs.items()}, files, ipc)


def describe_dir(path) -> tuple[int, int, str]:
    """(rows, Arrow bytes, codec name) of a directory of Parquet files.

    The Arrow size is read from the files (footers give no Arrow size).
    """
    files = sorted(Path(path).glob("*.parquet")) or sorted(Path(path).rglob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"no *.parquet files under {path}")
    rows = nbytes = 0
    for f in files:
        t = pq.read_table(f)
        rows += t.num_rows
        nbytes += t.nbytes
    codec = pq.ParquetFile(files[0]).metadata.row_group(0).column(0).compression
    return rows, nbytes, str(codec).lower()


def from_user(path, root, threads: int | None = None) -> Dataset:
    """Take a user's directory of Parquet files, plus an uncompressed copy.

    The copy (``root/user/uncompressed``) keeps each file's row groups and
    is the decode-only bound; its Arrow IPC twins (``root/user/ipc``) are
    the decode-free ceiling.

    Raises
    ------
    FileNotFoundError
        No Parquet files under ``path``.
    """
    path = Path(path)
    rows, nbytes, codec = describe_dir(path)
    files = sorted(path.glob("*.parquet")) or sorted(path.rglob("*.parquet"))
    copy = Path(root) / "user" / "uncompressed"
    for old in (copy, copy.parent / "ipc"):
        if old.exists():
            shutil.rmtree(old)
    copy.mkdir(parents=True)

    def rewrite(i_f):
        i, f = i_f
        pf = pq.ParquetFile(f)
        rg_rows = max(1, pf.metadata.row_group(0).num_rows) if pf.metadata.num_row_groups else None
        pq.write_table(pf.read(), copy / f"part-{i:04d}.parquet", compression="none", row_group_size=rg_rows)

    with ThreadPoolExecutor(threads or os.cpu_count() or 1) as pool:
        list(pool.map(rewrite, enumerate(files)))
    ipc = write_ipc_copy(copy, threads)
    name = codec if codec != "uncompressed" else "as-is"
    dirs = {"uncompressed": copy, name: path}
    return Dataset("user", dirs, rows, nbytes, {c: _dir_bytes(d) for c, d in dirs.items()}, len(files), ipc)
