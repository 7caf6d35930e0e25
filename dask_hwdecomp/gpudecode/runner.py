"""Run the decode kernels over one decode batch: measure, then write.

:func:`measure` copies the batch's records to the device, allocates the
batch-wide scratch (a :class:`DecodeState`, freed by ``close()`` or by
leaving its ``with`` block) and launches the measuring kernels, each once
over the whole batch; the host gets the records back with ``nonnull``,
``error``, ``null_count`` and ``data_bytes`` filled. Once the host has
placed the outputs (:func:`~dask_hwdecomp.gpudecode.tables.place_outputs`),
:func:`write` zeroes the output buffer and writes the Arrow buffers into
it. :func:`decode_host` runs both on a host buffer (tests, the simulator).

Every launch and copy goes to the caller's stream (a numba stream, or 0).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from numba import config

from .. import timeline
from ..gpu.cuda_jit import cuda
from ..gpu.launch import launch
from . import kernels_bytes_measure, kernels_bytes_write, kernels_delta
from .kernels_fixed import (
    bool_kernel,
    check_kernel,
    dict_kernel,
    fixed_kernel,
    split_fill_kernel,
    totals_kernel,
    validity_kernel,
    zero_kernel,
)
from .kernels_levels import SCAN_SLOTS, levels_kernel
from .tables import CHUNK, PAGE, Encoding, OutKind, PageKind, Physical, place_outputs

__all__ = ["DecodeState", "DecodeStep", "STEPS", "Measured", "Decoded", "measure", "write", "decode_host",
           "bytes_chunk_rows"]

# Threads a block: the simulator runs one Python thread per CUDA thread,
# so it gets small blocks and few of them (the kernels loop over the rest).
_SIM = bool(config.ENABLE_CUDASIM)  # type: ignore[attr-defined]
_PAGE_THREADS = 8 if _SIM else 128
_ROW_THREADS = 32 if _SIM else 256
_MAX_BLOCKS = 2 if _SIM else 1 << 16
assert _PAGE_THREADS <= SCAN_SLOTS

_DICT_ENCODINGS = (int(Encoding.PLAIN_DICTIONARY), int(Encoding.RLE_DICTIONARY))


class DecodeState:
    """The device side of one decode batch: records, scratch, and the data buffer.

    Created by :func:`measure`; holds device memory until :meth:`close`
    (or the end of a ``with`` block). Attributes are numba device arrays:
    ``data``, ``chunks_d``, ``pages_d`` (the records), the per-row
    ``valid``, ``vindex``, ``vrow`` (the page's ``k``-th value's row
    offset), ``row_page``, ``idx``, ``lengths``, ``str_src``, the per-page
    ``vstart``, ``vend``, the dictionary entries' ``dict_off``,
    ``dict_len``, ``byte_base`` (each chunk's first bitmap byte slot, plus
    the total), ``bytes_row`` and ``bytes_at`` (the BYTES chunks' first
    rows, and where each one's rows begin among theirs, plus the total),
    and the byte-array and DELTA kernels' scratch ``sa``, ``sb`` (per row)
    and ``page_bytes``, ``page_base`` (per page). All are views of one
    device block, ``block``: the records uploaded in one copy
    (``records``: chunks, pages and byte slots), then the scratch, zeroed
    (``row_page`` set to -1) by two driver memsets. ``stream`` is the
    stream every launch uses; ``has_*`` say which steps the batch needs,
    ``bytes_rows`` how many rows the BYTES chunks hold.
    """

    _ARRAYS = ("data", "block", "records", "chunks_d", "pages_d", "valid", "vindex", "vrow", "row_page", "idx",
               "lengths", "str_src", "vstart", "vend", "dict_off", "dict_len", "byte_base", "bytes_at", "bytes_row",
               "sa", "sb", "page_bytes", "page_base")
    # The views of ``block``, set from a table in __init__ (device arrays; None once closed).
    chunks_d: Any
    pages_d: Any
    valid: Any
    vindex: Any
    vrow: Any
    row_page: Any
    idx: Any
    lengths: Any
    str_src: Any
    vstart: Any
    vend: Any
    dict_off: Any
    dict_len: Any
    byte_base: Any
    bytes_at: Any
    bytes_row: Any
    sa: Any
    sb: Any
    page_bytes: Any
    page_base: Any

    def __init__(self, data, chunks: np.ndarray, pages: np.ndarray, *, stream: Any) -> None:
        self.stream = stream
        self.data = data
        self.num_chunks = len(chunks)
        self.num_pages = len(pages)
        self.total_rows = int((chunks["row_base"] + chunks["num_rows"]).max()) if len(chunks) else 0
        kinds = chunks["kind"]
        data_pages = pages[pages["kind"] != int(PageKind.DICTIONARY)]
        needs_idx = bool(np.isin(data_pages["encoding"], _DICT_ENCODINGS).any()) or (
            bool((kinds == int(OutKind.BOOL)).any()) and bool((data_pages["encoding"] == int(Encoding.RLE)).any()))
        is_bytes = kinds == int(OutKind.BYTES)
        rows = self.total_rows
        byte_base = np.zeros(len(chunks) + 1, np.int64)
        np.cumsum((chunks["num_rows"].astype(np.int64) + 7) // 8, out=byte_base[1:])  # validity_bytes
        self.bitmap_bytes = int(byte_base[-1])
        # Steps with nothing to do in this batch are not launched.
        encodings = data_pages["encoding"]
        flba = np.zeros(len(data_pages), bool)
        if len(chunks):
            owner = np.clip(data_pages["chunk"], 0, len(chunks) - 1)  # a bad index is the kernels' to report
            flba = chunks["physical"][owner] == int(Physical.FIXED_LEN_BYTE_ARRAY)
        self.has_bytes = bool(is_bytes.any()) or bool(((encodings == int(Encoding.DELTA_BYTE_ARRAY)) & flba).any())
        self.has_dba = bool((encodings == int(Encoding.DELTA_BYTE_ARRAY)).any())
        self.has_delta = bool((encodings == int(Encoding.DELTA_BINARY_PACKED)).any())
        self.has_bool = bool((kinds == int(OutKind.BOOL)).any())
        self.has_nullable = bool((chunks["max_def"] > 0).any())
        total_dict = _dictionary_entries(chunks[is_bytes], pages)
        bytes_row, bytes_at = bytes_chunk_rows(chunks)
        self.bytes_rows = int(bytes_at[-1])
        # One block, one upload, one fill, views: every allocation and launch
        # costs the service Python under its one GIL. Per-row string scratch
        # for the byte-array kernels: BYTES chunks, and DELTA_BYTE_ARRAY pages
        # of FIXED_LEN_BYTE_ARRAY chunks.
        string_rows = rows if self.has_bytes else 0
        scratch_rows = max(1, rows) if self.has_bytes or self.has_delta else 0
        layout = _Layout([
            ("chunks_d", len(chunks), CHUNK), ("pages_d", len(pages), PAGE), ("byte_base", len(byte_base), np.int64),
            ("bytes_at", len(bytes_at), np.int64), ("bytes_row", len(bytes_row), np.int64),
            (_ZEROED, 0, np.uint8),
            ("valid", rows, np.uint8), ("vindex", rows, np.int32), ("vrow", rows, np.int32),
            ("idx", rows if needs_idx else 0, np.int32), ("vstart", len(pages), np.int64),
            ("vend", len(pages), np.int64), ("dict_off", total_dict, np.int64), ("dict_len", total_dict, np.int32),
            ("lengths", string_rows, np.int64), ("str_src", string_rows, np.int64),
            (_MINUS_ONE, 0, np.uint8), ("row_page", rows, np.int32),
            (_UNSET, 0, np.uint8),
            ("sa", scratch_rows, np.uint64), ("sb", scratch_rows if self.has_bytes else 0, np.uint64),
            ("page_bytes", len(pages) if self.has_bytes else 0, np.int64),
            ("page_base", len(pages) if self.has_bytes else 0, np.int64)])
        host = np.zeros(layout.at[_ZEROED], np.uint8)
        layout.host_view(host, "chunks_d")[:] = chunks
        layout.host_view(host, "pages_d")[:] = pages
        layout.host_view(host, "byte_base")[:] = byte_base
        layout.host_view(host, "bytes_at")[:] = bytes_at
        layout.host_view(host, "bytes_row")[:] = bytes_row
        self.block = cuda.device_array(layout.total, np.uint8, stream=stream)
        self.records = self.block[: len(host)]
        self.records.copy_to_device(host, stream=stream)
        for name, view in layout.device_views(self.block).items():
            setattr(self, name, view)
        self.record_layout = layout
        # zeroed, then row_page's words to -1 (all ones)
        _fill_scratch(self.block, layout.at[_ZEROED], layout.at[_MINUS_ONE], layout.at[_UNSET], stream)
        self.closed = False

    def close(self) -> None:
        """Drop the device arrays (numba frees them when unreferenced); idempotent."""
        for name in self._ARRAYS:
            setattr(self, name, None)
        self.closed = True

    def __enter__(self) -> DecodeState:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# Marks in a layout: where the zeroed part, the part set to -1 and the part
# left as the pool lends it begin.
_ZEROED, _MINUS_ONE, _UNSET = "<zeroed>", "<minus one>", "<unset>"
_BLOCK_ALIGN = 256


class _Layout:
    """Arrays ``(name, length, dtype)`` one after the other, each on a 256-byte boundary.

    Names in angle brackets mark a place (an offset in ``at``), no array.
    """

    def __init__(self, specs: list) -> None:
        self.at: dict[str, int] = {}
        self.arrays: dict[str, tuple[int, int, np.dtype]] = {}  # name -> (offset, bytes, dtype)
        total = 0
        for name, n, dtype in specs:
            total = -(-total // _BLOCK_ALIGN) * _BLOCK_ALIGN
            self.at[name] = total
            dtype = np.dtype(dtype)
            if not name.startswith("<"):
                self.arrays[name] = (total, n * dtype.itemsize, dtype)
            total += n * dtype.itemsize
        self.total = max(8, -(-total // _BLOCK_ALIGN) * _BLOCK_ALIGN)

    def host_view(self, host: np.ndarray, name: str) -> np.ndarray:
        """Array ``name`` in a host copy of the block's first bytes."""
        at, size, dtype = self.arrays[name]
        return host[at : at + size].view(dtype)

    def device_views(self, block) -> dict:
        """Every array as a view of the device ``block``."""
        return {name: block[at : at + size].view(dtype) for name, (at, size, dtype) in self.arrays.items()}


def bytes_chunk_rows(chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The BYTES chunks' rows, for the kernels that visit those alone: (first rows, where each chunk's begin).

    Returns int64 arrays: the k-th BYTES chunk's ``row_base``, and the
    exclusive sum of their ``num_rows`` with the total last.
    """
    is_bytes = chunks["kind"] == int(OutKind.BYTES)
    bytes_row = chunks["row_base"][is_bytes].astype(np.int64)
    bytes_at = np.zeros(len(bytes_row) + 1, np.int64)
    np.cumsum(np.maximum(chunks["num_rows"][is_bytes].astype(np.int64), 0), out=bytes_at[1:])
    return bytes_row, bytes_at


def _fill_scratch(block, zeroed: int, minus_one: int, unset: int, stream: Any) -> None:
    """Bytes ``[zeroed, minus_one)`` of ``block`` set to 0, ``[minus_one, unset)`` to 0xFF, on ``stream``.

    Two driver memsets on the device (no kernel, no launch's Python); one
    kernel under the simulator, which has no driver.
    """
    if _SIM:
        words = block[zeroed:unset].view(np.uint64)
        if words.shape[0]:
            split_fill_kernel[_grid(words.shape[0], _ROW_THREADS), _ROW_THREADS, stream](
                words, (minus_one - zeroed) // 8, np.uint64(0), np.uint64(0xFFFFFFFFFFFFFFFF))
        return
    from numba.cuda.cudadrv.driver import device_memset

    for lo, hi, value in ((zeroed, minus_one, 0), (minus_one, unset, 0xFF)):
        if hi > lo:
            device_memset(block[lo:hi], value, hi - lo, stream)


def _zero(out, stream: Any) -> None:
    """``out`` zeroed on ``stream``: a driver memset on the device, a kernel under the simulator."""
    if _SIM:
        zero_kernel[_grid(out.shape[0], _ROW_THREADS), _ROW_THREADS, stream](out)
        return
    from numba.cuda.cudadrv.driver import device_memset

    device_memset(out, 0, out.shape[0], stream)


def _dictionary_entries(chunks: np.ndarray, pages: np.ndarray) -> int:
    """Dictionary entries the batch-wide space needs for ``chunks`` (past the last entry of any of them).

    A dictionary page index out of the batch counts none (the kernels report it).
    """
    d = chunks["dict_page"].astype(np.int64)
    ok = (d >= 0) & (d < len(pages))
    if not ok.any():
        return 0
    entries = np.maximum(pages["num_values"][d[ok]].astype(np.int64), 0)
    return max(0, int((chunks["dict_base"][ok].astype(np.int64) + entries).max()))


class Measured(NamedTuple):
    """:func:`measure`'s result: the records with the measured fields, and the open state."""

    chunks: np.ndarray
    pages: np.ndarray
    state: DecodeState


class Decoded(NamedTuple):
    """:func:`decode_host`'s result: the records after writing and the output buffer."""

    chunks: np.ndarray
    pages: np.ndarray
    out: np.ndarray


def _grid(n: int, threads: int) -> int:
    return max(1, min((n + threads - 1) // threads, _MAX_BLOCKS))


def _blocks(n: int) -> int:
    """Blocks for a one-block-a-page kernel (each block loops over pages)."""
    return max(1, min(n, _MAX_BLOCKS))


def _is_device(a) -> bool:
    return hasattr(a, "copy_to_host")


def measure(data, chunks: np.ndarray, pages: np.ndarray, *, stream: Any) -> Measured:
    """Measure a decode batch: levels, value counts, dictionary indices, string lengths.

    Parameters
    ----------
    data : device array of uint8 (or a numpy array, copied to the device)
        The batch's bytes; the records' offsets point into it.
    chunks, pages : numpy arrays of :data:`CHUNK`, :data:`PAGE`
        The plan's records (not modified).
    stream : numba stream or 0
        Keyword, required: every launch and copy goes there (0, the
        default stream, only where the caller waits for each step).

    Returns
    -------
    Measured
        Copies of the records with ``nonnull``, ``error``, ``null_count``
        and ``data_bytes`` filled, and the state to pass to :func:`write`
        (close it when done). A page error is reported in ``pages["error"]``,
        not raised.
    """
    if not _is_device(data):
        data = cuda.to_device(np.ascontiguousarray(data, np.uint8), stream=stream)
    chunks = np.array(chunks, CHUNK)
    pages = np.array(pages, PAGE)
    for name in ("null_count", "data_bytes"):
        chunks[name] = 0
    for name in ("nonnull", "error"):
        pages[name] = 0
    with timeline.span("measure_state", pages=len(pages)):
        state = DecodeState(data, chunks, pages, stream=stream)
    try:
        with timeline.span("measure_launch"):
            _measure(state)
        with timeline.span("measure_wait"):
            back = state.records.copy_to_host(stream=stream)  # the chunks and pages in one copy (small)
            if stream != 0:
                stream.synchronize()
    except BaseException:
        state.close()
        raise
    back_c = state.record_layout.host_view(back, "chunks_d")
    back_p = state.record_layout.host_view(back, "pages_d")
    for name in ("null_count", "data_bytes"):
        chunks[name] = back_c[name]
    for name in ("nonnull", "error"):
        pages[name] = back_p[name]
    return Measured(chunks, pages, state)


def _measure_levels(s: DecodeState) -> None:
    """Levels, value ranges and dictionary indices of every page (each later step reads them)."""
    st = s.stream
    launch(levels_kernel, _blocks(s.num_pages), _PAGE_THREADS, st,
        s.data, s.chunks_d, s.pages_d, s.valid, s.vindex, s.vrow, s.row_page, s.vstart, s.vend)
    launch(check_kernel, _grid(s.num_pages, _ROW_THREADS), _ROW_THREADS, st,
        s.data.shape[0], s.chunks_d, s.pages_d, s.vstart, s.vend)
    if s.idx.shape[0]:
        launch(dict_kernel, _blocks(s.num_pages), _PAGE_THREADS, st,
            s.data, s.chunks_d, s.pages_d, s.vstart, s.vend, s.vrow, s.idx)


def _measure_totals(s: DecodeState) -> None:
    launch(totals_kernel, _grid(s.num_chunks, _ROW_THREADS), _ROW_THREADS, s.stream, s.chunks_d, s.pages_d)


def _write_validity(s: DecodeState, out) -> None:
    launch(validity_kernel, _grid(s.bitmap_bytes, _ROW_THREADS), _ROW_THREADS, s.stream,
        s.chunks_d, s.byte_base, s.valid, out)


def _write_bool(s: DecodeState, out) -> None:
    launch(bool_kernel, _grid(s.bitmap_bytes, _ROW_THREADS), _ROW_THREADS, s.stream,
        s.data, s.chunks_d, s.pages_d, s.byte_base, s.valid, s.vindex, s.row_page, s.idx, s.vstart, s.vend, out)


def _write_fixed(s: DecodeState, out) -> None:
    launch(fixed_kernel, _grid(s.total_rows, _ROW_THREADS), _ROW_THREADS, s.stream,
        s.data, s.chunks_d, s.pages_d, s.valid, s.vindex, s.row_page, s.idx, s.vstart, s.vend, out,
        out[: out.shape[0] // 4 * 4].view(np.int32), out[: out.shape[0] // 8 * 8].view(np.int64))


class DecodeStep(NamedTuple):
    """One kind of decoding: when a batch needs it, and its launches in the measure and the write.

    ``present(state)`` says whether the batch holds pages of that kind;
    ``measure(state)`` and ``write(state, out)`` queue the kind's kernels
    on ``state.stream`` (None: the kind has no launch in that pass).
    """

    name: str
    present: Callable[[DecodeState], bool]
    measure: Callable[[DecodeState], None] | None
    write: Callable[[DecodeState, Any], None] | None


# The launches of a decode, in order: each pass runs the steps whose kind
# the batch holds. Adding a kind of decoding is one entry here (its
# kernels in a module of their own, its flag in DecodeState).
STEPS: tuple[DecodeStep, ...] = (
    DecodeStep(name="levels", present=lambda s: s.num_pages > 0, measure=_measure_levels, write=None),
    DecodeStep(name="validity", present=lambda s: s.bitmap_bytes > 0 and s.has_nullable, measure=None,
               write=_write_validity),
    DecodeStep(name="bool", present=lambda s: s.bitmap_bytes > 0 and s.has_bool, measure=None, write=_write_bool),
    DecodeStep(name="fixed", present=lambda s: s.total_rows > 0, measure=None, write=_write_fixed),
    DecodeStep(name="bytes", present=lambda s: s.has_bytes, measure=kernels_bytes_measure.measure_bytes,
               write=kernels_bytes_write.write_bytes),
    DecodeStep(name="delta", present=lambda s: s.has_delta, measure=kernels_delta.measure_delta,
               write=kernels_delta.write_delta),
    DecodeStep(name="totals", present=lambda s: s.num_chunks > 0, measure=_measure_totals, write=None),
)


def _measure(s: DecodeState) -> None:
    for step in STEPS:
        if step.measure is not None and step.present(s):
            step.measure(s)


def write(state: DecodeState, chunks: np.ndarray, out, *, stream: Any) -> np.ndarray:
    """Write the batch's Arrow buffers into ``out`` (zeroed first).

    Parameters
    ----------
    state : DecodeState
        From :func:`measure`, still open.
    chunks : numpy array of :data:`CHUNK`
        The measured records after :func:`place_outputs`.
    out : device array of uint8
        The placed size.
    stream : numba stream or 0
        Keyword, required: every launch and copy goes there (0, the
        default stream, only where the caller waits for each step).

    Returns
    -------
    numpy array of int32
        Each page's ``error`` after writing.
    """
    if state.closed:
        raise ValueError("the decode state is closed")
    if len(chunks) != state.num_chunks:
        raise ValueError(f"{len(chunks)} placed chunks for a measured batch of {state.num_chunks}")
    st = stream
    state.stream = stream
    state.chunks_d.copy_to_device(np.ascontiguousarray(chunks, CHUNK), stream=st)  # its place, not a new array
    s = state
    if out.shape[0]:
        _zero(out, st)
    for step in STEPS:
        if step.write is not None and step.present(s):
            step.write(s, out)
    with timeline.span("write_wait"):
        errors = s.pages_d.copy_to_host(stream=st)["error"]
        if st != 0:
            st.synchronize()
    return np.array(errors, np.int32)


def decode_host(data: np.ndarray, chunks: np.ndarray, pages: np.ndarray) -> Decoded:
    """Measure, place, write and copy back one batch held in host memory (tests, the simulator)."""
    # The default stream, named: a host decode waits for each step anyway.
    m = measure(data, chunks, pages, stream=0)
    with m.state as state:
        placed = m.chunks.copy()
        out = cuda.to_device(np.zeros(place_outputs(placed), np.uint8))
        errors = write(state, placed, out, stream=0)
        written = m.pages.copy()
        written["error"] = errors
        return Decoded(placed, written, out.copy_to_host())
