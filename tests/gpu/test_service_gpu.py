"""The node's GPU service on a real GPU: one CUDA context for every reading process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow.parquet as pq
import pytest

import dask_hwdecomp
from dask_hwdecomp.options import Options
from dask_hwdecomp.routing import registry

from helpers import NO_CUDA_CONTEXT_CHECK, assert_tables_equal

pytestmark = pytest.mark.gpu

_READER = textwrap.dedent("""
    import sys
    import dask_hwdecomp
    from dask_hwdecomp.routing import registry
    from dask_hwdecomp.options import Options
    dask_hwdecomp.read_table(sys.argv[1], backend="nvcomp")
    pid = registry.get_backend("nvcomp", Options(backend="nvcomp")).pid
""") + NO_CUDA_CONTEXT_CHECK + "print(pid)\n"


def _compute_pids() -> set[int]:
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        pytest.skip(f"nvidia-smi cannot list compute processes: {out.stderr.strip()}")
    return {int(line) for line in out.stdout.split() if line.strip().isdigit()}


def test_reading_processes_share_one_service_and_one_cuda_context(nvcomp_available, tmp_path, matrix_source):
    path = tmp_path / "s.parquet"
    pq.write_table(matrix_source, path, compression="snappy")
    assert_tables_equal(dask_hwdecomp.read_table(path, backend="nvcomp"), pq.read_table(path))
    mine = registry.get_backend("nvcomp", Options(backend="nvcomp")).pid
    readers = [subprocess.run([sys.executable, "-c", _READER, str(path)], capture_output=True, text=True,
                              timeout=300) for _ in range(3)]
    assert all(r.returncode == 0 for r in readers), [r.stderr[-2000:] for r in readers]
    assert {int(r.stdout.split()[-1]) for r in readers} == {mine}
    # The readers hold no CUDA context (each checked its own before it printed); the service is on the GPU.
    # (This test process may hold one: other GPU tests run numba here.)
    assert mine in _compute_pids()
