"""A batch's fetch plan: every column chunk lands where the plan says (CI, no GPU)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileSystem

from dask_hwdecomp.readpath.fetch import fetch_into, plan_fetch
from dask_hwdecomp.readpath.plan import Piece, plan_piece


def test_every_chunk_lands_at_its_src_base(tmp_path):
    fs = LocalFileSystem()
    paths = []
    for k in range(3):
        paths.append(tmp_path / f"f{k}.parquet")
        n = 3000 * (k + 1)
        table = pa.table({"a": list(range(n)), "b": [str(i % 13) for i in range(n)], "c": [1.5 * i for i in range(n)]})
        pq.write_table(table, paths[-1], row_group_size=2000, compression="zstd")
    # Columns a and c: the ranges of b lie between them, so a file's reads are coalesced over gaps.
    plans = [plan_piece(fs, Piece(str(p)), ["a", "c"]) for p in paths]
    fetch = plan_fetch(plans)
    assert len(fetch.files) == len(plans)
    assert sum(r.length for r in fetch.ranges) == fetch.nbytes
    buf = bytearray(fetch.nbytes)
    fetch_into(fs, fetch.ranges, memoryview(buf))
    for path, plan, spec in zip(paths, plans, fetch.files):
        data = path.read_bytes()
        assert spec.footer is plan.footer and spec.row_groups == plan.row_groups
        assert [(c.row_group, c.column) for c in spec.chunks] == [(c.row_group, c.column) for c in plan.chunks]
        for c in spec.chunks:
            assert buf[c.src_base : c.src_base + c.rng.length] == data[c.rng.start : c.rng.start + c.rng.length]
