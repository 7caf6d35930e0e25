"""Generated decompression batches: pages of every bitstream, real codecs.

Shared by the stand-in engine tests (CI) and the GPU tests: a batch is a
source buffer holding compressed pages separated by filler (like page
headers), the jobs, and the expected output of each job.
"""

from __future__ import annotations

import cramjam
import numpy as np

from dask_hwdecomp.errors import PageLocation
from dask_hwdecomp.format.codecs import Algo
from dask_hwdecomp.format.layout import Job

__all__ = ["compress", "payload", "make_batch"]

_CODEC = {Algo.SNAPPY: 1, Algo.DEFLATE: 2, Algo.LZ4: 7, Algo.ZSTD: 6}


def compress(algo: Algo, data: bytes) -> bytes:
    """``data`` as one bitstream of ``algo``."""
    if algo is Algo.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if algo is Algo.DEFLATE:
        return bytes(cramjam.deflate.compress(data))
    if algo is Algo.LZ4:
        return bytes(cramjam.lz4.compress_block(data, store_size=False))
    if algo is Algo.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(algo)


def payload(n: int, rng: np.random.Generator) -> bytes:
    """``n`` bytes that compress about 2-4x (small integers, some runs)."""
    vals = rng.integers(0, 40, size=(n + 3) // 4, dtype=np.int32)
    vals[:: 7] = 0
    return vals.tobytes()[:n]


def make_batch(algos, sizes, seed: int = 0, file: str = "generated.parquet"):
    """A batch of one page per (algo, size) pair, cycling through ``algos``.

    Returns
    -------
    jobs : list of Job
    src : bytearray
    dst_len : int
    expected : list of bytes
        Output of each job, in ``jobs`` order.
    """
    rng = np.random.default_rng(seed)
    src = bytearray()
    jobs, expected = [], []
    dpos = 0
    for k, size in enumerate(sizes):
        algo = algos[k % len(algos)]
        data = payload(size, rng)
        body = compress(algo, data)
        src += bytes(int(rng.integers(1, 40)))  # a "page header": leaves inputs unaligned
        dpos += int(rng.integers(1, 40))
        loc = PageLocation(file, k // 100, f"col{k % 100}", k)
        jobs.append(Job(algo, len(src), len(body), dpos, size, _CODEC[algo], loc))
        expected.append(data)
        src += body
        dpos += size
    return jobs, src, dpos + 16, expected
