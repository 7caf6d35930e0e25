"""Processes that read nothing start without the read path: the GPU service and the command line.

A service restarted after a fault, and every ``hwdecomp`` command, pay their
imports before they do anything. pandas, pyarrow's datasets and the read
path (about 1 s of a 1.8 s service start) are loaded only where a read needs
them, through the package's lazy attributes.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_HEAVY = ("pandas", "pyarrow.dataset", "dask.dataframe", "distributed", "dask_hwdecomp.readpath.reader")


def _loaded_after(module: str) -> list[str]:
    code = (f"import sys, {module}; "
            f"print(' '.join(m for m in {_HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.parametrize("module", ["dask_hwdecomp", "dask_hwdecomp.service.main", "dask_hwdecomp.cli.main"])
def test_a_process_that_reads_nothing_loads_no_read_path(module):
    assert _loaded_after(module) == []


def test_the_lazy_names_are_the_read_paths_own():
    import dask_hwdecomp
    from dask_hwdecomp.readpath import reader

    assert dask_hwdecomp.read_table is reader.read_table
    assert dask_hwdecomp.HwdecompFallbackWarning is reader.HwdecompFallbackWarning
    assert {"read_table", "HwdecompFallbackWarning", "hwdecomp"} <= set(dask_hwdecomp.__all__)
