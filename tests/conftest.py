"""Fixtures shared by every test module: the corpus, the generated matrix, a service directory.

The helpers behind them live in ``helpers.py`` (``from helpers import
assert_tables_equal, write_matrix, ...``) so that test modules of other
layers (the Dask engine) reuse them.

A run fails if it leaves a test's service directory (``hwd-*``) in the
temporary directory: see :func:`pytest_sessionfinish`.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
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
from service_backends import SERVICE_DIR_PREFIX, service_directory  # noqa: E402

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


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (the README's command): a worker more than this process may use cores.

    A quarter of the suite's time is spent waiting on other processes (GPU
    services, dask clusters, the command line): with a worker a core, the
    cores idle then (6:07 on 2 cores, against 4:40 with 3 workers, on the
    suite of 2026-11-30; on today's, more of it simulated kernels, 583 to 618 s
    with 2 workers and 592 s with 3: no loss either).
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides when set.
    """
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return len(os.sched_getaffinity(0)) + 1


@pytest.fixture
def service_dir():
    """A short service directory of this test's own; its services are stopped and it is removed after the test."""
    with service_directory() as directory:
        yield directory


# --- service directories left behind -------------------------------------------
#
# Every ``hwd-*`` directory this process makes in the temporary directory,
# by the test that made it (an audit hook sees each os.mkdir, whichever
# helper calls it). Only this run's directories count: a glob of /tmp
# before and after would also see those of another run on the machine.

_TMP = tempfile.gettempdir()
_made_service_dirs: dict[str, str] = {}
_running = ["(no test: collection or session setup)"]
_left_behind: dict[str, str] = {}


def _note_service_dir(event: str, args: tuple) -> None:
    if event != "os.mkdir" or args[2] not in (None, -1):  # a dir_fd-relative path is not the temp dir's
        return
    path = os.path.abspath(os.fsdecode(args[0]))
    if os.path.dirname(path) == _TMP and os.path.basename(path).startswith(SERVICE_DIR_PREFIX):
        _made_service_dirs[path] = _running[0]


sys.addaudithook(_note_service_dir)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item):
    _running[0] = item.nodeid
    try:
        return (yield)
    finally:
        _running[0] = "(no test: session teardown)"


@pytest.hookimpl(trylast=True)  # after pytest's own, which tears down session fixtures
def pytest_sessionfinish(session):
    """Fail the run if a test's service directory is still there; an xdist worker hands its list to the controller."""
    left = {path: test for path, test in _made_service_dirs.items() if os.path.lexists(path)}
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["service_dirs_left"] = left
        return
    _left_behind.update(left)
    if _left_behind and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """An xdist worker's service directories left behind (its ``pytest_sessionfinish``)."""
    _left_behind.update(getattr(node, "workeroutput", {}).get("service_dirs_left", {}))


def pytest_terminal_summary(terminalreporter):
    """Say how many fuzz cases ran, and their verdicts: a fuzz test that ran no cases passes silently otherwise.

    And name the service directories the run left behind, with the tests that made them.
    """
    if FUZZ_STATS:
        terminalreporter.section("fuzzing")
        for line in FUZZ_STATS:
            terminalreporter.write_line(line)
    if _left_behind:
        terminalreporter.section("service directories left behind: the run fails", red=True)
        for path, test in sorted(_left_behind.items()):
            terminalreporter.write_line(f"{path}: made by {test} (use the service_dir fixture or service_directory())")


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
