"""BYTE_ARRAY on the GPU: DELTA_BYTE_ARRAY pages of FIXED_LEN_BYTE_ARRAY chunks, written at ``width`` bytes a row.

fixed_size_binary (COPY) keeps each value's bytes; decimal (DECIMAL)
reverses the big-endian value into 16 little-endian bytes and
sign-extends it. The rows' suffix starts and lengths come from the
measure (:mod:`.kernels_bytes_measure`); the page's thread block decodes
the prefix lengths and copies the values in value order, thread ``t``
taking bytes ``j = t (mod TPB)`` of every value, so the prefix it reads
from the previous value is one it wrote. Every write is checked against
the chunk's placed output.
"""

from __future__ import annotations

import numba
import numpy as np

from ..gpu.cuda_jit import cuda
from ..gpu.launch import launch
from .kernels_bytes_pages import as_i32, dba_prefixes, dba_value, is_fixed_dba, page_rows
from .kernels_delta import E_LENGTH, K_DECIMAL, TPB, block_error, page_launch

__all__ = ["write_fixed_dba"]


@cuda.jit(device=True, cache=True)
def _write_fixed_dba_page(p, data, chunks, pages, vstart, vend, valid, vindex, lengths, str_src, sa, sd, out8, sh, first_src):
    """Page ``p`` by its thread block: each value's destination, the prefix lengths, then the values in order."""
    t = cuda.threadIdx.x
    c, n, rows, base = page_rows(pages, p)
    if not is_fixed_dba(pages, chunks, p, c):
        return
    row_base = chunks[c]["row_base"]
    width = np.int64(chunks[c]["width"])
    size = np.int64(chunks[c]["type_length"])
    dec = chunks[c]["kind"] == K_DECIMAL
    ov = chunks[c]["out_values"]
    oend = ov + chunks[c]["num_rows"] * width
    if oend > out8.shape[0]:
        oend = np.int64(out8.shape[0])
    if size <= 0 or size > width or (dec and width != 16):
        block_error(pages, p, E_LENGTH)
        return
    r = base + t
    while r < base + rows:
        if valid[r] != 0:
            sd[base + vindex[r]] = np.uint64(ov + (r - row_base) * width)
        r += TPB
    src = dba_prefixes(p, data, vstart, vend, valid, vindex, str_src, n, rows, sa, base, sh, first_src)
    prev = np.int64(0)
    for i in range(n):
        pre = as_i32(sa[base + i])
        dst = np.int64(sd[base + i])
        if dst + width > oend or src + size - pre > data.shape[0] or pre > size:
            break
        dba_value(out8, data, dst, prev, src, pre, size, dec)
        if dec and t == 0:
            # thread 0 wrote the value's top byte (its byte 0, big-endian)
            ext = np.uint8(0xFF) if out8[dst + size - 1] >= 128 else np.uint8(0)
            for k in range(size, 16):
                out8[dst + k] = ext
        src += size - pre
        prev = dst


@cuda.jit(cache=True)
def _write_fixed_dba_kernel(data, chunks, pages, vstart, vend, valid, vindex, lengths, str_src, sa, sd, out8):
    sh = cuda.shared.array(TPB, numba.uint64)
    first_src = cuda.shared.array(1, numba.int64)
    for p in range(cuda.blockIdx.x, pages.shape[0], cuda.gridDim.x):
        _write_fixed_dba_page(p, data, chunks, pages, vstart, vend, valid, vindex, lengths, str_src, sa, sd, out8, sh, first_src)
        cuda.syncthreads()


def write_fixed_dba(state, out8) -> None:
    """Write the DELTA_BYTE_ARRAY pages of FIXED_LEN_BYTE_ARRAY chunks into ``out8`` (placed by ``place_outputs``).

    Parameters
    ----------
    state : DecodeState
        Measured (:func:`~dask_hwdecomp.gpudecode.kernels_bytes_measure.measure_bytes`),
        its scratch ``sa``/``sb`` free to reuse: every step before runs on its stream.
    out8 : device array of uint8
        The batch's output.
    """
    launch(_write_fixed_dba_kernel, *page_launch(state),
        state.data, state.chunks_d, state.pages_d, state.vstart, state.vend, state.valid, state.vindex, state.lengths,
        state.str_src, state.sa, state.sb, out8)
