"""Checksums on the GPU: pages whose bytes are wrong but still decode are refused.

For every GPU codec, a page with a flipped byte that nvCOMP still decodes
must raise :class:`ChecksumError` where pyarrow raises: the gzip trailer's
CRC-32 and a Zstd frame's content checksum by default, the page CRC-32 with
``verify_checksums``. Reads go through ``read_table(backend="nvcomp")``,
i.e. the GPU service, so these also test the wire path.
"""

from __future__ import annotations

import zlib

import pyarrow.parquet as pq
import pytest

import dask_hwdecomp
from dask_hwdecomp.errors import ChecksumError
from dask_hwdecomp.jobs import Algo, PageCrc

import checksum_cases as cc
from helpers import PYARROW_ERRORS, assert_tables_equal
from pagegen import make_batch, run_batch

pytestmark = pytest.mark.gpu


def _refused_by_both(path, case, tmp_path, *, pyarrow_kw=None, **ours):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(case.data)
    with pytest.raises(PYARROW_ERRORS):
        pq.read_table(bad, **(pyarrow_kw or {}))
    report = dask_hwdecomp.ReadReport()
    with pytest.raises(ChecksumError) as info:
        dask_hwdecomp.read_table(bad, backend="nvcomp", cpu_retry=True, report=report, **ours)
    assert info.value.location is not None and info.value.location.page is not None
    assert report.retries == []
    return info.value


def test_gpu_crc32_checks_outputs_and_pages_like_zlib(nvcomp_backend):
    # Deflate outputs with their gzip CRC-32, every other page with a page
    # CRC-32: all computed by nvCOMP's batched CRC-32 in the service.
    jobs, src, dst_len, expected = make_batch([Algo.DEFLATE, Algo.SNAPPY, Algo.ZSTD, Algo.LZ4],
                                              [1, 100, 5000, 300_000] * 40, seed=3)
    for k, (job, data) in enumerate(zip(jobs, expected)):
        if job.algo is Algo.DEFLATE:
            job.crc32 = zlib.crc32(data)
        if k % 2:
            start = job.src_offset - 1
            page = bytes(src[start : job.src_offset + job.src_size])
            job.page_crc = PageCrc(start, len(page), zlib.crc32(page))
    out = run_batch(nvcomp_backend, jobs, src, dst_len)
    for job, data in zip(jobs, expected):
        assert out[job.dst_offset : job.dst_offset + job.dst_size] == data
    gz = [j for j in jobs if j.crc32 is not None][7]
    gz.crc32 ^= 0x10
    with pytest.raises(ChecksumError, match=f"gzip CRC-32 {gz.crc32:#010x}") as info:
        run_batch(nvcomp_backend, jobs, src, dst_len)
    assert info.value.location.page == gz.location.page
    gz.crc32 ^= 0x10
    pg = [j for j in jobs if j.page_crc is not None][11]
    src[pg.src_offset - 1] ^= 0xFF  # the "header" byte: decodes, the page CRC fails
    with pytest.raises(ChecksumError, match="page CRC-32") as info:
        run_batch(nvcomp_backend, jobs, src, dst_len)
    assert info.value.location.page == pg.location.page


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_gzip_flips_that_still_inflate_raise_on_the_gpu(nvcomp_available, tmp_path, version):
    path = cc.write(tmp_path / "g.parquet", "gzip", version=version)
    assert_tables_equal(dask_hwdecomp.read_table(path, backend="nvcomp"), pq.read_table(path))
    cases = cc.gzip_flips(path, limit=6)
    assert cases
    for case in cases:
        err = _refused_by_both(path, case, tmp_path)
        assert "gzip CRC-32" in str(err) and "on nvcomp" in str(err)


def test_zstd_content_checksum_is_verified_on_the_gpu_path(nvcomp_available, tmp_path):
    path = cc.zstd_checksummed(tmp_path)
    assert_tables_equal(dask_hwdecomp.read_table(path, backend="nvcomp"), pq.read_table(path))
    for case in cc.zstd_flips(path, limit=6):
        err = _refused_by_both(path, case, tmp_path)
        assert "zstd content checksum" in str(err) and "(0x" in str(err)


@pytest.mark.parametrize("codec", ["snappy", "gzip", "lz4", "zstd"])
@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_page_crc_flips_raise_with_verify_checksums(nvcomp_available, tmp_path, codec, version):
    path = cc.write(tmp_path / f"{codec}.parquet", codec, checksums=True, version=version)
    assert_tables_equal(dask_hwdecomp.read_table(path, backend="nvcomp", verify_checksums=True),
                        pq.read_table(path, page_checksum_verification=True))
    for case in cc.page_crc_flips(path, limit=6, seed=len(codec)):
        err = _refused_by_both(path, case, tmp_path, pyarrow_kw={"page_checksum_verification": True},
                               verify_checksums=True)
        assert "page CRC-32" in str(err)
