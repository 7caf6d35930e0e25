"""``read_table`` takes what ``pyarrow.parquet.read_table`` takes, and returns what it returns.

Every kind of source (a directory with hive partitions, a list of paths, a
glob, an open file, a ``NativeFile``, a ``Buffer``, a pyarrow or fsspec
``filesystem``) is read through the project's page path (``backend="cpu"``,
the report says so) and compared with pyarrow's own read of the same
arguments.
"""

from __future__ import annotations

import glob
import io

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import dask_hwdecomp

from helpers import assert_tables_equal


def _table(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "year": pa.array(rng.integers(2020, 2023, n)),
            "kind": pa.array(rng.choice(["a", "b"], n)),
            "x": pa.array(rng.integers(0, 1000, n)),
            "s": pa.array([f"row {i} of {seed}" for i in range(n)]),
            "nested": pa.array([{"p": float(i), "q": [i, i + 1]} for i in range(n)]),
        }
    )


@pytest.fixture(scope="module")
def hive(tmp_path_factory):
    """A two-level hive dataset, with files pyarrow ignores beside the data."""
    root = tmp_path_factory.mktemp("hive")
    pq.write_to_dataset(_table(3000, 1), root, partition_cols=["year", "kind"], compression="snappy")
    (root / "_SUCCESS").write_bytes(b"")
    (root / ".hidden.parquet").write_bytes(b"not parquet")
    return root


@pytest.fixture(scope="module")
def flat(tmp_path_factory):
    """Three files of the same schema in one directory."""
    root = tmp_path_factory.mktemp("flat")
    for i in range(3):
        pq.write_table(_table(500 + i, 10 + i), root / f"part-{i}.parquet", compression="zstd", row_group_size=200)
    return root


def _read(source, **kwargs) -> pa.Table:
    """read_table through the page path; asserts the pages went through it."""
    report = dask_hwdecomp.ReadReport()
    got = dask_hwdecomp.read_table(source, backend="cpu", report=report, **kwargs)
    assert not report.fallbacks
    assert report.files > 0, report.summary()
    columns = kwargs.get("columns")
    if columns is None or set(columns) - {"year", "kind"}:  # some column lives in the files
        assert sum(s.pages for (b, _), s in report.by_backend.items() if b == "cpu") > 0, report.summary()
    return got


READS = [
    {},
    {"columns": []},
    {"columns": ["year"]},
    {"columns": ["x", "year"]},
    {"filters": [("year", ">", 2020), ("x", "<", 500)]},
    {"columns": ["s", "nested"], "filters": [("kind", "=", "b")]},
    {"filters": [[("year", "=", 2021)], [("x", ">=", 900)]]},
]


@pytest.mark.parametrize("kwargs", READS, ids=lambda k: ",".join(k) or "all")
def test_hive_directory(hive, kwargs):
    assert_tables_equal(_read(str(hive), **kwargs), pq.read_table(str(hive), **kwargs))


def test_hive_directory_as_pathlike_and_expression_filter(hive):
    import pyarrow.compute as pc

    expr = (pc.field("year") == 2022) & (pc.field("x") > 10)
    assert_tables_equal(_read(hive, filters=expr), pq.read_table(hive, filters=expr))


def test_partitioning_none_reads_no_partition_columns(hive):
    got = _read(str(hive), partitioning=None)
    assert "year" not in got.column_names
    assert_tables_equal(got, pq.read_table(str(hive), partitioning=None))


def test_partitioning_by_field_names(tmp_path):
    root = tmp_path / "directory"
    table = _table(400, 3)
    pq.write_to_dataset(table, root, partition_cols=["year"], partitioning_flavor=None)
    kwargs = {"partitioning": ["year"], "columns": ["x", "year"]}
    assert_tables_equal(_read(str(root), **kwargs), pq.read_table(str(root), **kwargs))


@pytest.mark.parametrize("kwargs", READS[:3], ids=lambda k: ",".join(k) or "all")
def test_flat_directory(flat, kwargs):
    assert_tables_equal(_read(str(flat), **kwargs), pq.read_table(str(flat), **kwargs))


def test_list_of_paths(flat):
    paths = [str(flat / "part-2.parquet"), str(flat / "part-0.parquet")]
    assert_tables_equal(_read(paths, columns=["x", "s"]), pq.read_table(paths, columns=["x", "s"]))


def test_glob_expands_on_the_local_filesystem(flat):
    pattern = str(flat / "part-[01].parquet")
    expected = pq.read_table(sorted(glob.glob(pattern)))
    assert expected.num_rows == 1001
    assert_tables_equal(_read(pattern), expected)


def test_glob_matching_nothing_raises(flat):
    with pytest.raises(FileNotFoundError, match="no file matches"):
        dask_hwdecomp.read_table(str(flat / "nothing-*.parquet"), backend="cpu")


def test_open_binary_file(flat):
    path = flat / "part-1.parquet"
    with open(path, "rb") as f:
        got = _read(f, columns=["x", "nested"], filters=[("x", ">", 100)])
        assert not f.closed
    assert_tables_equal(got, pq.read_table(path, columns=["x", "nested"], filters=[("x", ">", 100)]))


def test_bytesio_and_row_groups(flat):
    data = (flat / "part-2.parquet").read_bytes()
    got = _read(io.BytesIO(data), row_groups=[2, 0])
    assert_tables_equal(got, pq.ParquetFile(io.BytesIO(data)).read_row_groups([2, 0]))


@pytest.mark.parametrize("kind", ["OSFile", "memory_map", "BufferReader", "Buffer"])
def test_native_file_and_buffer(flat, kind):
    path = str(flat / "part-0.parquet")
    source = {
        "OSFile": lambda: pa.OSFile(path),
        "memory_map": lambda: pa.memory_map(path),
        "BufferReader": lambda: pa.BufferReader(pa.py_buffer(open(path, "rb").read())),
        "Buffer": lambda: pa.py_buffer(open(path, "rb").read()),
    }[kind]()
    assert_tables_equal(_read(source, columns=["s"]), pq.read_table(path, columns=["s"]))


def test_pyarrow_filesystem(hive):
    fs = pafs.SubTreeFileSystem(str(hive), pafs.LocalFileSystem())
    kwargs = {"filesystem": fs, "filters": [("kind", "=", "a")]}
    assert_tables_equal(_read("", **kwargs), pq.read_table("", **kwargs))
    assert_tables_equal(_read(str(hive), filesystem=pafs.LocalFileSystem()), pq.read_table(str(hive)))


def test_fsspec_memory_filesystem(flat, hive):
    fs = fsspec.filesystem("memory")
    for i in range(3):
        fs.pipe(f"/i8c-data/part-{i}.parquet", (flat / f"part-{i}.parquet").read_bytes())
    try:
        for kwargs in READS[:3]:
            expected = pq.read_table("/i8c-data", filesystem=fs, **kwargs)
            assert_tables_equal(_read("/i8c-data", filesystem=fs, **kwargs), expected)
            assert_tables_equal(_read("memory:///i8c-data", **kwargs), expected)
        assert_tables_equal(_read("memory:///i8c-data/part-[12].parquet"), pq.read_table(
            ["/i8c-data/part-1.parquet", "/i8c-data/part-2.parquet"], filesystem=fs
        ))
    finally:
        fs.rm("/i8c-data", recursive=True)


def test_files_are_read_in_one_batch_per_budget(flat):
    report = dask_hwdecomp.ReadReport()
    dask_hwdecomp.read_table(str(flat), backend="cpu", report=report)
    assert report.files == 3
    assert report.batches == 1


@pytest.mark.parametrize(
    "source, error",
    [
        (42, "got int"),
        ({"path": "x"}, "got dict"),
        ([1, 2], "list holding int"),
        ([], "empty list"),
    ],
)
def test_refused_sources_say_what_is_accepted(source, error):
    with pytest.raises((TypeError, ValueError), match=error) as info:
        dask_hwdecomp.read_table(source, backend="cpu")
    assert "a directory" in str(info.value) and "pyarrow.NativeFile" in str(info.value)


def test_text_mode_file_is_refused(flat):
    with open(flat / "part-0.parquet", encoding="latin-1") as f:
        with pytest.raises(TypeError, match="text mode.*accepts"):
            dask_hwdecomp.read_table(f, backend="cpu")


def test_row_groups_need_one_file(flat):
    with pytest.raises(ValueError, match="row_groups .* one file; this source holds 3 files"):
        dask_hwdecomp.read_table(str(flat), row_groups=[0], backend="cpu")


def test_missing_path_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        dask_hwdecomp.read_table(str(tmp_path / "absent.parquet"), backend="cpu")
