"""ImageFileSystem serves one path from memory and passes every other to the real filesystem."""

from __future__ import annotations

import fsspec
import pyarrow as pa
import pyarrow.dataset as pa_ds
import pyarrow.parquet as pq
import pytest

from dask_hwdecomp.engine.imagefs import ImageFileSystem


@pytest.fixture
def memfs():
    fs = fsspec.filesystem("memory")
    with fs.open("/imagefs/k=1/a.parquet", "wb") as f:
        pq.write_table(pa.table({"x": [1, 2, 3]}), f)
    with fs.open("/imagefs/k=1/b.parquet", "wb") as f:
        pq.write_table(pa.table({"x": [7]}), f)
    yield fs
    fs.rm("/imagefs", recursive=True)


def _image(values) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"x": values}), sink, compression="none")
    return sink.getvalue()


def test_the_path_reads_the_image_others_the_file(memfs):
    image = _image([10, 20])
    fs = ImageFileSystem(memfs, "/imagefs/k=1/a.parquet", image)
    assert fs.info("memory://imagefs/k=1/a.parquet")["size"] == image.size
    with fs.open("/imagefs/k=1/a.parquet") as f:
        assert pq.read_table(f)["x"].to_pylist() == [10, 20]
    with fs.open("/imagefs/k=1/b.parquet") as f:
        assert pq.read_table(f)["x"].to_pylist() == [7]
    assert fs.info("/imagefs/k=1/b.parquet")["size"] == memfs.info("/imagefs/k=1/b.parquet")["size"]


def test_pyarrow_dataset_reads_the_image_with_the_paths_partition(memfs):
    fs = ImageFileSystem(memfs, "/imagefs/k=1/a.parquet", _image([10, 20]))
    ds = pa_ds.dataset("/imagefs/k=1/a.parquet", filesystem=fs, partitioning="hive", partition_base_dir="/imagefs")
    (frag,) = ds.get_fragments()
    assert str(frag.partition_expression) == "(k == 1)"
    assert frag.to_table()["x"].to_pylist() == [10, 20]


def test_the_image_is_read_only(memfs):
    fs = ImageFileSystem(memfs, "/imagefs/k=1/a.parquet", _image([1]))
    with pytest.raises(PermissionError, match="read-only"):
        fs.open("/imagefs/k=1/a.parquet", "wb")
