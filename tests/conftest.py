"""Fixtures shared by every test module: the corpus, the generated matrix.

The helpers behind them live in ``helpers.py`` (``from helpers import
assert_tables_equal, write_matrix, ...``) so that test modules of other
layers (the Dask engine) reuse them.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path


def _cuda_device_present() -> bool:
    """Whether this machine has an NVIDIA GPU, found without creating a CUDA context."""
    if glob.glob("/dev/nvidia[0-9]*"):
        return True
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "GPU " in listed


# The GPU decoder's kernel tests run in-process: under numba's CUDA simulator
# where there is no device. It must be chosen before numba.cuda is imported.
if not _cuda_device_present():
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import pytest  # noqa: E402

from helpers import FUZZ_STATS, assert_tables_equal, corpus_root, matrix_table, write_matrix  # noqa: E402

__all__ = ["assert_tables_equal"]

# GPU services that tests start import their backends from this directory
# (sidecar_backends.py): a service is a fresh interpreter, which sees the
# environment, not this process's sys.path.
_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_TESTS, os.environ.get("PYTHONPATH")) if p)


@pytest.fixture(scope="session")
def corpus():
    """The parquet-testing copy (``$HWDECOMP_CORPUS`` overrides the location).

    The repository ships it, so a missing one fails: a skip would turn a
    broken checkout or a wrong override into a green run.
    """
    root = corpus_root()
    if not (root / "data").is_dir():
        pytest.fail(f"parquet-testing corpus not found at {root} (it ships in tests/data/parquet-testing; "
                    "HWDECOMP_CORPUS, when set, must name a copy)", pytrace=False)
    return root


@pytest.fixture(scope="session")
def matrix_source():
    """The wide table every matrix file holds (as written, before pyarrow's round trip)."""
    return matrix_table()


@pytest.fixture(scope="session")
def matrix_files(tmp_path_factory, matrix_source):
    """The generated matrix: codec × data page v1/v2 × dictionary on/off, written once."""
    return write_matrix(tmp_path_factory.mktemp("matrix"), matrix_source)


def pytest_terminal_summary(terminalreporter):
    """Say how many fuzz cases ran, and their verdicts: a fuzz test that ran no cases passes silently otherwise."""
    if FUZZ_STATS:
        terminalreporter.section("fuzzing")
        for line in FUZZ_STATS:
            terminalreporter.write_line(line)


def pytest_collection_modifyitems(items):
    """dask's conftest marks, for dask's Parquet tests collected in ``test_dask_parquet_suite``.

    dask skips or xfails tests carrying these keywords when pyarrow strings
    are on; its conftest is not loaded here, so the same marks are set.
    """
    marked = [i for i in items if {"skip_with_pyarrow_strings", "xfail_with_pyarrow_strings"} & set(i.keywords)]
    if not marked:
        return
    from dask.dataframe.utils import pyarrow_strings_enabled

    on = pyarrow_strings_enabled()
    for item in marked:
        if "skip_with_pyarrow_strings" in item.keywords:
            item.add_marker(pytest.mark.skipif(on, reason="No need to run with pyarrow strings"))
        if "xfail_with_pyarrow_strings" in item.keywords:
            item.add_marker(pytest.mark.xfail(on, reason="Known failure with pyarrow strings"))
