"""Sample page bodies of each bitstream, for the checks that run a backend on known pages.

The engine check (:mod:`~dask_hwdecomp.decompress.hwengine_check`), ``hwdecomp
selfcheck`` and the benchmark suite compress the same kind of payload the
same way; they take it from here, below all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cramjam
import numpy as np

from ..jobs import Algo

__all__ = ["COMPRESSORS", "compress_page", "sample_payload"]

# bitstream -> the compressor of a page body of it
COMPRESSORS: dict[Algo, Callable[[bytes], Any]] = {
    Algo.SNAPPY: cramjam.snappy.compress_raw,
    Algo.DEFLATE: cramjam.deflate.compress,
    Algo.LZ4: lambda b: cramjam.lz4.compress_block(b, store_size=False),
    Algo.ZSTD: cramjam.zstd.compress,
}


def compress_page(algo: Algo, data: bytes) -> bytes:
    """``data`` compressed as a page body of bitstream ``algo`` (raw Snappy, raw deflate, raw LZ4, Zstd)."""
    return bytes(COMPRESSORS[algo](data))


def sample_payload(n: int, rng: np.random.Generator) -> bytes:
    """``n`` bytes of small integers with runs of zeros: compressible, as page values are."""
    vals = rng.integers(0, 40, size=(n + 3) // 4, dtype=np.int32)
    vals[::7] = 0
    return vals.tobytes()[:n]
