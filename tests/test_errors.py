"""The errors each public call raises, as docs/user-guide.md lists them.

File-content errors are ``HwdecompError``s that are also what pyarrow
raises for the same fault; mistakes in the call raise what Python or pyarrow
raise for them. Every file here is a real damaged file, read by this reader
on the CPU backend and by pyarrow.
"""

from __future__ import annotations

import pickle

import dask.dataframe as dd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dask_hwdecomp
from dask_hwdecomp import (
    BackendUnavailableError,
    ChecksumError,
    CorruptDataError,
    CorruptFileError,
    CorruptMetadataError,
    CorruptPageError,
    HwdecompError,
    LimitExceededError,
    Options,
    PageLocation,
    UnsupportedFeatureError,
    hwdecomp,
)

from fuzzing import file_map
from rewrite import rewrite_pages

# pyarrow's classes a handler names, most specific first.
PYARROW_CLASSES = (pa.ArrowNotImplementedError, pa.ArrowInvalid, OSError)


def _table(n: int = 400) -> pa.Table:
    return pa.table({"a": list(range(n)), "b": [f"v{i % 7}" for i in range(n)]})


def _write(path, **kw):
    pq.write_table(_table(), path, row_group_size=200, **kw)
    return path


def _pyarrow_error(path, **kw) -> BaseException:
    with pytest.raises(Exception) as info:
        pq.read_table(path, **kw)
    return info.value


def _assert_caught_as_pyarrow(ours: BaseException, theirs: BaseException) -> None:
    """``except <pyarrow's class>`` catches ours too, and ours is both OSError and ArrowInvalid."""
    for cls in PYARROW_CLASSES:
        if isinstance(theirs, cls):
            assert isinstance(ours, cls), (type(ours).__mro__, type(theirs).__mro__)
    assert isinstance(ours, (OSError, pa.ArrowInvalid))


@pytest.mark.parametrize(
    "cls, bases",
    [
        (CorruptMetadataError, (CorruptFileError, OSError, pa.ArrowInvalid, ValueError, pa.ArrowException)),
        (CorruptPageError, (CorruptFileError, OSError, pa.ArrowInvalid)),
        (ChecksumError, (CorruptPageError, OSError, pa.ArrowInvalid)),
        (CorruptDataError, (CorruptFileError, OSError, pa.ArrowInvalid)),
        (LimitExceededError, (CorruptFileError, OSError, pa.ArrowInvalid)),
        (UnsupportedFeatureError, (pa.ArrowNotImplementedError, NotImplementedError)),
        (BackendUnavailableError, ()),
    ],
)
def test_hierarchy_and_pickling(cls, bases):
    where = PageLocation(file="f.parquet", row_group=1, column="a.b", page=3)
    exc = cls("declared 9 bytes, stores 4", where)
    for base in (HwdecompError, *bases):
        assert isinstance(exc, base)
    assert str(exc) == "file 'f.parquet', row group 1, column 'a.b', page 3: declared 9 bytes, stores 4"
    back = pickle.loads(pickle.dumps(exc))  # dask ships errors from workers to the client
    assert type(back) is cls and back.location == where and str(back) == str(exc) and back.reason == exc.reason


def test_oserror_side_takes_no_errno():
    exc = CorruptPageError("bad", PageLocation(file="f"))
    assert exc.errno is None and exc.args == ("file 'f': bad",)


def test_bad_footer_magic(tmp_path):
    path = _write(tmp_path / "x.parquet", compression="snappy")
    data = bytearray(path.read_bytes())
    data[-1:] = b"X"
    path.write_bytes(bytes(data))
    theirs = _pyarrow_error(path)
    assert isinstance(theirs, pa.ArrowInvalid)
    with pytest.raises(CorruptMetadataError, match="PAR1") as info:
        dask_hwdecomp.read_table(path, backend="cpu")
    _assert_caught_as_pyarrow(info.value, theirs)


def test_page_header_that_does_not_decode(tmp_path):
    path = _write(tmp_path / "x.parquet", compression="snappy")
    data = bytearray(path.read_bytes())
    data[4:14] = b"\xff" * 10
    path.write_bytes(bytes(data))
    theirs = _pyarrow_error(path)
    assert type(theirs) is OSError
    with pytest.raises(CorruptMetadataError, match="page header") as info:
        dask_hwdecomp.read_table(path, backend="cpu")
    _assert_caught_as_pyarrow(info.value, theirs)
    assert info.value.location.page == 0


@pytest.mark.parametrize("codec", ["snappy", "zstd", "gzip", "lz4", "brotli"])
def test_corrupt_compressed_page(tmp_path, codec):
    path = _write(tmp_path / "x.parquet", compression=codec, use_dictionary=False)
    fm = file_map(path)
    page = max(fm.pages, key=lambda p: p.body_end - p.body_start)
    data = bytearray(fm.data)
    data[page.body_start : page.body_end] = b"\x13" * (page.body_end - page.body_start)
    path.write_bytes(bytes(data))
    theirs = _pyarrow_error(path)
    with pytest.raises(CorruptPageError) as info:
        dask_hwdecomp.read_table(path, backend="cpu")
    _assert_caught_as_pyarrow(info.value, theirs)
    assert info.value.location.page is not None


def test_checksum_mismatch(tmp_path):
    path = _write(tmp_path / "x.parquet", compression="none", write_page_checksum=True)
    fm = file_map(path)
    data = bytearray(fm.data)
    data[fm.pages[0].body_start + 2] ^= 1
    path.write_bytes(bytes(data))
    theirs = _pyarrow_error(path, page_checksum_verification=True)
    with pytest.raises(ChecksumError) as info:
        dask_hwdecomp.read_table(path, backend="cpu", verify_checksums=True)
    _assert_caught_as_pyarrow(info.value, theirs)


def _bad_bit_width(src, dst) -> None:
    """Row group 1 of column ``b``: a dictionary index bit width of 60 (at most 32 is valid)."""

    def transform(p):
        body = p.body
        if p.row_group == 1 and p.column == 1 and p.page.page_type == 0:
            values = bytearray(p.values)
            values[0] = 60
            body = p.levels + bytes(values)
        return p.header, body

    rewrite_pages(src, dst, transform)


def test_decode_failure_names_row_group_and_column(tmp_path):
    """pyarrow refuses the data of one column chunk: the error names that chunk."""
    src = _write(tmp_path / "src.parquet", compression="none")
    bad = tmp_path / "bad.parquet"
    _bad_bit_width(src, bad)
    theirs = _pyarrow_error(bad)
    with pytest.raises(CorruptDataError) as info:
        dask_hwdecomp.read_table(bad, backend="cpu")
    exc = info.value
    _assert_caught_as_pyarrow(exc, theirs)
    assert exc.location == PageLocation(file=str(bad), row_group=1, column="b")
    assert isinstance(exc.__cause__, (OSError, pa.ArrowException))
    # only row group 1 is damaged: reading row group 0 alone works, row group 1 alone names itself
    assert dask_hwdecomp.read_table(bad, backend="cpu", row_groups=[0]).num_rows == 200
    with pytest.raises(CorruptDataError) as info:
        dask_hwdecomp.read_table(bad, backend="cpu", row_groups=[1], columns=["b"])
    assert info.value.location.row_group == 1 and info.value.location.column == "b"


def test_decode_failure_through_dask_names_row_group_and_column(tmp_path):
    src = _write(tmp_path / "src.parquet", compression="none")
    bad = tmp_path / "bad.parquet"
    _bad_bit_width(src, bad)
    ddf = dd.read_parquet(bad, engine=hwdecomp, hwdecomp_options={"backend": "cpu"})
    with pytest.raises(CorruptDataError) as info:
        ddf.compute(scheduler="sync")
    assert info.value.location.row_group == 1 and info.value.location.column == "b"


# --- the call's own mistakes -------------------------------------------------------------------


def test_options_errors():
    with pytest.raises(TypeError):
        Options(nope=1)
    with pytest.raises(ValueError, match="backend"):
        Options(backend="gpu")
    with pytest.raises(TypeError, match="nope"):
        with dask_hwdecomp.options(nope=1):
            pass
    with pytest.raises(ValueError, match="cpu_threads"):
        with dask_hwdecomp.options(cpu_threads=0):
            pass


def test_read_table_call_errors(tmp_path):
    path = _write(tmp_path / "x.parquet", compression="snappy")
    with pytest.raises(FileNotFoundError):
        dask_hwdecomp.read_table(tmp_path / "missing.parquet", backend="cpu")
    # as pyarrow: ArrowInvalid for a row group the file lacks, and for an unknown column
    with pytest.raises(pa.ArrowInvalid):
        pq.ParquetFile(path).read_row_groups([5])
    with pytest.raises(pa.ArrowInvalid, match="row group 5") as info:
        dask_hwdecomp.read_table(path, backend="cpu", row_groups=[5])
    assert not isinstance(info.value, (HwdecompError, IndexError)) and str(path) in str(info.value)
    with pytest.raises(pa.ArrowInvalid, match="No match for FieldRef"):
        pq.read_table(path, columns=["zz"])
    with pytest.raises(pa.ArrowInvalid, match="No match for FieldRef") as info:
        dask_hwdecomp.read_table(path, backend="cpu", columns=["zz"])
    assert not isinstance(info.value, HwdecompError)
    with pytest.raises(TypeError, match="nope"):
        dask_hwdecomp.read_table(path, nope=1)
    with pytest.raises(ValueError, match="backend"):
        dask_hwdecomp.read_table(path, backend="gpu")


def test_dask_graph_build_raises_as_engine_pyarrow(tmp_path):
    """Building the graph, dask reads footers through pyarrow: the same errors as engine="pyarrow"."""
    with pytest.raises(FileNotFoundError):
        dd.read_parquet(tmp_path / "missing.parquet", engine=hwdecomp)
    path = _write(tmp_path / "x.parquet", compression="snappy")
    with pytest.raises((KeyError, ValueError)):
        dd.read_parquet(path, engine=hwdecomp, columns=["zz"])
    data = bytearray(path.read_bytes())
    data[-1:] = b"X"
    path.write_bytes(bytes(data))
    for engine in ("pyarrow", hwdecomp):
        with pytest.raises((OSError, pa.ArrowInvalid)):
            dd.read_parquet(path, engine=engine)


def test_dask_compute_errors(tmp_path):
    path = _write(tmp_path / "x.parquet", compression="snappy", use_dictionary=False)
    # Options are checked where dd.read_parquet is called (they travel with the graph).
    with pytest.raises(TypeError, match="nope"):
        dd.read_parquet(path, engine=hwdecomp, hwdecomp_options={"nope": 1})
    fm = file_map(path)
    page = fm.pages[0]
    data = bytearray(fm.data)
    data[page.body_start : page.body_end] = b"\x13" * (page.body_end - page.body_start)
    path.write_bytes(bytes(data))
    ddf = dd.read_parquet(path, engine=hwdecomp, hwdecomp_options={"backend": "cpu"})
    with pytest.raises(CorruptPageError) as info:
        ddf.compute(scheduler="sync")
    assert isinstance(info.value, OSError) and info.value.location.file == str(path)
    with pytest.raises((OSError, pa.ArrowInvalid)):
        dd.read_parquet(path, engine="pyarrow").compute(scheduler="sync")
