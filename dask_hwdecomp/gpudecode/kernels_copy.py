"""The patch kernel: small host pieces of a decode's bytes, uploaded packed, put in place."""

from __future__ import annotations

from .cuda_jit import cuda

__all__ = ["patch_kernel", "PATCH_THREADS"]

PATCH_THREADS = 128


@cuda.jit
def patch_kernel(packed, data, rows):
    """A block a row of (offset in ``packed``, offset in ``data``, bytes): copy it."""
    r = cuda.blockIdx.x
    if r >= rows.shape[0]:
        return
    src = rows[r, 0]
    dst = rows[r, 1]
    n = rows[r, 2]
    i = cuda.threadIdx.x
    while i < n:
        data[dst + i] = packed[src + i]
        i += cuda.blockDim.x
