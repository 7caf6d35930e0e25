"""Every checksum the format carries is checked, on every backend (CI, no GPU).

The gzip trailer's CRC-32 of every GZIP page (always), a Zstd frame's
content checksum (always), the Parquet page CRC-32 (``verify_checksums``).
A failure is a :class:`ChecksumError` naming the page, with the expected
and the actual value, and ``cpu_retry`` never hides it. The GPU backends
run the CRC-32s on the device in the batch: here through the engine
stand-in, whose ``StandinCrc`` implements ``nvcompBatchedCRC32Async``'s
contract on host memory and records what it hashed.
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow.parquet as pq
import pytest

import dask_hwdecomp
from dask_hwdecomp.decompress.cpu import CpuBackend
from dask_hwdecomp.decompress.gpu_backend import _check_zstd_content
from dask_hwdecomp.decompress.hardware import create_with
from dask_hwdecomp.decompress.validate import zstd_frames
from dask_hwdecomp.errors import ChecksumError, PageLocation
from dask_hwdecomp.format.xxh64 import content_checksum_matches, xxh64
from dask_hwdecomp.gpu.checksums import crc_checks
from dask_hwdecomp.gpu.staging import Part, place
from dask_hwdecomp.jobs import Algo, Job, PageCrc
from dask_hwdecomp.options import Options
from dask_hwdecomp.report import ReadReport
from dask_hwdecomp.routing.router import Router
from dask_hwdecomp.service.wire import Run, pack_jobs, unpack_jobs

import checksum_cases as cc
from helpers import PYARROW_ERRORS
from pagegen import make_batch, run_batch
from service_backends import open_backend
from standin_hwengine import StandinHwEngine

OPTS = Options(streams=2, batch_latency_ms=1.0, batch_bytes=8 << 20, cpu_threads=2)
ENGINE_ALGOS = (Algo.SNAPPY, Algo.DEFLATE, Algo.LZ4)


def _checked_batch(seed=1, n=24):
    """A generated batch where every DEFLATE job has its gzip CRC-32 and every fourth job a page CRC.

    The "page" of a job is its input with the bytes before it (a header
    stand-in), as a Parquet page's stored bytes include the v2 levels and
    the gzip framing around the deflate stream.
    """
    jobs, src, dst_len, expected = make_batch(ENGINE_ALGOS, [5000 + 37 * k for k in range(n)], seed=seed)
    for k, (job, data) in enumerate(zip(jobs, expected)):
        if job.algo is Algo.DEFLATE:
            job.crc32 = zlib.crc32(data)
        if k % 4 == 0:  # every algorithm gets some
            start = job.src_offset - 1
            page = bytes(src[start : job.src_offset + job.src_size])
            job.page_crc = PageCrc(start, len(page), zlib.crc32(page))
    return jobs, src, dst_len, expected


@pytest.fixture
def engine():
    return StandinHwEngine(mask=7, max_length=4 << 20)


@pytest.fixture
def standin(engine):
    b = create_with(engine, OPTS)
    yield b
    b.close()


# --- the plumbing: which bytes, which expected values -----------------------------------------------


def test_crc_checks_name_each_output_and_page_with_its_expected_value():
    jobs, src, dst_len, _ = _checked_batch()
    plan = place([Part(jobs, memoryview(src), memoryview(bytearray(dst_len)))], lambda a: 1, lambda j: 0)
    checks = crc_checks(plan).records()
    want = [("page", k) for k, j in enumerate(plan.jobs) if j.page_crc is not None]
    want += [("gzip", k) for k, j in enumerate(plan.jobs) if j.crc32 is not None]
    assert sorted((c.kind, c.index) for c in checks) == sorted(want)
    for c in checks:
        job = plan.jobs[c.index]
        if c.kind == "gzip":
            assert (c.offset, c.size, c.expected) == (int(plan.dst_dev[c.index]), job.dst_size, job.crc32)
        else:
            pc = job.page_crc
            assert (c.size, c.expected) == (pc.size, pc.value)
            # The page's bytes sit before the job's input on the device, as on the host.
            assert int(plan.src_dev[c.index]) - c.offset == job.src_offset - pc.offset


def test_aligned_inputs_stay_aligned_when_the_page_comes_along():
    jobs, src, dst_len, _ = _checked_batch(seed=4)
    plan = place([Part(jobs, memoryview(src), memoryview(bytearray(dst_len)))], lambda a: 4, lambda j: 0)
    assert all(int(off) % 4 == 0 for off in plan.src_dev)
    for k, job in enumerate(plan.jobs):
        if job.page_crc is not None:
            assert int(plan.src_dev[k]) - int(plan.page_dev[k]) == job.src_offset - job.page_crc.offset


def test_device_crc_hashes_exactly_the_outputs_and_pages_against_zlib(standin, engine):
    jobs, src, dst_len, expected = _checked_batch()
    out = run_batch(standin, jobs, src, dst_len)
    hashed = sorted(data for _, data in engine.checksummer.chunks)
    want = [bytes(src[j.page_crc.offset : j.page_crc.offset + j.page_crc.size]) for j in jobs if j.page_crc]
    want += [out[j.dst_offset : j.dst_offset + j.dst_size] for j in jobs if j.crc32 is not None]
    assert hashed == sorted(want)
    assert engine.checksummer.calls >= 1
    for job, data in zip(jobs, expected):
        assert out[job.dst_offset : job.dst_offset + job.dst_size] == data


@pytest.mark.parametrize("on_device", [True, False])
def test_gzip_crc_mismatch_is_a_checksum_error_with_both_values(engine, on_device):
    if not on_device:
        engine.checksummer = None  # the host fallback of a device without nvCOMP
    jobs, src, dst_len, expected = _checked_batch()
    bad = [j for j in jobs if j.algo is Algo.DEFLATE][2]
    actual = bad.crc32
    bad.crc32 ^= 0x5A5A
    with create_with(engine, OPTS) as b, pytest.raises(ChecksumError) as info:
        run_batch(b, jobs, src, dst_len)
    assert info.value.location == bad.location
    assert f"{bad.crc32:#010x}" in str(info.value) and f"({actual:#010x})" in str(info.value)


@pytest.mark.parametrize("on_device", [True, False])
def test_page_crc_mismatch_is_a_checksum_error_before_the_decoder_speaks(engine, on_device):
    if not on_device:
        engine.checksummer = None
    jobs, src, dst_len, _ = _checked_batch()
    bad = [j for j in jobs if j.page_crc is not None][3]
    src[bad.src_offset + bad.src_size // 2] ^= 0xFF  # the decoder may fail too: the CRC explains it
    with create_with(engine, OPTS) as b, pytest.raises(ChecksumError, match="page CRC-32") as info:
        run_batch(b, jobs, src, dst_len)
    assert info.value.location == bad.location
    page = bytes(src[bad.page_crc.offset : bad.page_crc.offset + bad.page_crc.size])
    assert f"({zlib.crc32(page):#010x})" in str(info.value)


@pytest.mark.parametrize("only_bad", [False, True])
def test_a_page_whose_crc_fails_never_reaches_the_decoder(only_bad):
    # Corrupt content can hang or poison a GPU decoder; with verify_checksums
    # the page CRC-32s run first and such a page is not submitted. The
    # stand-in raises an illegal address if the corrupt page reaches it.
    engine = StandinHwEngine(mask=7, max_length=4 << 20, fault="illegal_address")
    jobs, src, dst_len, expected = _checked_batch()
    # LZ4 and deflate have no framing the host checks: only the decoder would see it.
    bad = [j for j in jobs if j.page_crc is not None and j.algo is Algo.LZ4][0]
    noise = np.random.default_rng(9).integers(0, 256, bad.src_size, dtype=np.uint8).tobytes()
    src[bad.src_offset : bad.src_offset + bad.src_size] = noise
    if only_bad:
        jobs = [bad]
    with create_with(engine, OPTS) as b, pytest.raises(ChecksumError, match="page CRC-32") as info:
        run_batch(b, jobs, src, dst_len)
    assert info.value.location == bad.location
    assert sum(len(call) for call in engine.calls) == len(jobs) - 1


def test_cpu_backend_raises_the_same_checksum_errors():
    jobs, src, dst_len, _ = _checked_batch()
    bad = [j for j in jobs if j.crc32 is not None][1]
    bad.crc32 ^= 1
    with CpuBackend(2) as b, pytest.raises(ChecksumError, match="gzip CRC-32") as info:
        b.decompress(jobs, memoryview(src), memoryview(bytearray(dst_len)))
    assert info.value.location == bad.location


def test_wire_carries_both_crcs():
    jobs, _, _, _ = _checked_batch()
    blob = pack_jobs(jobs)
    end = max(max(j.src_offset + j.src_size, j.dst_offset + j.dst_size) for j in jobs)
    back, _ = unpack_jobs(Run(1, 1, 0, end, 2, 0, end, len(jobs), 0, False), blob)
    assert [(j.crc32, j.page_crc) for j in back] == [(j.crc32, j.page_crc) for j in jobs]


def test_service_returns_a_checksum_error_naming_the_page(service_dir):
    jobs, src, dst_len, _ = _checked_batch()
    bad = [j for j in jobs if j.crc32 is not None][4]
    bad.crc32 ^= 1
    with open_backend("standin", OPTS, service_dir) as b:
        with pytest.raises(ChecksumError, match="gzip CRC-32") as info:
            run_batch(b, jobs, src, dst_len)
    assert info.value.location == bad.location


def test_service_recovery_keeps_a_checksum_error_a_checksum_error(service_dir):
    # The stand-in's process dies on the corrupt page; the CPU finds the bad page CRC.
    jobs, src, dst_len, _ = _checked_batch()
    bad = [j for j in jobs if j.page_crc is not None][2]
    src[bad.src_offset : bad.src_offset + bad.src_size] = bytes(bad.src_size)
    with open_backend("standin_dies", OPTS, service_dir) as b:
        with pytest.raises(ChecksumError, match="page CRC-32") as info:
            run_batch(b, jobs, src, dst_len)
    assert info.value.location == bad.location


def test_cpu_retry_does_not_hide_a_checksum_error(engine, monkeypatch):
    from dask_hwdecomp.routing import registry

    jobs, src, dst_len, _ = _checked_batch()
    bad = [j for j in jobs if j.crc32 is not None][0]
    bad.crc32 ^= 1
    options = OPTS.replace(backend="hardware", cpu_retry=True)
    hw = create_with(engine, options)
    monkeypatch.setattr(registry, "probe", lambda name: None)
    monkeypatch.setattr(registry, "get_backend",
                        lambda name, opts: hw if name == "hardware" else CpuBackend(2))
    try:
        router = Router(options)
        report = ReadReport()
        with pytest.raises(ChecksumError):
            router.run(jobs, memoryview(bytearray(src)), memoryview(bytearray(dst_len)), report)
        assert report.retries == []
    finally:
        hw.close()


# --- Zstd content checksums ----------------------------------------------------------------------


def test_xxh64_reference_values():
    assert xxh64(b"") == 0xEF46DB3751D8E999
    assert xxh64(b"a") == 0xD24EC4F1A98C6E5B
    assert xxh64(b"abc") == 0x44BC2CF5AD770999


@pytest.mark.parametrize("n", [0, 1, 31, 32, 200_000])
def test_content_checksum_matches_agrees_with_xxh64(n):
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()
    assert content_checksum_matches(data, xxh64(data) & 0xFFFFFFFF)
    assert not content_checksum_matches(data, (xxh64(data) ^ 1) & 0xFFFFFFFF)


def test_the_gpu_host_checks_collect_each_zstd_frames_checksum():
    from dask_hwdecomp.decompress.validate import check_job

    a, b = bytes(range(200)) * 30, b"xyz" * 999
    page = cc.raw_zstd_frame(a) + bytes(cc.raw_zstd_frame(b)[:-4])  # second frame: flag cleared below
    second = len(cc.raw_zstd_frame(a))
    page = bytearray(page)
    page[second + 4] &= ~0x04
    job = Job(Algo.ZSTD, 0, len(page), 0, len(a) + len(b), 6, PageLocation("f", 0, "c", 0))
    frames: list = []
    check_job(job, len(page), job.dst_size, memoryview(bytes(page)), 1 << 30, frames)
    assert frames == [(len(a), xxh64(a) & 0xFFFFFFFF), (len(b), None)]
    _check_zstd_content(job, frames, memoryview(bytes(page)), memoryview(a + b), "test")
    with pytest.raises(ChecksumError, match="frame 0"):
        _check_zstd_content(job, frames, memoryview(bytes(page)), memoryview(bytes([a[0] ^ 1]) + a[1:] + b), "test")


def test_host_check_of_zstd_frames_names_the_frame_and_both_values():
    content = bytes(range(256)) * 50
    frame = cc.raw_zstd_frame(content)
    job = Job(Algo.ZSTD, 0, len(frame), 0, len(content), 6, PageLocation("f", 0, "c", 3))
    frames: list = []
    zstd_frames(frame, job, frames)
    assert frames == [(len(content), xxh64(content) & 0xFFFFFFFF)]
    _check_zstd_content(job, frames, memoryview(frame), memoryview(content), "test")
    wrong = bytearray(content)
    wrong[100] ^= 1
    with pytest.raises(ChecksumError, match="frame 0") as info:
        _check_zstd_content(job, frames, memoryview(frame), memoryview(wrong), "test")
    assert f"({xxh64(bytes(wrong)) & 0xFFFFFFFF:#010x})" in str(info.value)
    assert info.value.location == job.location


# --- whole files, CPU backend and the engine stand-in -----------------------------------------------


def _refuses(path, **kw):
    with pytest.raises(PYARROW_ERRORS):
        pq.read_table(path, **kw)


def _each_refused(tmp_path, cases, match: str, checks_pages: bool, **read):
    """Every flipped case: pyarrow refuses it, and our read raises a ChecksumError naming its page."""
    for case in cases:
        bad = tmp_path / "bad.parquet"
        bad.write_bytes(case.data)
        if checks_pages:
            _refuses(bad, page_checksum_verification=True)
        else:
            _refuses(bad)
        with pytest.raises(ChecksumError, match=match) as info:
            dask_hwdecomp.read_table(bad, cpu_retry=True, **read)
        assert info.value.location.page is not None


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_gzip_flips_that_still_inflate_are_refused_by_default(tmp_path, version):
    path = cc.write(tmp_path / "g.parquet", "gzip", version=version)
    cases = cc.gzip_flips(path, limit=4)
    assert cases, "no flip that still inflates was found"
    for case in cases:
        bad = tmp_path / "bad.parquet"
        bad.write_bytes(case.data)
        _refuses(bad)
        with pytest.raises(ChecksumError, match="gzip CRC-32") as info:
            dask_hwdecomp.read_table(bad, backend="cpu", cpu_retry=True)
        assert info.value.location.page is not None and info.value.location.column is not None


@pytest.fixture
def engine_route(monkeypatch):
    """``backend="hardware"`` served in process by the real backend over the engine stand-in."""
    from dask_hwdecomp.routing import registry
    from dask_hwdecomp.routing import router as routing

    engine = StandinHwEngine(mask=7, max_length=4 << 20)
    hw = create_with(engine, OPTS)
    # No nvCOMP in CI: what the engine does not decode goes to the CPU.
    monkeypatch.setitem(routing.ROUTES, "hardware", {a: ("hardware", "cpu") if a in ENGINE_ALGOS else ("cpu",)
                                                     for a in Algo})
    real_probe, real_get = registry.probe, registry.get_backend
    monkeypatch.setattr(registry, "probe", lambda name: None if name == "hardware" else real_probe(name))
    monkeypatch.setattr(registry, "get_backend",
                        lambda name, opts: hw if name == "hardware" else real_get(name, opts))
    yield engine
    hw.close()


def test_gzip_flips_are_refused_through_the_engine_stand_in(tmp_path, engine_route):
    # The engine decodes raw deflate after the gzip framing is stripped: the
    # trailer's CRC-32 of its output is checked in the batch, on the "device".
    path = cc.write(tmp_path / "g.parquet", "gzip")
    report = dask_hwdecomp.ReadReport()
    assert dask_hwdecomp.read_table(path, backend="hardware", report=report).equals(pq.read_table(path))
    assert "hardware" in {name for name, _ in report.by_backend}
    calls = engine_route.checksummer.calls
    assert calls >= 1
    for case in cc.gzip_flips(path, limit=3):
        bad = tmp_path / "bad.parquet"
        bad.write_bytes(case.data)
        _refuses(bad)
        with pytest.raises(ChecksumError, match="gzip CRC-32 .* on hardware") as info:
            dask_hwdecomp.read_table(bad, backend="hardware", cpu_retry=True)
        assert info.value.location.page is not None and info.value.location.column is not None
    assert engine_route.checksummer.calls > calls


@pytest.mark.parametrize("codec", ["snappy", "gzip", "lz4"])
def test_page_crc_flips_are_refused_through_the_engine_stand_in(tmp_path, engine_route, codec):
    path = cc.write(tmp_path / f"{codec}.parquet", codec, checksums=True)
    got = dask_hwdecomp.read_table(path, backend="hardware", verify_checksums=True)
    assert got.equals(pq.read_table(path, page_checksum_verification=True))
    # The page CRC-32s ran in the engine's batches, through its checksummer.
    pages = [p for p in cc._pages(path)]
    assert len(engine_route.checksummer.chunks) >= len(pages)
    _each_refused(tmp_path, cc.page_crc_flips(path, limit=3), "page CRC-32", True, backend="hardware",
                  verify_checksums=True)


def test_zstd_checksummed_frames_read_and_flips_are_refused(tmp_path):
    path = cc.zstd_checksummed(tmp_path)
    assert dask_hwdecomp.read_table(path, backend="cpu").equals(pq.read_table(path))
    _each_refused(tmp_path, cc.zstd_flips(path, limit=3), "zstd", False, backend="cpu")


@pytest.mark.parametrize("codec", ["snappy", "gzip", "lz4", "zstd", "none"])
def test_page_crc_flips_are_refused_with_verify_checksums(tmp_path, codec):
    path = cc.write(tmp_path / f"{codec}.parquet", codec, checksums=True)
    assert dask_hwdecomp.read_table(path, backend="cpu", verify_checksums=True).equals(
        pq.read_table(path, page_checksum_verification=True))
    _each_refused(tmp_path, cc.page_crc_flips(path, limit=4), "page CRC-32", True, backend="cpu",
                  verify_checksums=True)
