"""The checks before nvCOMP pass every LZ4, Snappy and Zstd page of the corpus (files of many writers).

The jobs are the read path's own: each corpus file is read with
``backend="cpu"`` and the CPU backend's jobs recorded; every LZ4 and Snappy
job then goes through the device walk's host twin, and every Zstd job
through the host's frame, block and section check. None may be refused:
pyarrow reads these files.
"""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from dask_hwdecomp import read_table
from dask_hwdecomp.decompress.cpu import CpuBackend
from dask_hwdecomp.decompress.validate import zstd_frames
from dask_hwdecomp.gpu.block_checks import BLOCK_FAULTS, BLOCK_OK, lz4_block_fault, snappy_block_fault
from dask_hwdecomp.jobs import Algo, JobTable

from helpers import corpus_root

ROOT = corpus_root() / "data"


def _files() -> list[str]:
    if not ROOT.is_dir():
        return []
    names = []
    for p in sorted(ROOT.glob("*.parquet")):
        try:
            md = pq.ParquetFile(p).metadata
            pq.read_table(p)
        except Exception:  # not a file pyarrow reads: not this test's
            continue
        codecs = {md.row_group(r).column(c).compression.lower() for r in range(md.num_row_groups)
                  for c in range(md.num_columns)}
        if codecs & {"snappy", "lz4", "lz4_raw", "zstd", "unknown"}:
            names.append(p.name)
    return names


FILES = _files()


def test_every_walked_page_of_the_corpus_passes(monkeypatch):
    seen: list = []
    real = CpuBackend.decompress

    def recording(self, jobs, src, dst, *args, **kw):
        table = jobs if isinstance(jobs, JobTable) else JobTable.from_jobs(list(jobs))
        seen.append((table, bytes(src)))
        return real(self, jobs, src, dst, *args, **kw)

    monkeypatch.setattr(CpuBackend, "decompress", recording)
    for name in FILES:
        read_table(str(ROOT / name), backend="cpu")
    walked = {Algo.LZ4: 0, Algo.SNAPPY: 0, Algo.ZSTD: 0}
    for table, src in seen:
        buf = np.frombuffer(src, np.uint8)
        for k in range(len(table)):
            job = table.job(k)
            if job.algo is Algo.ZSTD:
                zstd_frames(src[job.src_offset : job.src_offset + job.src_size], job)
            elif job.algo in (Algo.LZ4, Algo.SNAPPY):
                walk = lz4_block_fault if job.algo is Algo.LZ4 else snappy_block_fault
                fault = int(walk(buf, job.src_offset, job.src_size, job.dst_size))
                assert fault == BLOCK_OK, (job.location, BLOCK_FAULTS.get(fault))
            else:
                continue
            walked[job.algo] += 1
    assert len(FILES) >= 10 and all(count > 0 for count in walked.values()), (FILES, walked)
