"""Every file of parquet-testing through ``read_table``, pyarrow as the oracle.

``data/`` files pyarrow reads read to
an equal table; files pyarrow refuses raise (a clear error of ours, or
pyarrow's same error) and never return data; ``bad_data/`` files raise our
own exception naming the file; page CRCs are checked when asked.
"""

from __future__ import annotations

import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dask_hwdecomp
from dask_hwdecomp import (
    ChecksumError,
    HwdecompError,
    HwdecompFallbackWarning,
    LimitExceededError,
    UnsupportedFeatureError,
)

from helpers import assert_tables_equal, corpus_root, gpu_available

ROOT = corpus_root()


def _files(sub: str) -> list[str]:
    if not (ROOT / sub).is_dir():
        return []
    return sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / sub).rglob("*")
        if p.is_file() and (p.suffix == ".parquet" or p.name.endswith(".parquet.encrypted"))
    )


DATA = _files("data")
BAD = _files("bad_data")
ENCRYPTED = [f for f in DATA if f.endswith(".encrypted")]
# Refused by pyarrow.parquet.read_table (INVENTORY.tsv); each has its own test below.
REFUSED = {"data/incorrect_map_schema.parquet", "data/large_string_map.brotli.parquet", *ENCRYPTED}
READABLE = [f for f in DATA if f not in REFUSED]
CORRUPT_CRC = {"data/datapage_v1-corrupt-checksum.parquet", "data/rle-dict-uncompressed-corrupt-checksum.parquet"}


def _pyarrow(path, **kw):
    try:
        return pq.read_table(path, **kw), None
    except Exception as exc:  # the oracle's verdict, whatever it is
        return None, exc


def test_corpus_is_complete(corpus):
    assert len(READABLE) >= 70 and len(BAD) == 8 and len(ENCRYPTED) == 13


@pytest.mark.parametrize("name", READABLE)
@pytest.mark.parametrize("backend", ["cpu", "auto"])
def test_readable_file(corpus, name, backend):
    path = corpus / name
    want, err = _pyarrow(path)
    assert err is None, f"pyarrow no longer reads {name}: {err!r}"
    with warnings.catch_warnings():
        warnings.simplefilter("error", HwdecompFallbackWarning)  # served by our path, not pyarrow's
        got = dask_hwdecomp.read_table(path, backend=backend)
    assert_tables_equal(got, want)


@pytest.mark.parametrize("name", [n for n in READABLE if "alltypes" in n or "nested" in n or "geospatial.parquet" in n])
def test_readable_file_column_and_row_group_subsets(corpus, name):
    path = corpus / name
    pf = pq.ParquetFile(path)
    cols = pf.schema_arrow.names[::2]
    rgs = list(range(pf.metadata.num_row_groups))[::-1][:3]
    assert_tables_equal(dask_hwdecomp.read_table(path, columns=cols, backend="cpu"), pq.read_table(path, columns=cols))
    assert_tables_equal(
        dask_hwdecomp.read_table(path, row_groups=rgs, columns=cols, backend="cpu"),
        pf.read_row_groups(rgs, columns=cols),
    )


def test_incorrect_map_schema_raises_like_pyarrow(corpus):
    path = corpus / "data" / "incorrect_map_schema.parquet"
    _, err = _pyarrow(path)
    with pytest.raises(HwdecompError) as info:
        dask_hwdecomp.read_table(path, backend="cpu")
    assert str(path) in str(info.value)
    assert type(info.value.__cause__) is type(err) and str(info.value.__cause__) == str(err)
    assert isinstance(info.value, type(err))


def test_large_string_map_hits_max_page_bytes(corpus):
    """Two pages of about 1 GiB: refused before anything is allocated, naming the option."""
    path = corpus / "data" / "large_string_map.brotli.parquet"
    with pytest.raises(LimitExceededError, match="max_page_bytes") as info:
        dask_hwdecomp.read_table(path, backend="cpu")
    assert str(path) in str(info.value) and "column" in str(info.value) and "page" in str(info.value)


@pytest.mark.parametrize("name", ENCRYPTED)
def test_encrypted_file_falls_back_to_pyarrow(corpus, name):
    path = corpus / name
    want, err = _pyarrow(path)
    with pytest.warns(HwdecompFallbackWarning, match="encrypted"):
        try:
            got = dask_hwdecomp.read_table(path, backend="cpu")
        except Exception as exc:
            assert err is not None, f"pyarrow reads {name} but we raised {exc!r}"
            assert type(exc) is type(err) and str(exc) == str(err)
        else:
            assert err is None, f"pyarrow refuses {name} ({err!r}) but we returned a table"
            assert_tables_equal(got, want)


@pytest.mark.parametrize("name", ENCRYPTED[:3])
def test_encrypted_file_with_on_unsupported_raise(corpus, name):
    path = corpus / name
    with pytest.raises(UnsupportedFeatureError, match="encrypted") as info:
        dask_hwdecomp.read_table(path, backend="cpu", on_unsupported="raise")
    assert str(path) in str(info.value)


# --- page checksums ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CORRUPT_CRC))
def test_corrupt_checksum_reads_by_default(corpus, name):
    path = corpus / name
    assert_tables_equal(dask_hwdecomp.read_table(path, backend="cpu"), pq.read_table(path))


@pytest.mark.parametrize("name", sorted(CORRUPT_CRC))
def test_corrupt_checksum_refused_when_verifying(corpus, name):
    path = corpus / name
    _, err = _pyarrow(path, page_checksum_verification=True)
    assert err is not None  # pyarrow refuses it too
    with pytest.raises(ChecksumError, match="CRC") as info:
        dask_hwdecomp.read_table(path, backend="cpu", verify_checksums=True)
    assert str(path) in str(info.value) and "page 0" in str(info.value)


@pytest.mark.parametrize("name", [n for n in READABLE if n not in CORRUPT_CRC])
def test_checksums_verify_where_pyarrow_verifies(corpus, name):
    """Every other readable file passes verification, as it does in pyarrow."""
    path = corpus / name
    want, err = _pyarrow(path, page_checksum_verification=True)
    assert err is None, err
    assert_tables_equal(dask_hwdecomp.read_table(path, backend="cpu", verify_checksums=True), want)


# --- bad_data ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BAD)
@pytest.mark.parametrize("backend", ["cpu", "auto"])
def test_bad_data(corpus, name, backend):
    path = corpus / name
    want, err = _pyarrow(path)
    if err is None:
        # ARROW-GH-43605: pyarrow reads it; so must we, equal.
        assert name == "bad_data/ARROW-GH-43605.parquet"
        assert_tables_equal(dask_hwdecomp.read_table(path, backend=backend), want)
        return
    if backend == "auto" and not gpu_available():
        # auto without a GPU is pyarrow's own read: its error, unchanged.
        with pytest.raises(type(err)) as info:
            dask_hwdecomp.read_table(path, backend=backend)
        assert type(info.value) is type(err) and str(info.value) == str(err)
        return
    with pytest.raises(HwdecompError) as info:
        dask_hwdecomp.read_table(path, backend=backend)
    assert str(path) in str(info.value), f"the error does not name the file: {info.value}"
    assert info.value.location is not None and info.value.location.file == str(path)
    # a handler written for pyarrow's error on this file catches ours too
    for cls in (pa.ArrowNotImplementedError, pa.ArrowInvalid, OSError):
        if isinstance(err, cls):
            assert isinstance(info.value, cls), f"pyarrow raises {type(err).__name__}, we {type(info.value).__name__}"
            break


@pytest.mark.parametrize("name", BAD)
def test_bad_data_with_checksums_and_subsets(corpus, name):
    """Column subsets and verification never turn a refused file into rows."""
    path = corpus / name
    whole, err = _pyarrow(path)
    if err is None:
        # the one bad-data file pyarrow reads: verified and by column, ours equals it too
        got = dask_hwdecomp.read_table(path, backend="cpu", verify_checksums=True)
        assert_tables_equal(got, whole)
        last = whole.schema.names[-1]
        assert_tables_equal(dask_hwdecomp.read_table(path, columns=[last], backend="cpu", verify_checksums=True),
                            whole.select([last]))
        return
    try:
        pf_cols = pq.ParquetFile(path).schema_arrow.names
    except Exception:
        pf_cols = None
    for cols in ([[pf_cols[-1]]] if pf_cols else [None]):
        want, col_err = _pyarrow(path, columns=cols)
        try:
            got = dask_hwdecomp.read_table(path, columns=cols, backend="cpu", verify_checksums=True)
        except HwdecompError:
            continue
        assert col_err is None, f"pyarrow refuses {name} columns={cols} ({col_err!r}) but we returned a table"
        assert_tables_equal(got, want)
