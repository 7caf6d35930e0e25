"""Distributed faults: a worker killed in the middle of a read; memory over many reads."""

from __future__ import annotations

import os
import time

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dask_hwdecomp import hwdecomp

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def many_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    rng = np.random.default_rng(5)
    for i in range(24):
        n = 20_000
        table = pa.table(
            {
                "k": np.arange(i * n, (i + 1) * n),
                "v": rng.random(n),
                "s": pa.array([f"row-{j % 1000}" for j in range(n)]),
            }
        )
        pq.write_table(table, root / f"part{i:02d}.parquet", compression="zstd", row_group_size=5000)
    return str(root)


def test_worker_killed_mid_read_gives_the_right_result(many_files):
    from distributed import Client, LocalCluster

    ref = dd.read_parquet(many_files, engine="pyarrow", split_row_groups=True).compute(scheduler="threads")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            df = dd.read_parquet(many_files, engine=hwdecomp, split_row_groups=True, hwdecomp_options={"backend": "cpu"})
            future = client.compute(df)
            # Kill one worker once tasks are running on it; its nanny restarts
            # it and the scheduler reruns what it held.
            victim = None
            deadline = time.monotonic() + 60
            while victim is None and time.monotonic() < deadline and not future.done():
                busy = [w for w, tasks in client.processing().items() if tasks]
                victim = busy[0] if busy else None
                time.sleep(0.01)
            assert victim is not None, "no task ran before the read finished"
            try:
                client.run(os._exit, 1, workers=[victim])
            except Exception:  # the worker dies under the call: expected
                pass
            got = future.result(timeout=120)
            pd.testing.assert_frame_equal(got, ref)
            # the cluster came back to two workers and reads again
            client.wait_for_workers(2, timeout=60)
            pd.testing.assert_frame_equal(df.compute(), ref)


def test_repeated_reads_keep_worker_memory_flat(many_files):
    """200 reads on one worker: its resident memory stops growing (CPU backend)."""
    from distributed import Client, LocalCluster

    path = os.path.join(many_files, "part00.parquet")

    def rss(dask_worker=None):
        import psutil

        return psutil.Process().memory_info().rss

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            df = dd.read_parquet(path, engine=hwdecomp, hwdecomp_options={"backend": "cpu"})
            for _ in range(20):  # warm up: pools, imports, allocator arenas
                df.compute()
            before = next(iter(client.run(rss).values()))
            for _ in range(200):
                df.compute()
            after = next(iter(client.run(rss).values()))
    # One read holds about 1 MB of pages and 0.6 MB of Arrow data; 200 reads
    # that leaked even a tenth of that would add 30 MB.
    assert after - before < 30 * 2**20, (before, after)
