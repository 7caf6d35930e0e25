"""Tables of images that carry decoded columns equal pyarrow's reads.

The decoded columns come from pyarrow itself, read from the image column by
column and row group by row group (the GPU decoder hands over the same):
through the column-decoder seam of ``readpath/batch.py``, which the GPU
decoder fills in production.
"""

from __future__ import annotations

import io

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pa_ds
import pyarrow.parquet as pq
import pytest

from dask_hwdecomp import collect_reports, hwdecomp, read_table
from dask_hwdecomp.readpath.assemble import fragment_to_table, read_row_groups
from dask_hwdecomp.readpath.batch import use_column_decoder

from helpers import decoded_by_pyarrow, pyarrow_decoder, sample_frame


def _frame(n: int, seed: int) -> pd.DataFrame:
    index = pd.RangeIndex(seed * n, (seed + 1) * n) if seed % 2 else pd.Index(np.arange(n) * 7 + seed, name="ix")
    return sample_frame(n, seed, categorical=True, index=index)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    # Even seeds keep a named index column ("ix"), odd ones a RangeIndex
    # (metadata only); __index_level_0__ in a file of its own below.
    root = tmp_path_factory.mktemp("gputable")
    for i in range(3):
        _frame(600, 2 * i).to_parquet(root / f"part{i}.parquet", compression="snappy", row_group_size=200)
    return str(root)


@pytest.fixture(scope="module")
def unnamed_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("level0")
    for i in range(2):
        df = _frame(400, 2 * i).reset_index(drop=True)
        # Not a range: stored as the column __index_level_0__.
        df.index = pd.Index(np.random.default_rng(i).permutation(len(df)) * 3 + i)
        df.to_parquet(root / f"p{i}.parquet", compression="zstd", row_group_size=150)
    return str(root)


@pytest.fixture(scope="module")
def hive(tmp_path_factory):
    root = tmp_path_factory.mktemp("hive")
    pd.concat([_frame(500, 2 * i) for i in range(2)]).reset_index(drop=True).to_parquet(
        root, partition_cols=["part"], compression="snappy", row_group_size=160
    )
    return str(root)


EVERY = lambda name: True  # noqa: E731
SOME = lambda name: name in ("key", "flag", "maybe", "ix", "__index_level_0__")  # noqa: E731
OTHERS = lambda name: not SOME(name)  # noqa: E731

CASES = [
    {},
    {"columns": ["comment", "key"]},
    {"columns": ["price"], "index": "key"},
    {"index": False},
    {"filters": [("key", ">", 700)]},
    {"filters": [("price", "<", 0.3)], "columns": ["flag", "qty"]},
    {"filters": [[("qty", "<", 5)], [("flag", "==", "R")]]},
    {"categories": ["cat"]},
    {"dtype_backend": "pyarrow"},
    {"dtype_backend": "numpy_nullable", "columns": ["maybe", "comment"]},
    {"split_row_groups": True},
    {"split_row_groups": 2, "aggregate_files": True},
    {"split_row_groups": True, "filters": [("comment", "==", "c3-2")]},
    # A literal that names another column: that column is not read.
    {"columns": ["comment"], "filters": [("flag", "!=", "qty")]},
]


def _compare(path, pick, **kwargs):
    ours = dd.read_parquet(path, engine=hwdecomp, hwdecomp_options={"backend": "cpu"}, **kwargs)
    ref = dd.read_parquet(path, engine="pyarrow", **kwargs)
    assert ours.npartitions == ref.npartitions
    with use_column_decoder(pyarrow_decoder(pick), always=True), collect_reports() as report:
        got = ours.compute(scheduler="sync")
    pd.testing.assert_frame_equal(got, ref.compute(scheduler="sync"))
    return report


def _gpu_columns(report) -> set:
    return {c for (c, where, _), s in report.columns.items() if where == "gpu" and s.chunks}


@pytest.mark.parametrize("kwargs", CASES, ids=[str(c) for c in CASES])
@pytest.mark.parametrize("pick", [EVERY, SOME, OTHERS], ids=["every", "some", "others"])
def test_decoded_columns_read_like_pyarrow(files, kwargs, pick):
    report = _compare(files, pick, **kwargs)
    # The decoded columns were used, not read again by pyarrow.
    gpu = _gpu_columns(report)
    assert gpu and all(pick(c) for c in gpu), report.columns
    pyarrow = {c for (c, where, why) in report.columns if where == "pyarrow"}
    assert all(not pick(c) for c in pyarrow), report.columns


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"index": False}, {"columns": ["qty"]}, {"filters": [("qty", ">", 40)]}, {"split_row_groups": True}],
    ids=str,
)
@pytest.mark.parametrize("pick", [EVERY, OTHERS], ids=["every", "others"])
def test_index_level_0(unnamed_index, kwargs, pick):
    report = _compare(unnamed_index, pick, **kwargs)
    assert ("__index_level_0__" in _gpu_columns(report)) == pick("__index_level_0__")


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"filters": [("part", "==", 1)]},
        {"filters": [("part", "==", 1), ("key", "<", 300)]},
        {"filters": [("flag", "==", "N")], "columns": ["price", "part"]},
        {"columns": ["price", "part"]},
        {"split_row_groups": True},
        {"dtype_backend": "pyarrow", "filters": [("qty", ">", 10)]},
    ],
    ids=str,
)
@pytest.mark.parametrize("pick", [EVERY, SOME], ids=["every", "some"])
def test_hive_partitions(hive, kwargs, pick):
    report = _compare(hive, pick, **kwargs)
    # The partition key is no file column: never counted as decoded.
    assert "part" not in {c for (c, _, _) in report.columns}
    gpu = _gpu_columns(report)
    assert all(pick(c) for c in gpu) and not any(pick(c) for (c, w, _) in report.columns if w == "pyarrow")
    assert gpu or "columns" in kwargs


def _uncompressed(table: pa.Table, **kw) -> pa.Buffer:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="none", **kw)
    return pa.py_buffer(sink.getvalue())


def _pandas_table() -> pa.Table:
    table = pa.Table.from_pandas(_frame(300, 0))
    # Field metadata travels too.
    return table.cast(table.schema.set(1, table.schema.field(1).with_metadata({b"unit": b"usd"})))


@pytest.mark.parametrize("columns", [None, ["comment", "key"], ["price"], [], ["ix", "qty"]], ids=str)
@pytest.mark.parametrize("row_groups", [[0, 2], [1], [None]], ids=str)
@pytest.mark.parametrize("pandas_metadata", [True, False])
def test_read_row_groups_equals_pyarrow(columns, row_groups, pandas_metadata):
    buf = _uncompressed(_pandas_table(), row_group_size=100)
    pf = pq.ParquetFile(pa.BufferReader(buf))
    rgs = list(range(pf.metadata.num_row_groups)) if row_groups == [None] else row_groups
    expected = pf.read_row_groups(rgs, columns=columns, use_pandas_metadata=pandas_metadata)
    whole = {n: pq.ParquetFile(pa.BufferReader(buf)).read_row_groups(rgs, columns=[n]).column(0)
             for n in ("key", "flag", "ix", "price")}
    got, used = read_row_groups(buf, row_groups, columns, whole, use_pandas_metadata=pandas_metadata)
    assert got.equals(expected, check_metadata=True)
    assert set(used) == {n for n in whole if n in expected.schema.names}


def test_a_decoded_column_of_other_length_is_read_by_pyarrow_and_logged(caplog):
    # A corrupt chunk whose pages hold other than its row group's rows: the
    # read is pyarrow's, its result or its error, never a foreign one.
    buf = _uncompressed(_pandas_table(), row_group_size=100)
    short = pa.chunked_array([pa.array(np.arange(99))])
    good = pq.ParquetFile(pa.BufferReader(buf)).read_row_groups([0], columns=["flag"]).column(0)
    expected = pq.ParquetFile(pa.BufferReader(buf)).read_row_groups([0], columns=["key", "flag"],
                                                                    use_pandas_metadata=True)
    with caplog.at_level("WARNING", logger="dask_hwdecomp"):
        got, used = read_row_groups(buf, [0], ["key", "flag"], {"key": short, "flag": good})
    assert used == ("flag",) and got.equals(expected, check_metadata=True)
    assert "GPU-decoded column 'key' holds 99 rows, the row groups read hold 100" in caplog.text


def test_a_fragments_decoded_column_of_other_length_is_read_by_pyarrow():
    buf = _uncompressed(_pandas_table(), row_group_size=100)
    fragment = pa_ds.ParquetFileFormat().make_fragment(pa.BufferReader(buf))
    rows = fragment.metadata.num_rows
    short = pa.chunked_array([pa.array(np.arange(rows - 1))])
    expected = fragment.to_table(columns=["key", "flag"])
    got, used = fragment_to_table(fragment, None, ["key", "flag"], None, {"key": short})
    assert used == () and got.equals(expected)


def test_a_decoded_column_of_another_type_is_read_by_pyarrow():
    buf = _uncompressed(_pandas_table(), row_group_size=100)
    wrong = pa.chunked_array([pa.array(np.arange(100, dtype="int32"))])
    got, used = read_row_groups(buf, [0], ["key"], {"key": wrong})
    assert used == () and got.equals(pq.ParquetFile(pa.BufferReader(buf)).read_row_groups([0], columns=["key"], use_pandas_metadata=True))


@pytest.mark.parametrize(
    "columns, filt",
    [
        (None, None),
        (["comment", "key"], pa_ds.field("price") < 0.5),
        (["price"], (pa_ds.field("flag") == "N") | (pa_ds.field("qty") > 45)),
        ([], pa_ds.field("key") > 100),
        (["flag", "key", "part"], pa_ds.field("part") == 1),
    ],
    ids=str,
)
def test_fragment_to_table_equals_pyarrow(tmp_path, columns, filt):
    table = _pandas_table().drop_columns(["part"])
    (tmp_path / "part=1").mkdir()
    pq.write_table(table, tmp_path / "part=1" / "f.parquet", compression="none", row_group_size=100)
    ds = pa_ds.dataset(str(tmp_path), partitioning="hive")
    (frag,) = ds.get_fragments()
    frag = frag.subset(row_group_ids=[0, 2])
    expected = frag.to_table(schema=ds.schema, columns=columns, filter=filt, use_threads=False)
    with open(frag.path, "rb") as f:
        buf = pa.py_buffer(f.read())
    decoded = decoded_by_pyarrow(_subset(buf, [0, 2]), ["key", "flag", "maybe"])
    filtered_on = [n for n in ds.schema.names if filt is not None and n in str(filt)]
    got, used = fragment_to_table(frag, ds.schema, columns, filt, decoded, filtered_on)
    assert got.equals(expected, check_metadata=True)
    assert used


def _subset(buf: pa.Buffer, row_groups: list[int]) -> pa.Buffer:
    """An uncompressed file of ``buf``'s row groups (what an image of them holds)."""
    pf = pq.ParquetFile(pa.BufferReader(buf))
    return _uncompressed(pf.read_row_groups(row_groups), row_group_size=100)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"columns": ["key", "comment"]}, {"filters": [("qty", "<", 10)]}, {"row_groups": [2, 0]}],
    ids=str,
)
def test_read_table_with_decoded_columns(files, kwargs):
    path = files + ("/part0.parquet" if "row_groups" in kwargs else "")
    with use_column_decoder(pyarrow_decoder(SOME), always=True), collect_reports() as report:
        got = read_table(path, backend="cpu", **kwargs)
    assert got.equals(pq.read_table(path, **kwargs) if "row_groups" not in kwargs else
                      pq.ParquetFile(path).read_row_groups(kwargs["row_groups"]), check_metadata=True)
    assert _gpu_columns(report)


class _CheckedEngine(hwdecomp):
    """hwdecomp, each piece's table compared with dask's own ``_read_table`` over the same image."""

    checked = 0

    @classmethod
    def _read_table(cls, path_or_frag, fs, row_groups, columns, schema, filters, partitions, partition_keys,
                    **kwargs):
        from dask.dataframe.io.parquet.arrow import ArrowDatasetEngine

        from dask_hwdecomp.engine.imagefs import ImageFileSystem
        from dask_hwdecomp.engine.prepare import current_images, piece_key

        image = current_images()[piece_key(path_or_frag, row_groups)]
        local = row_groups if list(row_groups) == [None] else list(range(len(image.row_groups)))
        theirs_columns = list(columns)
        expected = ArrowDatasetEngine._read_table(
            path_or_frag, ImageFileSystem(fs, path_or_frag, image.buffer), local, theirs_columns, schema, filters,
            partitions, partition_keys, **kwargs,
        )
        got = super()._read_table(path_or_frag, fs, row_groups, columns, schema, filters, partitions,
                                  partition_keys, **kwargs)
        assert image.decoded
        assert got.equals(expected, check_metadata=True), (got.schema, expected.schema)
        assert columns == theirs_columns  # dask's in-place change of columns, reproduced
        _CheckedEngine.checked += 1
        return got


@pytest.mark.parametrize(
    "source, kwargs",
    [
        ("files", {}),
        ("files", {"columns": ["comment", "key"], "filters": [("price", "<", 0.5)]}),
        ("files", {"index": False, "split_row_groups": True}),
        ("unnamed_index", {"filters": [("qty", ">", 20)]}),
        ("hive", {}),
        ("hive", {"filters": [("part", "==", 2), ("flag", "!=", "A")]}),
        ("hive", {"columns": ["part", "key", "cat"], "dtype_backend": "pyarrow"}),
    ],
    ids=str,
)
def test_piece_tables_equal_dasks_own(request, source, kwargs):
    # Stricter than the frames: schema, field and pandas metadata of every piece's table.
    path = request.getfixturevalue(source)
    before = _CheckedEngine.checked
    ours = dd.read_parquet(path, engine=_CheckedEngine, hwdecomp_options={"backend": "cpu"}, **kwargs)
    with use_column_decoder(pyarrow_decoder(SOME), always=True):
        got = ours.compute(scheduler="sync")
    pd.testing.assert_frame_equal(got, dd.read_parquet(path, engine="pyarrow", **kwargs).compute(scheduler="sync"))
    assert _CheckedEngine.checked > before


@pytest.mark.parametrize("filters", [None, [("qty", "<", 10)]], ids=str)
def test_read_table_of_a_buffer_with_decoded_columns(files, filters):
    # A file-like source has no dataset schema: the fragment's own is the read's.
    with open(files + "/part0.parquet", "rb") as f:
        data = pa.py_buffer(f.read())
    with use_column_decoder(pyarrow_decoder(SOME), always=True), collect_reports() as report:
        got = read_table(data, backend="cpu", filters=filters)
    assert got.equals(pq.read_table(pa.BufferReader(data), filters=filters), check_metadata=True)
    assert _gpu_columns(report) == {"key", "flag", "maybe", "ix"}
