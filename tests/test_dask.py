"""dd.read_parquet(engine=hwdecomp) equals engine="pyarrow" for the same arguments."""

from __future__ import annotations

import dask.dataframe as dd
import fsspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dask_hwdecomp import BackendUnavailableError, collect_reports, hwdecomp

from helpers import sample_frame


def _frame(n: int, seed: int) -> pd.DataFrame:
    return sample_frame(n, seed)


@pytest.fixture(scope="module", params=["snappy", "zstd", "gzip"])
def dataset(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"ds-{request.param}")
    for i in range(3):
        _frame(4000, i).to_parquet(root / f"part{i}.parquet", compression=request.param, row_group_size=1000)
    return str(root)


@pytest.fixture(scope="module")
def hive(tmp_path_factory):
    root = tmp_path_factory.mktemp("hive")
    pd.concat([_frame(3000, i) for i in range(2)]).to_parquet(
        root, partition_cols=["part"], compression="snappy"
    )
    return str(root)


CASES = [
    {},
    {"columns": ["key", "comment"]},
    {"filters": [("key", ">", 2500)]},
    {"filters": [("flag", "==", "N")], "columns": ["price"]},
    {"index": "key"},
    {"split_row_groups": True},
    {"blocksize": "40kB"},
    {"dtype_backend": "pyarrow"},
    {"aggregate_files": True, "split_row_groups": 2},
    {"filters": [[("qty", "<", 5)], [("flag", "==", "R")]]},
]


def _compare(path, scheduler="threads", **kwargs):
    ours = dd.read_parquet(path, engine=hwdecomp, hwdecomp_options={"backend": "cpu"}, **kwargs)
    ref = dd.read_parquet(path, engine="pyarrow", **kwargs)
    assert ours.npartitions == ref.npartitions
    pd.testing.assert_frame_equal(ours.compute(scheduler=scheduler), ref.compute(scheduler=scheduler))


@pytest.mark.parametrize("kwargs", CASES, ids=[str(c) for c in CASES])
def test_threaded_equals_pyarrow(dataset, kwargs):
    _compare(dataset + "/*.parquet", **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"filters": [("part", "==", 1)]}, {"columns": ["price", "part"]}, {"split_row_groups": True}],
    ids=str,
)
def test_hive_partitions_equal_pyarrow(hive, kwargs):
    _compare(hive, **kwargs)


def test_categories_equal_pyarrow(tmp_path):
    df = pd.DataFrame({"c": pd.Categorical(["x", "y", "x", None] * 100), "v": np.arange(400)})
    df.to_parquet(tmp_path / "cat.parquet", compression="snappy")
    _compare(str(tmp_path / "cat.parquet"), categories=["c"])


def test_fsspec_memory_filesystem(tmp_path):
    fs = fsspec.filesystem("memory")
    table = pa.table({"a": np.arange(5000), "b": [str(i) for i in range(5000)]})
    with fs.open("/hw/data.parquet", "wb") as f:
        pq.write_table(table, f, compression="zstd", row_group_size=1000)
    _compare("memory://hw/data.parquet")


@pytest.mark.parametrize("kwargs", [{"filters": [("a", ">", 1500)]}, {"split_row_groups": True}], ids=str)
def test_decode_reads_the_image_not_the_file_again(monkeypatch, kwargs):
    # Hive keys and a row filter make dask build a dataset fragment for each
    # piece; it must come from the image, so that the only reads of the data
    # file while computing are the batch's own (one open per partition).
    from fsspec.implementations.memory import MemoryFileSystem

    fs = fsspec.filesystem("memory")
    for k in (1, 2):
        table = pa.table({"a": np.arange(3000) + 3000 * k, "b": [str(i) for i in range(3000)]})
        with fs.open(f"/hw-reopen/k={k}/data.parquet", "wb") as f:
            pq.write_table(table, f, compression="zstd", row_group_size=1000)
    path = "memory://hw-reopen"
    ours = dd.read_parquet(path, engine=hwdecomp, hwdecomp_options={"backend": "cpu"}, **kwargs)
    ref = dd.read_parquet(path, engine="pyarrow", **kwargs).compute(scheduler="sync")
    opened: list[str] = []
    real_open = MemoryFileSystem._open

    def counting_open(self, path, *args, **kw):
        opened.append(path)
        return real_open(self, path, *args, **kw)

    monkeypatch.setattr(MemoryFileSystem, "_open", counting_open)
    got = ours.compute(scheduler="sync")
    pd.testing.assert_frame_equal(got, ref)
    assert len(opened) == ours.npartitions, opened


def test_one_batch_per_partition_and_report(dataset):
    with collect_reports() as report:
        dd.read_parquet(dataset, engine=hwdecomp, hwdecomp_options={"backend": "cpu"}).compute(scheduler="sync")
    assert report.files == 3
    assert report.batches == 3  # one batched call per output partition
    assert set(report.backends) <= {"SNAPPY", "ZSTD", "GZIP"} and all(v == ["cpu"] for v in report.backends.values())
    # Every stage of the page path was timed; none of it was pyarrow reading a file itself.
    assert all(report.stages.get(s, 0) > 0 for s in ("io", "scan", "decompress", "decode")), report.stages
    assert report.stages.get("pyarrow", 0) == 0, report.stages


def test_aggregated_partition_is_one_batch(dataset):
    with collect_reports() as report:
        df = dd.read_parquet(
            dataset, engine=hwdecomp, split_row_groups=8, aggregate_files=True, hwdecomp_options={"backend": "cpu"}
        )
        df.compute(scheduler="sync")
    assert report.batches == df.npartitions < report.files


def test_unavailable_backend_raises(dataset):
    from dask_hwdecomp.routing import registry

    if registry.probe("hardware") is None:
        pytest.skip("this machine has a hardware decompression engine")
    df = dd.read_parquet(dataset, engine=hwdecomp, hwdecomp_options={"backend": "hardware"})
    with pytest.raises(BackendUnavailableError, match="hardware"):
        df.compute(scheduler="sync")


def test_unknown_option_raises(dataset):
    # The options go into the graph at the call, so they are checked there.
    with pytest.raises(TypeError, match="bakend"):
        dd.read_parquet(dataset, engine=hwdecomp, hwdecomp_options={"bakend": "cpu"})


@pytest.mark.distributed
def test_distributed_local_cluster_processes(dataset, hive):
    from distributed import Client, LocalCluster

    from dask_hwdecomp.engine.metrics import cluster_metrics
    from dask_hwdecomp.engine.plugin import HwdecompPlugin

    with LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            client.register_plugin(HwdecompPlugin(backend="auto"))
            routes = client.run(lambda dask_worker: dask_worker.extensions["hwdecomp"].backends)
            assert len(routes) == 2 and all("snappy" in r for r in routes.values())
            for path, kwargs in [(dataset, {}), (dataset, {"filters": [("key", ">", 100)]}), (hive, {})]:
                # the page path (auto without a GPU would be pyarrow's read)
                ours = dd.read_parquet(path, engine=hwdecomp, hwdecomp_options={"backend": "cpu"}, **kwargs).compute()
                ref = dd.read_parquet(path, engine="pyarrow", **kwargs).compute(scheduler="threads")
                pd.testing.assert_frame_equal(ours, ref)
            import time

            deadline = time.monotonic() + 30
            metrics = {}
            while time.monotonic() < deadline:
                metrics = cluster_metrics(client)
                if any(unit == "pages" for _, unit in metrics):
                    break
                time.sleep(0.5)
            assert any(label.startswith("hwdecomp-") and unit == "pages" and v > 0 for (label, unit), v in metrics.items())
            assert metrics[("hwdecomp-decompress", "seconds")] > 0
