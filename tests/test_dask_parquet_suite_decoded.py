"""dask's own Parquet tests again, with every flat column of every image decoded already.

The same suite as ``test_dask_parquet_suite`` (engine ``"pyarrow"`` resolved
to this engine on the CPU backend), with a column decoder installed through
the seam of ``readpath/batch.py`` that hands over pyarrow's own columns,
one chunk per row group, as the GPU decoder does. Every piece's table is
then put together by ``engine/gputable.py`` from decoded columns and
pyarrow's reads of the rest, and each of dask's tests must still pass.
The seam's decoder runs in this process: tests that read in other
processes (the ``processes`` scheduler) read as in the plain suite.
"""

from __future__ import annotations

import pytest
from test_dask_parquet_suite import *  # noqa: F401,F403  (collected again here)
from test_dask_parquet_suite import _pyarrow_is_hwdecomp_cpu  # noqa: F401  (its autouse fixture)

from dask_hwdecomp import collect_reports
from dask_hwdecomp.readpath.batch import use_column_decoder

from helpers import pyarrow_decoder


@pytest.fixture(autouse=True)
def _every_flat_column_decoded():
    with use_column_decoder(pyarrow_decoder(lambda name: True), always=True):
        yield


def test_decoded_columns_are_taken(tmp_path):
    import dask.dataframe as dd
    import pandas as pd

    pd.DataFrame({"a": range(100), "b": [str(i) for i in range(100)]}).to_parquet(tmp_path / "x.parquet")
    with collect_reports() as report:
        got = dd.read_parquet(tmp_path, engine="pyarrow", columns=["b"]).compute(scheduler="sync")
    assert got["b"].tolist() == [str(i) for i in range(100)]
    assert {(c, where) for (c, where, _) in report.columns} == {("b", "gpu")}
