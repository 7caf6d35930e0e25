"""The bench's datasets: written by spawned processes, the same bytes for any number of them, reused when kept."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dask_hwdecomp.bench.data import CODECS, generate, writer_pool
from dask_hwdecomp.bench.tables import KINDS, bytes_per_row, make_table


def _files(root: Path) -> dict:
    """``{relative path: bytes}`` of every Parquet and IPC file under ``root``."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.suffix in (".parquet", ".arrow")}


def _written_in_this_process(kind: str, index: int, rows: int, codec: str, seed: int = 42) -> bytes:
    """One part as the thread pool wrote it before: the same table and writer call, in this process."""
    sink = io.BytesIO()
    pq.write_table(make_table(kind, rows, seed + index, index * rows), sink, compression=CODECS[codec],
                   use_dictionary=KINDS[kind][1])
    return sink.getvalue()


@pytest.mark.parametrize(("kind", "processes", "shared"), [("lineitem", 2, False), ("entropy", 3, True)])
def test_processes_write_the_bytes_one_process_writes(tmp_path, kind, processes, shared):
    size, files, codecs = 600_000, 3, ("uncompressed", "snappy")
    alone = generate(tmp_path / "one", kind, size, files, codecs, processes=1)
    if shared:  # the runner's one pool for every dataset
        with writer_pool(processes) as pool:
            spread = generate(tmp_path / "many", kind, size, files, codecs, pool=pool)
    else:
        spread = generate(tmp_path / "many", kind, size, files, codecs, processes=processes)
    one, many = _files(tmp_path / "one"), _files(tmp_path / "many")
    assert len(one) == files * (len(codecs) + 1) and one.keys() == many.keys()
    assert [name for name in one if one[name] != many[name]] == []
    assert (alone.rows, alone.arrow_bytes, alone.file_bytes) == (spread.rows, spread.arrow_bytes, spread.file_bytes)
    rows = int(size / bytes_per_row(kind) / files)
    assert spread.rows == rows * files
    for index in range(files):
        for codec in codecs:
            assert many[f"{kind}/{codec}/part-{index:04d}.parquet"] == _written_in_this_process(kind, index, rows, codec)
    # each part's IPC twin holds that part's rows
    twin = pq.read_table(tmp_path / "many" / kind / "uncompressed" / "part-0001.parquet")
    with pa.memory_map(str(spread.ipc_dir / "part-0001.arrow")) as source:
        assert pa.ipc.open_file(source).read_all().equals(twin)


def test_kept_data_is_reused_and_other_settings_rewrite_it(tmp_path):
    first = generate(tmp_path, "lineitem", 300_000, 2, ("uncompressed",), processes=1)
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.parquet")}
    done = []
    again = generate(tmp_path, "lineitem", 300_000, 2, ("uncompressed",), processes=1, progress=done.append)
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.parquet")} == stamps, "reused, not rewritten"
    assert done == [2] and again.to_dict() == first.to_dict()
    other = generate(tmp_path, "lineitem", 300_000, 3, ("uncompressed",), processes=1)
    assert other.files == 3 and len(list((tmp_path / "lineitem" / "uncompressed").glob("*.parquet"))) == 3
    assert len(list(other.ipc_dir.glob("*.arrow"))) == 3
