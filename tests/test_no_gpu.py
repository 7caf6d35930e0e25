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
from dask_hwdecomp import LimitExceededError, Options, ReadReport, collect_reports, hwdecomp
from dask_hwdecomp.cli.info import collect
from dask_hwdecomp.report import PYARROW_NO_GPU, UNKNOWN_CODEC
from dask_hwdecomp.routing.router import pyarrow_routes

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


def test_remote_file_sizes_come_from_the_footer_pyarrow_read_or_are_unknown():
    fs = fsspec.filesystem("memory")
    with fs.open("/nogpu/data.parquet", "wb") as f:
        pq.write_table(pa.table({"a": np.arange(3000)}), f, compression="zstd", row_group_size=1000)
    with fs.open("/nogpu/data.parquet", "rb") as f:
        md = pq.read_metadata(f)
    report = ReadReport()
    got = dask_hwdecomp.read_table("memory://nogpu/data.parquet", report=report)
    assert got.column("a").to_pylist() == list(range(3000))
    # read_table's pyarrow read holds the footer: no second request for it
    sizes = [md.row_group(i).column(0) for i in range(3)]
    assert _reported_bytes(report) == {"ZSTD": (sum(c.total_compressed_size for c in sizes),
                                                sum(c.total_uncompressed_size for c in sizes))}
    assert (report.columns[("a", "pyarrow", "no GPU backend in use")].chunks, report.files) == (3, 1)
    # dask's read keeps it to itself, and reading it again would cost a request
    with collect_reports() as report:
        dd.read_parquet("memory://nogpu/data.parquet", engine=hwdecomp).compute(scheduler="sync")
    assert list(report.by_backend) == [(PYARROW_NO_GPU, UNKNOWN_CODEC)]
    assert "not read" in report.summary()


def test_info_and_plugin_routing_say_pyarrow():
    assert collect()["routing"] == pyarrow_routes()
    assert all(names == [PYARROW_NO_GPU] for names in pyarrow_routes().values())
    assert collect("cpu")["routing"]["snappy"] == ["cpu"]


# --- what pyarrow's read counts is what the page path counts ---------------------------------


@pytest.fixture(scope="module")
def three_groups(tmp_path_factory):
    """One file of 3 row groups and 2 columns (LZ4_RAW: pyarrow's metadata calls it "LZ4")."""
    path = tmp_path_factory.mktemp("groups") / "three.parquet"
    rng = np.random.default_rng(5)
    pq.write_table(pa.table({"a": np.arange(3000), "b": rng.random(3000)}), path, compression="lz4",
                   row_group_size=1000)
    return str(path)


def _decoded(report: ReadReport) -> dict:
    """``{(column, where, why): (chunks, rows)}``."""
    return {key: (d.chunks, d.rows) for key, d in report.columns.items()}


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"row_groups": [2, 0]}, {"columns": ["b"], "filters": [("a", ">", 2500)]}],
    ids=str,
)
def test_read_table_counts_the_chunks_and_rows_of_the_page_path(three_groups, kwargs):
    auto, cpu = ReadReport(), ReadReport()
    dask_hwdecomp.read_table(three_groups, report=auto, **kwargs)
    dask_hwdecomp.read_table(three_groups, backend="cpu", report=cpu, **kwargs)
    assert {b for b, _ in auto.by_backend} == {PYARROW_NO_GPU}
    assert _decoded(auto) == _decoded(cpu)
    groups = len(kwargs.get("row_groups", [0, 1, 2]))
    assert set(_decoded(auto).values()) == {(groups, 1000 * groups)}  # rows before the row filter


@pytest.mark.parametrize(
    "kwargs, chunks",
    # dask keeps only the row groups whose statistics may pass the filter: the last one.
    [({}, 3), ({"split_row_groups": True}, 3), ({"filters": [("a", ">", 2500)]}, 1), ({"columns": ["b"]}, 3)],
    ids=str,
)
def test_dask_counts_the_chunks_and_rows_of_the_page_path(three_groups, kwargs, chunks):
    # dask reads a whole file in one ParquetFile.read: one Arrow chunk per column, not one per row group.
    reports = {}
    for backend in ("auto", "cpu"):
        with collect_reports() as reports[backend]:
            dd.read_parquet(three_groups, engine=hwdecomp, hwdecomp_options={"backend": backend}, **kwargs).compute(
                scheduler="sync"
            )
    assert {b for b, _ in reports["auto"].by_backend} == {PYARROW_NO_GPU}
    assert _decoded(reports["auto"]) == _decoded(reports["cpu"])
    assert set(_decoded(reports["auto"]).values()) == {(chunks, 1000 * chunks)}


def test_codec_names_are_parquet_s_in_both_paths(three_groups, corpus):
    data = corpus / "data"
    for path, codec in [(three_groups, "LZ4_RAW"), (data / "lz4_raw_compressed.parquet", "LZ4_RAW"),
                        (data / "hadoop_lz4_compressed.parquet", "LZ4")]:
        for backend in ("auto", "cpu"):
            report = ReadReport()
            dask_hwdecomp.read_table(path, backend=backend, report=report)
            assert list(report.backends) == [codec], (path, backend, report.backends)
        with collect_reports() as report:
            dd.read_parquet(str(path), engine=hwdecomp).compute(scheduler="sync")
        assert list(report.backends) == [codec], (path, report.backends)


# --- a limit the user set is enforced ----------------------------------------------------------


def test_a_limit_set_takes_the_page_path_which_enforces_it(files, monkeypatch):
    # pyarrow's read enforces neither limit: before, every row came back.
    path = files[0]
    with pytest.raises(LimitExceededError, match="max_page_bytes"):
        dask_hwdecomp.read_table(path, max_page_bytes="1KiB")
    with pytest.raises(LimitExceededError, match="max_batch_bytes"):
        dask_hwdecomp.read_table(path, max_batch_bytes="10KiB")
    df = dd.read_parquet(str(path), engine=hwdecomp, hwdecomp_options={"max_page_bytes": "1KiB"})
    with pytest.raises(LimitExceededError, match="max_page_bytes"):
        df.compute(scheduler="sync")
    monkeypatch.setenv("HWDECOMP_MAX_PAGE_BYTES", "1KiB")
    with pytest.raises(LimitExceededError, match="max_page_bytes"):
        dask_hwdecomp.read_table(path)
    monkeypatch.delenv("HWDECOMP_MAX_PAGE_BYTES")
    # a limit the data keeps within: read on the page path, as backend="cpu" reads
    report = ReadReport()
    got = dask_hwdecomp.read_table(path, max_page_bytes="64MiB", report=report)
    assert_tables_equal(got, pq.read_table(path))
    assert report.backends == {"SNAPPY": ["cpu"]}


def test_default_limits_leave_the_read_to_pyarrow(files):
    report = ReadReport()
    dask_hwdecomp.read_table(files[0], max_page_bytes=Options().max_page_bytes, report=report)
    assert report.backends == {"SNAPPY": [PYARROW_NO_GPU]}
