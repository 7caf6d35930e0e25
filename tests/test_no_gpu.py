"""``backend="auto"`` on a machine where no GPU backend can run: pyarrow reads.

There the CPU pool would only repeat pyarrow's decompression, with a page
scan and an uncompressed copy on top; auto hands the read to pyarrow's own
reader, and every report says so. ``backend="cpu"`` keeps the page path.
These tests run where no GPU backend can (CI); on a GPU machine auto takes
the GPU and ``tests/gpu`` covers it.
"""

from __future__ import annotations

import dask.dataframe as dd
import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dask_hwdecomp
from dask_hwdecomp import ReadReport, collect_reports, hwdecomp
from dask_hwdecomp.cli.info import collect
from dask_hwdecomp.decompress.routing import pyarrow_routes
from dask_hwdecomp.report import PYARROW_NO_GPU, UNKNOWN_CODEC

from helpers import assert_tables_equal, gpu_available

pytestmark = pytest.mark.skipif(gpu_available(), reason="a GPU backend runs here: auto takes the GPU")


def _footer_bytes(path, columns=None, row_groups=None) -> dict:
    """{codec: (compressed, uncompressed)} over the chunks read, from pyarrow's footer."""
    md = pq.read_metadata(path)
    out: dict = {}
    for rg in range(md.num_row_groups) if row_groups is None else row_groups:
        for i in range(md.num_columns):
            c = md.row_group(rg).column(i)
            if columns is not None and c.path_in_schema.split(".")[0] not in columns:
                continue
            cb, ub = out.get(c.compression, (0, 0))
            out[c.compression] = (cb + c.total_compressed_size, ub + c.total_uncompressed_size)
    return out


def _reported_bytes(report: ReadReport) -> dict:
    assert {b for b, _ in report.by_backend} == {PYARROW_NO_GPU}, dict(report.by_backend)
    return {c: (s.compressed_bytes, s.uncompressed_bytes) for (_, c), s in report.by_backend.items()}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("nogpu")
    rng = np.random.default_rng(3)
    out = []
    for i, codec in enumerate(("snappy", "zstd", "gzip")):
        n = 6000
        table = pa.table(
            {
                "k": np.arange(i * n, (i + 1) * n),
                "v": rng.random(n),
                "s": pa.array([f"s{j % 211}" for j in range(n)]),
            }
        )
        path = root / f"part{i}-{codec}.parquet"
        pq.write_table(table, path, compression=codec, row_group_size=1500)
        out.append(path)
    return out


def test_read_table_is_pyarrows_read_and_says_so(files):
    for path in files:
        report = ReadReport()
        got = dask_hwdecomp.read_table(path, report=report)
        assert_tables_equal(got, pq.read_table(path))
        assert report.files == 1 and report.batches == 0
        assert _reported_bytes(report) == _footer_bytes(path)
        assert report.stages["pyarrow"] > 0 and report.stages["decompress"] == 0
        assert all(row["pages"] is None for row in report.to_dict()["by_backend"])
        assert PYARROW_NO_GPU in report.summary()


def test_read_table_subsets_equal_pyarrow(files):
    path = files[1]
    report = ReadReport()
    got = dask_hwdecomp.read_table(path, columns=["s"], filters=[("k", ">", 7000)], report=report)
    assert_tables_equal(got, pq.read_table(path, columns=["s"], filters=[("k", ">", 7000)]))
    assert _reported_bytes(report) == _footer_bytes(path, columns={"s", "k"})
    report = ReadReport()
    got = dask_hwdecomp.read_table(path, row_groups=[3, 1], columns=["v"], report=report)
    assert_tables_equal(got, pq.ParquetFile(path).read_row_groups([3, 1], columns=["v"]))
    assert _reported_bytes(report) == _footer_bytes(path, columns={"v"}, row_groups=[3, 1])


def test_cpu_backend_by_name_keeps_the_page_path(files):
    report = ReadReport()
    got = dask_hwdecomp.read_table(files[0], backend="cpu", report=report)
    assert_tables_equal(got, pq.read_table(files[0]))
    assert report.backends == {"SNAPPY": ["cpu"]} and report.batches == 1
    assert sum(s.pages for s in report.by_backend.values()) > 0


def test_verifying_checksums_takes_the_page_path(files):
    report = ReadReport()
    dask_hwdecomp.read_table(files[2], verify_checksums=True, report=report)
    assert report.backends == {"GZIP": ["cpu"]}


def test_dask_read_is_pyarrows_read_and_says_so(files):
    paths = [str(p) for p in files]
    with collect_reports() as report:
        got = dd.read_parquet(paths, engine=hwdecomp).compute(scheduler="threads")
    pd.testing.assert_frame_equal(got, dd.read_parquet(paths, engine="pyarrow").compute(scheduler="threads"))
    assert report.files == 3 and report.batches == 0
    want: dict = {}
    for p in files:
        for codec, sizes in _footer_bytes(p).items():
            want[codec] = sizes
    assert _reported_bytes(report) == want
    assert report.stages["pyarrow"] > 0 and report.stages["decompress"] == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"columns": ["k", "s"], "filters": [("v", "<", 0.5)]},
        {"index": "k", "split_row_groups": True},
        {"aggregate_files": True, "split_row_groups": 8},
        {"dtype_backend": "pyarrow"},
    ],
    ids=str,
)
def test_dask_read_equals_pyarrow(files, kwargs):
    paths = [str(p) for p in files]
    ours = dd.read_parquet(paths, engine=hwdecomp, **kwargs)
    ref = dd.read_parquet(paths, engine="pyarrow", **kwargs)
    assert ours.npartitions == ref.npartitions
    with collect_reports() as report:
        got = ours.compute(scheduler="threads")
    pd.testing.assert_frame_equal(got, ref.compute(scheduler="threads"))
    assert {b for b, _ in report.by_backend} == {PYARROW_NO_GPU}


def test_remote_file_says_sizes_are_unknown():
    fs = fsspec.filesystem("memory")
    with fs.open("/nogpu/data.parquet", "wb") as f:
        pq.write_table(pa.table({"a": np.arange(3000)}), f, compression="zstd")
    report = ReadReport()
    got = dask_hwdecomp.read_table("memory://nogpu/data.parquet", report=report)
    assert got.column("a").to_pylist() == list(range(3000))
    assert list(report.by_backend) == [(PYARROW_NO_GPU, UNKNOWN_CODEC)]
    assert "not read" in report.summary()


def test_info_and_plugin_routing_say_pyarrow():
    assert collect()["routing"] == pyarrow_routes()
    assert all(names == [PYARROW_NO_GPU] for names in pyarrow_routes().values())
    assert collect("cpu")["routing"]["snappy"] == ["cpu"]
