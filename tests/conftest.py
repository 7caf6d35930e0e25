"""Fixtures shared by every test module: the corpus, the generated matrix.

The helpers behind them live in ``helpers.py`` (``from helpers import
assert_tables_equal, write_matrix, ...``) so that test modules of other
layers (the Dask engine) reuse them.
"""

from __future__ import annotations

import pytest

from helpers import FUZZ_STATS, assert_tables_equal, corpus_root, matrix_table, write_matrix

__all__ = ["assert_tables_equal"]


@pytest.fixture(scope="session")
def corpus():
    """The parquet-testing copy (``$HWDECOMP_CORPUS`` overrides the location)."""
    root = corpus_root()
    if not (root / "data").is_dir():
        pytest.skip(
            f"parquet-testing corpus not found at {root} "
            "(set HWDECOMP_CORPUS or check out ../shared/corpus)"
        )
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
    """Say how many fuzz cases ran (issue 4 asks for the count)."""
    if FUZZ_STATS:
        terminalreporter.section("fuzzing")
        for line in FUZZ_STATS:
            terminalreporter.write_line(line)
