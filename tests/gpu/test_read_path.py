"""The full read path on the GPU: generated matrix and the parquet-testing corpus."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import types
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dask_hwdecomp
from dask_hwdecomp.errors import BackendUnavailableError, CorruptPageError, PageLocation
from dask_hwdecomp.format.footer import parse_footer
from dask_hwdecomp.format.pages import chunk_range, scan_chunk
from dask_hwdecomp.jobs import Algo
from dask_hwdecomp.options import Options
from dask_hwdecomp.routing import registry

from corruption import corrupt
from helpers import NO_CUDA_CONTEXT_CHECK, assert_tables_equal, corpus_root

# Reads a file through the GPU service, then checks the service's registrations and that this process
# holds no CUDA context; prints "no-context".
_CONTEXT_FREE_READER = textwrap.dedent("""
    import sys
    import dask_hwdecomp
    from dask_hwdecomp.options import Options
    from dask_hwdecomp.routing import registry
    dask_hwdecomp.read_table(sys.argv[1], backend="nvcomp")
    backend = registry.get_backend("nvcomp", Options(backend="nvcomp"))
    stats = backend.stats()
    assert backend.pid is not None and stats["service_pid"] == backend.pid, stats
    assert stats["host_registrations"] > 0 and stats["host_registration_failures"] == 0, stats
""") + NO_CUDA_CONTEXT_CHECK + 'print("no-context")\n'


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
    # gzip (deflate on nvCOMP): its decoder survives corrupt content.
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


def _data_pages(path):
    """(row group, page ordinal, body start, body size, uncompressed size) of column 0's pages."""
    data = path.read_bytes()
    footer = parse_footer(data, len(data), str(path))
    out = []
    for rg in range(footer.num_row_groups):
        chunk = footer.column_chunks(rg)[0]
        rng = chunk_range(chunk, footer.footer_offset, PageLocation())
        view = memoryview(data)[rng.start : rng.start + rng.length]
        for p in scan_chunk(view, rng, PageLocation(), max_page_bytes=1 << 30):
            out.append((rg, p.ordinal, rng.start + p.body_start, p.body_size, p.uncompressed_size))
    return out


# Corruption seeds whose damage the CPU decoder detects (flipped bits in Zstd
# literals decode silently: nobody could name that page).
@pytest.mark.parametrize("codec,algo,mode,seed", [
    ("snappy", Algo.SNAPPY, "noise", 7),  # nvCOMP 6.0: illegal address
    ("snappy", Algo.SNAPPY, "bitflip", 7),
    ("zstd", Algo.ZSTD, "noise", 7),  # illegal address
    ("zstd", Algo.ZSTD, "bitflip", 8),  # hung the GPU in the probe
    ("lz4", Algo.LZ4, "noise", 7),
], ids=lambda v: getattr(v, "value", str(v)))
def test_corrupt_page_in_file_is_named_and_next_read_succeeds(nvcomp_available, tmp_path, codec, algo, mode, seed):
    rng = np.random.default_rng(11)
    table = pa.table({"v": rng.integers(0, 40, 200_000), "w": rng.integers(0, 9, 200_000)})
    good = tmp_path / "good.parquet"
    pq.write_table(table, good, compression=codec, use_dictionary=False, data_page_size=48 << 10)
    data = bytearray(good.read_bytes())
    rg, ordinal, start, size, usize = _data_pages(good)[3]
    corrupt(algo, mode, types.SimpleNamespace(src_offset=start, src_size=size, dst_size=usize), data,
            np.random.default_rng(seed))
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(bytes(data))
    with pytest.raises(CorruptPageError) as on_cpu:  # the reference names the page
        dask_hwdecomp.read_table(bad, backend="cpu")
    assert (on_cpu.value.location.row_group, on_cpu.value.location.page) == (rg, ordinal)
    t0 = time.monotonic()
    with pytest.raises(CorruptPageError) as on_gpu:
        dask_hwdecomp.read_table(bad, backend="nvcomp", gpu_timeout_s=5.0)
    print(f"{codec} {mode}: {time.monotonic() - t0:.1f} s: {on_gpu.value}")
    assert on_gpu.value.location == on_cpu.value.location, (str(on_gpu.value), str(on_cpu.value))
    assert_tables_equal(dask_hwdecomp.read_table(good, backend="nvcomp", gpu_timeout_s=5.0), pq.read_table(good))


def test_zz_reader_process_holds_no_cuda_context(nvcomp_available, tmp_path, matrix_source):
    # A fresh reading process (this one may hold a context: other GPU tests run numba here) reads
    # through the GPU service and checks, after the read, that it created no CUDA context.
    path = tmp_path / "s.parquet"
    pq.write_table(matrix_source, path, compression="zstd")
    reader = subprocess.run([sys.executable, "-c", _CONTEXT_FREE_READER, str(path)], capture_output=True,
                            text=True, timeout=300)
    assert reader.returncode == 0, reader.stderr[-3000:]
    assert reader.stdout.split()[-1] == "no-context", reader.stdout[-2000:]


@pytest.mark.parametrize("codec", ["snappy", "gzip", "lz4", "zstd"])
def test_auto_with_decode_cpu_takes_the_faster_way_per_file(nvcomp_available, tmp_path, matrix_source, codec):
    # decode="cpu": nvCOMP decompresses the codecs where that beat pyarrow's own
    # read at scale; pyarrow's own reader reads the others, and the report says so.
    from dask_hwdecomp.format.structs import Codec
    from dask_hwdecomp.report import PYARROW_CHOSEN
    from dask_hwdecomp.routing.ways import PYARROW_FASTER

    path = tmp_path / f"{codec}.parquet"
    pq.write_table(matrix_source, path, compression=codec)
    report = dask_hwdecomp.ReadReport()
    got = dask_hwdecomp.read_table(path, backend="auto", decode="cpu", report=report)
    assert_tables_equal(got, pq.read_table(path))
    name = {"lz4": "LZ4_RAW"}.get(codec, codec.upper())
    expected = PYARROW_CHOSEN if Codec[name] in PYARROW_FASTER else "nvcomp"
    assert {b for b, _ in report.by_backend} == {expected}, dict(report.by_backend)
