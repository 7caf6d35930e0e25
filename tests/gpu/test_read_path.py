"""The full read path on the GPU: generated matrix and the parquet-testing corpus."""

from __future__ import annotations

import warnings

import pyarrow.parquet as pq
import pytest

import dask_hwdecomp
from dask_hwdecomp.decompress import registry
from dask_hwdecomp.errors import BackendUnavailableError
from dask_hwdecomp.options import Options
from helpers import assert_tables_equal, corpus_root

pytestmark = pytest.mark.gpu


def _corpus_files():
    data = corpus_root() / "data"
    return sorted(data.glob("*.parquet")) if data.is_dir() else []


@pytest.mark.parametrize("backend", ["nvcomp", "auto"])
def test_matrix(nvcomp_available, matrix_files, backend):
    for f in matrix_files:
        report = dask_hwdecomp.ReadReport()
        got = dask_hwdecomp.read_table(f.path, backend=backend, report=report)
        assert_tables_equal(got, pq.read_table(f.path))
        used = {name for name, _ in report.by_backend}
        if f.codec in ("snappy", "gzip", "lz4", "zstd"):
            assert "nvcomp" in used, (f.id, dict(report.by_backend))


@pytest.mark.parametrize("backend", ["nvcomp", "auto"])
@pytest.mark.parametrize("path", _corpus_files(), ids=lambda p: p.name)
def test_corpus(nvcomp_available, path, backend):
    try:
        expected = pq.read_table(path)
    except Exception as exc:  # pyarrow is the oracle: what it cannot read is out of scope
        pytest.skip(f"pyarrow cannot read {path.name}: {type(exc).__name__}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dask_hwdecomp.HwdecompFallbackWarning)
        got = dask_hwdecomp.read_table(path, backend=backend)
    assert_tables_equal(got, expected)


@pytest.mark.parametrize("codec", ["snappy", "gzip", "lz4", "zstd"])
def test_auto_reports_nvcomp(nvcomp_available, tmp_path, matrix_source, codec):
    path = tmp_path / f"{codec}.parquet"
    pq.write_table(matrix_source, path, compression=codec)
    report = dask_hwdecomp.ReadReport()
    dask_hwdecomp.read_table(path, backend="auto", report=report)
    name = {"lz4": "LZ4_RAW"}.get(codec, codec.upper())
    assert ("nvcomp", name) in report.by_backend, dict(report.by_backend)


def test_auto_reports_nvcomp_for_hadoop_lz4(nvcomp_available):
    path = corpus_root() / "data" / "hadoop_lz4_compressed.parquet"
    if not path.is_file():
        pytest.skip("corpus file hadoop_lz4_compressed.parquet not present")
    report = dask_hwdecomp.ReadReport()
    got = dask_hwdecomp.read_table(path, backend="auto", report=report)
    assert_tables_equal(got, pq.read_table(path))
    assert ("nvcomp", "LZ4") in report.by_backend, dict(report.by_backend)


def test_hardware_is_refused_without_the_engine(nvcomp_available, tmp_path, matrix_source):
    reason = registry.probe("hardware")
    if reason is None:
        pytest.skip("this GPU has a decompression engine")
    assert "mask is 0" in reason, reason
    path = tmp_path / "s.parquet"
    pq.write_table(matrix_source, path, compression="snappy")
    with pytest.raises(BackendUnavailableError, match="mask is 0"):
        dask_hwdecomp.read_table(path, backend="hardware")


def test_corrupt_page_then_next_read_succeeds(nvcomp_available, tmp_path, matrix_source):
    # gzip (deflate on nvCOMP): its decoder survives corrupt content; Snappy
    # and Zstd do not (see test_nvcomp_backend.UNSAFE).
    good = tmp_path / "good.parquet"
    pq.write_table(matrix_source, good, compression="gzip", data_page_size=1 << 16)
    data = bytearray(good.read_bytes())
    hits, pos = 0, 0
    while hits < 5:
        pos = data.find(b"\x1f\x8b\x08", pos + 1)  # gzip members: damage their deflate bodies
        if pos < 0:
            break
        for k in range(pos + 30, pos + 40):
            if k < len(data):
                data[k] ^= 0x5A
        hits += 1
    assert hits
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(bytes(data))
    with pytest.raises(dask_hwdecomp.HwdecompError):
        dask_hwdecomp.read_table(bad, backend="nvcomp", verify_checksums=True)
    assert_tables_equal(dask_hwdecomp.read_table(good, backend="nvcomp"), pq.read_table(good))


def test_pools_do_not_grow_over_200_reads(nvcomp_available, tmp_path, matrix_source):
    path = tmp_path / "s.parquet"
    pq.write_table(matrix_source, path, compression="snappy")
    options = Options(backend="nvcomp")
    backend = registry.get_backend("nvcomp", options)
    for _ in range(5):
        dask_hwdecomp.read_table(path, backend="nvcomp")
    before = backend.stats()
    for _ in range(200):
        dask_hwdecomp.read_table(path, backend="nvcomp")
    after = backend.stats()
    for key in ("pinned_allocations", "pinned_held_bytes", "pinned_overflows"):
        assert after[key] == before[key], (key, before, after)
    for key in after:
        if key.endswith("_allocations"):
            assert after[key] == before[key], (key, before, after)
