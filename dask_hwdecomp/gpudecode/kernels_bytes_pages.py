"""The pages of BYTE_ARRAY decoding on the GPU: which ones each kernel takes, and their string bytes.

What the measure (:mod:`.kernels_bytes_measure`), write
(:mod:`.kernels_bytes_write`) and fixed-length DELTA_BYTE_ARRAY
(:mod:`.kernels_bytes_flba`) kernels share:

- which pages are theirs (:func:`is_bytes_data`, :func:`is_fixed_dba`,
  :func:`measured_here`), a page's value and row counts
  (:func:`page_rows`), a row's string length (:func:`row_length`), where
  a chunk's offsets and string bytes go in the output
  (:func:`offset_slot`, :func:`string_bytes_at`), a DELTA length's sign
  (:func:`as_i32`), a DELTA_BYTE_ARRAY page's prefix lengths
  (:func:`dba_prefixes`) and the copy of one of its values
  (:func:`dba_value`);
- :func:`sum_pages`: each page's string bytes, a block scan of its rows'
  lengths, then each chunk's pages' sums scanned into their bases (one
  thread a chunk). Measure adds each chunk's total to
  ``CHUNK.data_bytes``; an int32 offset past 2^31-1 is
  ``PageError.LENGTH``, found in measure before the host sizes the output.

The device functions are plain numba device functions: numba inlines them
into each kernel, as it would the same lines written there.
"""

from __future__ import annotations

import numba
import numpy as np

from ..gpu.cuda_jit import cuda
from ..gpu.launch import launch
from .kernels_delta import (
    E_LENGTH,
    ENC_DBA,
    K_BYTES,
    K_COPY,
    K_DECIMAL,
    P_DICTIONARY,
    PHYS_FLBA,
    TPB,
    block_scan,
    dbp_decode,
    page_launch,
    set_error,
    thread_blocks,
)

__all__ = ["I32_MAX", "as_i32", "is_bytes_data", "is_fixed_dba", "measured_here", "page_rows", "offset_slot",
           "string_bytes_at", "row_length", "dba_prefixes", "dba_value", "sum_pages"]

I32_MAX = 0x7FFFFFFF


@cuda.jit(device=True, cache=True)
def as_i32(v):
    """A decoded DELTA length (uint64 bits of an INT32) as a signed int64."""
    x = np.int64(v & np.uint64(0xFFFFFFFF))
    if x > I32_MAX:
        x -= np.int64(1) << 32
    return x


@cuda.jit(device=True, cache=True)
def is_bytes_data(pages, chunks, p, c):
    """A data page of a BYTES chunk (Arrow string or binary) that no step before failed."""
    return pages[p]["kind"] != P_DICTIONARY and chunks[c]["kind"] == K_BYTES and pages[p]["error"] == 0


@cuda.jit(device=True, cache=True)
def is_fixed_dba(pages, chunks, p, c):
    """A DELTA_BYTE_ARRAY page of a FIXED_LEN_BYTE_ARRAY chunk (fixed_size_binary, decimal) that no step before failed."""
    kind = chunks[c]["kind"]
    return (pages[p]["kind"] != P_DICTIONARY and pages[p]["encoding"] == ENC_DBA
            and chunks[c]["physical"] == PHYS_FLBA and (kind == K_COPY or kind == K_DECIMAL)
            and pages[p]["error"] == 0)


@cuda.jit(device=True, cache=True)
def measured_here(pages, chunks, p, c):
    """Pages whose per-row lengths the measure kernels fill (and no step before failed)."""
    return is_bytes_data(pages, chunks, p, c) or is_fixed_dba(pages, chunks, p, c)


@cuda.jit(device=True, cache=True)
def page_rows(pages, p):
    """Page ``p``'s (chunk, non-null values, rows, first row in the batch's row space)."""
    return pages[p]["chunk"], np.int64(pages[p]["nonnull"]), np.int64(pages[p]["num_values"]), pages[p]["row_start"]


@cuda.jit(device=True, cache=True)
def offset_slot(ov, width, row):
    """Index of ``row``'s offset, for offsets placed at byte ``ov``: in int32 units (``width`` 4), else int64."""
    if width == 4:
        return (ov >> 2) + row
    return (ov >> 3) + row


@cuda.jit(device=True, cache=True)
def string_bytes_at(chunks, c, size):
    """Chunk ``c``'s string bytes in an output of ``size`` bytes: (start, end), the end clipped to ``size``."""
    od = chunks[c]["out_data"]
    dend = od + chunks[c]["data_bytes"]
    if dend > size:
        dend = np.int64(size)
    return od, dend


@cuda.jit(device=True, cache=True)
def row_length(valid, lengths, base, rows, i):
    """The string length of the page's row ``i`` (at ``base + i``): 0 for a null row or one past its ``rows``."""
    if i < rows and valid[base + i] != 0:
        return np.uint64(lengths[base + i])
    return np.uint64(0)


@cuda.jit(device=True, cache=True)
def dba_prefixes(p, data, vstart, vend, valid, vindex, str_src, n, rows, sa, base, sh, first_src):
    """A DELTA_BYTE_ARRAY page's prefix lengths into ``sa`` (by value); returns its first suffix's start.

    Called by every thread of the page's block; the row of the page's
    first value passes its suffix's start (``str_src``, from the measure)
    through ``first_src[0]``. The block is synchronised on return.
    """
    r = base + cuda.threadIdx.x
    while r < base + rows:
        if valid[r] != 0 and vindex[r] == 0:
            first_src[0] = str_src[r]
        r += TPB
    dbp_decode(data, vstart[p], vend[p], n, sa, base, sh)
    cuda.syncthreads()
    return first_src[0]


@cuda.jit(device=True, cache=True)
def dba_value(out8, data, dst, prev, src, pre, ln, reverse):
    """One DELTA_BYTE_ARRAY value of ``ln`` bytes into ``out8[dst:]``, by every thread of the page's block.

    Its first ``pre`` bytes are the previous value's, at ``out8[prev:]``,
    the rest its suffix at ``data[src:]``. Thread ``t`` takes bytes
    ``j = t (mod TPB)``, so the prefix byte it reads is one it wrote.
    ``reverse``: byte ``j`` goes to ``ln - 1 - j`` (a big-endian value
    stored little-endian, as the previous value was).
    """
    j = np.int64(cuda.threadIdx.x)
    while j < ln:
        at = ln - 1 - j if reverse else j
        if j < pre:
            out8[dst + at] = out8[prev + at]
        else:
            out8[dst + at] = data[src + j - pre]
        j += TPB


@cuda.jit(device=True, cache=True)
def _page_sum_page(p, chunks, pages, valid, lengths, page_bytes, sh):
    t = cuda.threadIdx.x
    if t == 0:
        page_bytes[p] = 0
    c, _n, rows, base = page_rows(pages, p)
    if not is_bytes_data(pages, chunks, p, c):
        return
    total = np.uint64(0)
    tile = np.int64(0)
    while tile < rows:
        ln = row_length(valid, lengths, base, rows, tile + t)
        _incl, whole = block_scan(sh, ln)
        total = total + whole
        tile += TPB
    if t == 0:
        page_bytes[p] = np.int64(total)


@cuda.jit(cache=True)
def _page_sum_kernel(chunks, pages, valid, lengths, page_bytes):
    sh = cuda.shared.array(TPB, numba.uint64)
    for p in range(cuda.blockIdx.x, pages.shape[0], cuda.gridDim.x):
        _page_sum_page(p, chunks, pages, valid, lengths, page_bytes, sh)
        cuda.syncthreads()


@cuda.jit(device=True, cache=True)
def _chunk_one(c, chunks, pages, page_bytes, page_base, measure):
    """Per chunk: add its bytes to ``data_bytes`` (measure), or scan its pages' bytes (write)."""
    if chunks[c]["kind"] != K_BYTES:
        return
    first = chunks[c]["first_page"]
    total = np.int64(0)
    for q in range(chunks[c]["num_pages"]):
        p = first + q
        page_base[p] = total
        total += page_bytes[p]
        # int32 offsets: found in measure, before the host sizes the output
        if chunks[c]["width"] == 4 and total > I32_MAX:
            set_error(pages, p, E_LENGTH)
    if measure:
        chunks[c]["data_bytes"] = chunks[c]["data_bytes"] + total


@cuda.jit(cache=True)
def _chunk_kernel(chunks, pages, page_bytes, page_base, measure):
    for c in range(cuda.grid(1), chunks.shape[0], cuda.gridsize(1)):
        _chunk_one(c, chunks, pages, page_bytes, page_base, measure)


def sum_pages(state, measure: bool) -> None:
    """Each BYTES page's string bytes into ``state.page_bytes``, scanned per chunk into ``state.page_base``.

    Parameters
    ----------
    state : DecodeState
        The batch's device arrays and stream; its pages' ``lengths`` measured.
    measure : bool
        True in measure: each chunk's total is added to ``CHUNK.data_bytes``.
    """
    pages = state.pages_d
    s = state.stream
    launch(_page_sum_kernel, *page_launch(state), state.chunks_d, pages, state.valid, state.lengths, state.page_bytes)
    launch(_chunk_kernel, thread_blocks(state.chunks_d.shape[0]), TPB, s, state.chunks_d, pages, state.page_bytes,
                                                                  state.page_base, measure)
