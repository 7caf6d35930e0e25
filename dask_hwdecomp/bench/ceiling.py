"""The decode-free ceiling: the same table as uncompressed Arrow IPC files.

Each uncompressed Parquet file of a dataset has an Arrow IPC twin (written
once, one record batch per row group) in the dataset's ``ipc`` directory.
Reading the twins memory-mapped and converting them to pandas the way
dask's pyarrow engine does costs everything a read costs except finding,
decompressing and decoding pages: no engine reading Parquet can go faster.
The read goes through ``dd.from_map`` with the partitions of the Parquet
read (file and row groups of each, from dask's own plan), so both make the
same tasks.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["IPC_SUFFIX", "IpcPart", "ipc_dir_of", "write_twin", "write_ipc_copy", "ipc_parts", "read_ipc_part",
           "read_ipc_ceiling"]

IPC_SUFFIX = ".arrow"


def ipc_dir_of(uncompressed_dir) -> Path:
    """Where the IPC twins of ``uncompressed_dir`` live: its sibling ``ipc``."""
    return Path(uncompressed_dir).parent / "ipc"


def _twin(parquet_file: Path, ipc_dir: Path) -> Path:
    return ipc_dir / (parquet_file.stem + IPC_SUFFIX)


def _write_twin(parquet_file: Path, target: Path) -> None:
    tmp = target.with_name(target.name + ".tmp")
    with pq.ParquetFile(parquet_file) as pf, pa.OSFile(str(tmp), "wb") as sink, \
            pa.ipc.new_file(sink, pf.schema_arrow) as writer:
        schema = pf.schema_arrow
        for i in range(pf.metadata.num_row_groups):
            group = pf.read_row_group(i)
            # One batch per row group, so that a partition of row groups is a
            # set of batches (ChunkedArray.combine_chunks keeps empty groups).
            writer.write_batch(pa.RecordBatch.from_arrays([c.combine_chunks() for c in group.columns], schema=schema))
    os.replace(tmp, target)  # a cut-short write never passes for a twin


def write_twin(parquet_file) -> Path:
    """Write the IPC twin of one uncompressed Parquet file (in :func:`ipc_dir_of` its directory).

    The dataset writer calls it in the process that has just written the
    file, so that the twins are made in parallel with the files.

    Returns
    -------
    Path
        The twin.
    """
    parquet_file = Path(parquet_file)
    ipc_dir = ipc_dir_of(parquet_file.parent)
    ipc_dir.mkdir(parents=True, exist_ok=True)
    target = _twin(parquet_file, ipc_dir)
    _write_twin(parquet_file, target)
    return target


def write_ipc_copy(uncompressed_dir, threads: int | None = None) -> Path:
    """Write the missing IPC twins of every ``*.parquet`` in ``uncompressed_dir``.

    Returns
    -------
    Path
        The IPC directory (:func:`ipc_dir_of`).

    Raises
    ------
    FileNotFoundError
        No Parquet files in ``uncompressed_dir``.
    """
    from concurrent.futures import ThreadPoolExecutor

    files = sorted(Path(uncompressed_dir).glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"no *.parquet files in {uncompressed_dir} to write Arrow IPC twins of")
    ipc_dir = ipc_dir_of(uncompressed_dir)
    ipc_dir.mkdir(parents=True, exist_ok=True)
    todo = [f for f in files if not _twin(f, ipc_dir).exists()]
    with ThreadPoolExecutor(max(1, min(len(todo), threads or os.cpu_count() or 1))) as pool:
        list(pool.map(lambda f: _write_twin(f, _twin(f, ipc_dir)), todo))
    return ipc_dir


@dataclass(frozen=True)
class IpcPart:
    """One partition of the ceiling read: an IPC file and the batches it takes.

    Attributes
    ----------
    path : str
    batches : tuple of int or None
        Record batches (= the Parquet file's row groups); None for all.
    """

    path: str
    batches: tuple[int, ...] | None = None


def _pieces(part) -> list:
    # A dask plan part is {"piece": (path, row_groups, keys)}, or a list of them
    # when files are aggregated.
    return [p["piece"] for p in (part if isinstance(part, list) else [part])]


@functools.lru_cache(maxsize=32)
def _plan(parquet_dir: str, _files: tuple) -> tuple[tuple[tuple[IpcPart, ...], ...], str]:
    """(partitions, how they were found) of the Parquet read of ``parquet_dir``.

    Cached per directory and state of its files (``_files``): the plan is
    made once, in the warm-up read, not in every timed one (the Parquet
    read's planning is part of its time, but the ceiling only borrows its
    shape).
    """
    import dask.dataframe as dd

    ipc_dir = ipc_dir_of(parquet_dir)
    try:
        parts = dd.read_parquet(parquet_dir, engine="pyarrow").expr._plan["parts"]
        plan = tuple(
            tuple(IpcPart(str(_twin(Path(path), ipc_dir)), None if groups is None else tuple(groups))
                  for path, groups, _keys in _pieces(part))
            for part in parts
        )
        return plan, "the Parquet read's partitions"
    except (AttributeError, KeyError, TypeError, ValueError):
        # dask's plan is not public API: without it, one partition per file,
        # which is what dask makes of files smaller than its blocksize.
        files = sorted(Path(parquet_dir).glob("*.parquet"))
        return tuple((IpcPart(str(_twin(f, ipc_dir))),) for f in files), "one partition per file"


def ipc_parts(parquet_dir) -> tuple[list[tuple[IpcPart, ...]], str]:
    """The ceiling's partitions for ``parquet_dir`` and how they were found.

    Each partition is a tuple of :class:`IpcPart` (several when dask
    aggregates files).
    """
    root = Path(parquet_dir).resolve()
    files = tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(root.glob("*.parquet")))
    plan, how = _plan(str(root), files)
    return list(plan), how


def _to_pandas(table: pa.Table):
    """``table`` as pandas, converted as dask's pyarrow engine converts a read."""
    from dask.dataframe.io.parquet.arrow import ArrowDatasetEngine
    from dask.dataframe.utils import pyarrow_strings_enabled

    return ArrowDatasetEngine._arrow_table_to_pandas(table, None, convert_string=pyarrow_strings_enabled())


def read_ipc_part(parts: tuple[IpcPart, ...]):
    """One partition: its IPC batches, memory-mapped, as a pandas DataFrame."""
    tables = []
    for part in parts:
        with pa.memory_map(part.path) as source:
            reader = pa.ipc.open_file(source)
            if part.batches is None:
                tables.append(reader.read_all())
            else:
                tables.append(pa.Table.from_batches([reader.get_batch(i) for i in part.batches], reader.schema))
    return _to_pandas(tables[0] if len(tables) == 1 else pa.concat_tables(tables))


def read_ipc_ceiling(parquet_dir):
    """``dd.from_map`` over the IPC twins of ``parquet_dir``'s files.

    Raises
    ------
    FileNotFoundError
        The twins were not written (:func:`write_ipc_copy`).
    """
    import dask.dataframe as dd

    plan, _how = ipc_parts(parquet_dir)
    first = plan[0][0].path if plan else None
    if first is None or not Path(first).exists():
        raise FileNotFoundError(f"no Arrow IPC twin of {parquet_dir} (expected {first or ipc_dir_of(parquet_dir)})")
    with pa.memory_map(first) as source:
        meta = _to_pandas(pa.ipc.open_file(source).schema.empty_table())
    return dd.from_map(read_ipc_part, plan, meta=meta, label="read-ipc-ceiling", enforce_metadata=False)
