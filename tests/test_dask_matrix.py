"""The generated matrix through dd.read_parquet: threaded scheduler and a LocalCluster."""

from __future__ import annotations

import dask.dataframe as dd
import pandas as pd
import pyarrow as pa
import pytest

from dask_hwdecomp import hwdecomp

from helpers import assert_tables_equal


def _as_arrow(df: pd.DataFrame) -> pa.Table:
    return pa.Table.from_pandas(df, preserve_index=True)


# The engine's page path (image, batch, decode); on a machine without a GPU
# backend="auto" would hand the read to pyarrow (tested in test_no_gpu.py).
PAGE_PATH = {"backend": "cpu"}


def _both(paths, scheduler, **kwargs):
    ours = dd.read_parquet(paths, engine=hwdecomp, hwdecomp_options=PAGE_PATH, **kwargs)
    ref = dd.read_parquet(paths, engine="pyarrow", **kwargs)
    assert ours.npartitions == ref.npartitions
    return ours.compute(scheduler=scheduler), ref.compute(scheduler=scheduler)


@pytest.mark.parametrize("dtype_backend", [None, "pyarrow"])
def test_matrix_threaded(matrix_files, dtype_backend):
    for f in matrix_files:
        ours, ref = _both(str(f.path), "threads", dtype_backend=dtype_backend, split_row_groups=True)
        assert len(ours) == 240
        if dtype_backend == "pyarrow":
            assert_tables_equal(_as_arrow(ours), _as_arrow(ref))
        else:  # numpy-backed object columns (lists, maps) do not convert back
            pd.testing.assert_frame_equal(ours, ref)


def test_matrix_columns_and_filters_threaded(matrix_files):
    for f in matrix_files[::3]:
        ours, ref = _both(
            str(f.path),
            "threads",
            columns=["int32_none", "string_some", "list_some", "struct_none"],
            filters=[("int32_none", ">", 0)],
            dtype_backend="pyarrow",
        )
        assert_tables_equal(_as_arrow(ours), _as_arrow(ref))


@pytest.mark.distributed
def test_matrix_local_cluster(matrix_files):
    from distributed import Client, LocalCluster

    from dask_hwdecomp.engine.plugin import HwdecompPlugin

    paths = [str(f.path) for f in matrix_files]
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            client.register_plugin(HwdecompPlugin())
            # all files as one dataset: one partition per row group
            ours = dd.read_parquet(
                paths, engine=hwdecomp, dtype_backend="pyarrow", split_row_groups=True, hwdecomp_options=PAGE_PATH
            )
            # The reference runs on the same cluster: results that cross
            # processes are pickled alike (pickling drops map field names).
            ref = dd.read_parquet(paths, engine="pyarrow", dtype_backend="pyarrow", split_row_groups=True)
            assert ours.npartitions == ref.npartitions == 3 * len(paths)
            assert_tables_equal(_as_arrow(ours.compute()), _as_arrow(ref.compute()))
