"""The Huffman stream walk as a CUDA kernel: one thread per stream.

The device function is :func:`~dask_hwdecomp.format.zstd_streams.bits_left_py`
itself, compiled by numba-cuda: the host walk and this one are one text.
Imported only where a kernel runs (numba-cuda is a heavy import).
"""

from __future__ import annotations

from ..format.zstd_streams import bits_left_py
from ..gpu.cuda_jit import cuda

__all__ = ["walk_kernel", "THREADS"]

THREADS = 128  # threads per block

_bits_left = cuda.jit(device=True, cache=True)(bits_left_py)


@cuda.jit(cache=True)
def walk_kernel(src, start, end, count, lengths_at, table_log, lengths, out):  # pragma: no cover - compiled
    """``out[k]``: the bits left after walking stream ``k`` of ``src`` (see ``bits_left_py``).

    ``start``, ``end``, ``count``, ``lengths_at`` and ``table_log`` are per
    stream (its tree's table resolved already), ``lengths`` every tree's
    table of code lengths.
    """
    k = cuda.grid(1)
    if k < out.shape[0]:
        out[k] = _bits_left(src, start[k], end[k], count[k], lengths, lengths_at[k], table_log[k])
