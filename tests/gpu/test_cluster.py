"""dd.read_parquet(engine=hwdecomp) on a distributed cluster of GPU workers.

Two workers sharing one GPU (a plain LocalCluster), and one GPU per worker
through dask-cuda's LocalCUDACluster where the machine has two GPUs.
"""

from __future__ import annotations

import time

import dask.dataframe as dd
import pyarrow.parquet as pq
import pytest

from dask_hwdecomp import hwdecomp
from dask_hwdecomp.engine.metrics import cluster_metrics
from dask_hwdecomp.engine.plugin import HwdecompPlugin

from helpers import assert_tables_equal, matrix_table

GPU_CODECS = {"snappy": "SNAPPY", "gzip": "GZIP", "lz4": "LZ4_RAW", "zstd": "ZSTD"}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    table = matrix_table(n_rows=2000, seed=3)
    out = {}
    for codec in GPU_CODECS:
        root = tmp_path_factory.mktemp(codec)
        for i in range(4):
            pq.write_table(table, root / f"part{i}.parquet", compression=codec, row_group_size=500, data_page_size=4096)
        out[codec] = str(root)
    return out


def _metrics(client, want_codecs, timeout=30.0):
    deadline = time.monotonic() + timeout
    metrics = {}
    while time.monotonic() < deadline:
        metrics = cluster_metrics(client)
        if all(("hwdecomp-nvcomp-" + c, "pages") in metrics for c in want_codecs):
            break
        time.sleep(0.5)
    return metrics


def _check_cluster(client, datasets):
    client.register_plugin(HwdecompPlugin(backend="auto"))
    routes = client.run(lambda dask_worker: dask_worker.extensions["hwdecomp"].backends)
    for route in routes.values():
        assert route["snappy"][0] in ("hardware", "nvcomp"), route
        assert route["zstd"][0] == "nvcomp", route
    for path in datasets.values():
        ours = dd.read_parquet(path, engine=hwdecomp, dtype_backend="pyarrow").compute()
        ref = dd.read_parquet(path, engine="pyarrow", dtype_backend="pyarrow").compute()
        import pyarrow as pa

        assert_tables_equal(pa.Table.from_pandas(ours), pa.Table.from_pandas(ref))
    metrics = _metrics(client, GPU_CODECS.values())
    for codec in GPU_CODECS.values():
        assert metrics.get(("hwdecomp-nvcomp-" + codec, "pages"), 0) > 0, (codec, metrics)
        assert ("hwdecomp-cpu-" + codec, "pages") not in metrics, (codec, metrics)
    return metrics


def test_local_cluster_two_workers_one_gpu(nvcomp_available, datasets):
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            _check_cluster(client, datasets)


def test_local_cuda_cluster_one_gpu_per_worker(nvcomp_available, datasets):
    dask_cuda = pytest.importorskip("dask_cuda", reason="dask-cuda is not installed")
    from cuda.bindings import driver

    driver.cuInit(0)
    _, count = driver.cuDeviceGetCount()
    if count < 2:
        pytest.skip(f"LocalCUDACluster needs two GPUs; this machine has {count}")
    from distributed import Client

    with dask_cuda.LocalCUDACluster(n_workers=2, threads_per_worker=2, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            visible = client.run(lambda: __import__("os").environ.get("CUDA_VISIBLE_DEVICES"))
            firsts = {v.split(",")[0] for v in visible.values()}
            assert len(firsts) == 2, visible  # each worker's device 0 is a different GPU
            _check_cluster(client, datasets)
