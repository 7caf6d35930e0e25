"""dask's own Parquet tests, run through this engine.

dask ships its Parquet test suite in the wheel
(``dask/dataframe/io/tests/test_parquet.py``); its tests name the engine
``"pyarrow"``. Here they are collected as they are, with that name resolved
to :class:`~dask_hwdecomp.engine.arrow.HwdecompEngine` on the CPU backend
(the project's own page path: footer and page parsing, batched
decompression, the uncompressed image that pyarrow decodes), so every read
and write of the suite goes through this engine.

The seam is dask's engine registry: ``get_engine("pyarrow")`` returns
``dask.dataframe.io.parquet.core._ENGINES["pyarrow"]`` when present.
:func:`test_engine_seam` pins that private name, and
:func:`test_pyarrow_name_reads_through_hwdecomp_cpu` checks that a read by
the name ``"pyarrow"`` really goes through this engine's CPU backend.

What is left out, each with its reason, is :data:`LEFT_OUT`; nothing else.
(A read with a pyarrow filesystem takes no engine at all in dask; the one
test of the suite that makes such a read needs the network and is left out.)
dask's conftest marks (``skip_with_pyarrow_strings``,
``xfail_with_pyarrow_strings``) are applied by this project's conftest.
On 2 cores the module runs in about 20 s.
"""

from __future__ import annotations

import dask.dataframe.io.parquet.core as dask_parquet_core
import pytest
from dask.dataframe.io.tests import test_parquet as dask_suite
from dask.dataframe.io.tests.test_parquet import *  # noqa: F401,F403  (collected here)

from dask_hwdecomp import collect_reports
from dask_hwdecomp.engine.arrow import HwdecompEngine

LEFT_OUT = {
    "test_get_engine_pyarrow": "asserts get_engine returns dask's own ArrowDatasetEngine class",
    "test_pyarrow_filesystem_option_real_data": "needs the network (an s3:// bucket)",
}

for _name in LEFT_OUT:
    globals().pop(_name)


@pytest.fixture(autouse=True)
def _pyarrow_is_hwdecomp_cpu(monkeypatch):
    """``engine="pyarrow"`` (and ``"auto"``) resolve to HwdecompEngine on the CPU backend.

    The backend is set through ``HWDECOMP_BACKEND``: it reaches every thread
    and the processes the ``processes`` scheduler spawns.
    """
    monkeypatch.setitem(dask_parquet_core._ENGINES, "pyarrow", HwdecompEngine)
    monkeypatch.setenv("HWDECOMP_BACKEND", "cpu")


def test_engine_seam():
    """The private registry this module relies on exists and is what get_engine consults."""
    assert isinstance(dask_parquet_core._ENGINES, dict)
    assert dask_parquet_core.get_engine("pyarrow") is HwdecompEngine
    assert dask_parquet_core.get_engine("auto") is HwdecompEngine


def test_pyarrow_name_reads_through_hwdecomp_cpu(tmp_path):
    import dask.dataframe as dd
    import pandas as pd

    pd.DataFrame({"a": range(100)}).to_parquet(tmp_path / "x.parquet", compression="zstd")
    with collect_reports() as report:
        got = dd.read_parquet(tmp_path, engine="pyarrow").compute(scheduler="sync")
    assert got["a"].tolist() == list(range(100))
    assert report.files == 1
    assert {backend for backend, _ in report.by_backend} == {"cpu"}, dict(report.by_backend)
    assert report.by_backend[("cpu", "ZSTD")].pages > 0


def test_left_out_tests_exist():
    """Each name left out is a test of dask's suite (a rename there must show here)."""
    for name in LEFT_OUT:
        assert callable(getattr(dask_suite, name)), name
