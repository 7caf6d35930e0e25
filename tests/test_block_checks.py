"""The LZ4 and Snappy block walks that run before nvCOMP, against the reference decoders.

The host walks (:mod:`dask_hwdecomp.gpu.block_checks`) are held to the
reference decoders' verdicts (``block_cases.library_reads``: the LZ4
library and Google's Snappy, to exactly the declared size, as Parquet
reads a page) on every block they write and on mutated ones; the device
kernel is held to the host walks. The kernel runs on a GPU where there is
one, else under numba's CUDA simulator (``conftest`` chooses).
"""

from __future__ import annotations

import numpy as np
import pytest

from dask_hwdecomp.gpu.block_checks import (
    BLOCK_FAULTS,
    BLOCK_OK,
    BLOCK_STATUS,
    WALK_LZ4,
    WALK_SNAPPY,
    check_blocks,
    lz4_block_fault,
    snappy_block_fault,
)
from dask_hwdecomp.gpu.cuda_jit import cuda
from dask_hwdecomp.gpu.nvcomp_launcher import NvcompLauncher

from block_cases import FORMATS, compress, datas, library_reads, mutants

_WALKS = {"lz4": (WALK_LZ4, lz4_block_fault), "snappy": (WALK_SNAPPY, snappy_block_fault)}
_LZ4_OFFSET_ZERO = next(code for code, text in BLOCK_FAULTS.items() if text == "a match has offset 0")


def _walk(fmt: str, block: bytes, size: int) -> int:
    return int(_WALKS[fmt][1](np.frombuffer(block, np.uint8), 0, len(block), size))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("length", [0, 1, 2, 5, 12, 13, 17, 40, 1000, 70000, 300000])
def test_the_walk_accepts_every_block_the_library_writes(fmt, length):
    rng = np.random.default_rng(length)
    for data in (rng.integers(0, 4, length).astype(np.uint8).tobytes(), rng.bytes(length), bytes(length)):
        block = compress(fmt, data)
        assert library_reads(fmt, block, len(data))
        assert _walk(fmt, block, len(data)) == BLOCK_OK


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_walk_refuses_every_block_the_library_refuses_and_more_only_for_lz4_offset_zero(fmt):
    agree = refused = 0
    for block, size in mutants(fmt, 4000):
        fault, reads = _walk(fmt, block, size), library_reads(fmt, block, size)
        if reads:
            # The LZ4 format calls offset 0 invalid; the LZ4 library copies zeros.
            allowed = (BLOCK_OK, _LZ4_OFFSET_ZERO) if fmt == "lz4" else (BLOCK_OK,)
            assert fault in allowed, (block.hex(), size, BLOCK_FAULTS.get(fault))
        else:
            assert fault != BLOCK_OK, (block.hex(), size)
            refused += 1
        agree += (fault == BLOCK_OK) == reads
    assert refused > 1000 and agree > 3900  # the mutants are mostly refused; the verdicts almost all agree


def test_a_reference_before_the_start_is_named_in_each_format():
    # LZ4: 14 literals, a match of offset 20 (only 14 bytes produced) and length 4, then 10 last literals.
    lz4 = bytes([0xE0]) + b"abcdefghijklmn" + bytes([20, 0]) + bytes([0xA0]) + b"0123456789"
    assert library_reads("lz4", lz4.replace(bytes([20, 0]), bytes([10, 0])), 28)  # offset 10: valid
    assert not library_reads("lz4", lz4, 28)
    assert BLOCK_FAULTS[_walk("lz4", lz4, 28)] == "a match reaches back before the block's start"
    # Snappy: length 9, a literal of 5, a 2-byte-offset copy of 4 from offset 6.
    snappy = bytes([9, 4 << 2]) + b"abcde" + bytes([(3 << 2) | 2, 6, 0])
    assert library_reads("snappy", snappy.replace(bytes([6, 0]), bytes([5, 0])), 9)  # offset 5: valid
    assert not library_reads("snappy", snappy, 9)
    fault = _walk("snappy", snappy, 9)
    assert BLOCK_FAULTS[fault] == "a copy reaches back before the block's start"
    assert "a copy reaches back before the block's start" in NvcompLauncher.status_text(BLOCK_STATUS - fault)
    assert NvcompLauncher.status_text(12).startswith("nvcompErrorCannotDecompress")


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_kernel_gives_the_host_walks_verdicts_and_swaps_faulty_blocks_for_the_empty_one(fmt):
    cases = [(compress(fmt, d), len(d)) for d in datas()] + list(mutants(fmt, 120, seed=3))
    arena = np.concatenate([np.frombuffer(b, np.uint8) for b, _ in cases])
    offsets = np.cumsum([0] + [len(b) for b, _ in cases[:-1]]).astype(np.uint64)
    base, empty = 1 << 40, 12345
    ptrs = offsets + np.uint64(base)
    sizes = np.array([len(b) for b, _ in cases], np.uint64)
    caps = np.array([s for _, s in cases], np.uint64)
    d_ptrs, d_sizes = cuda.to_device(ptrs), cuda.to_device(sizes)
    d_fault = cuda.to_device(np.full(len(cases), -1, np.int32))
    check_blocks(_WALKS[fmt][0], cuda.to_device(arena), base, d_ptrs, d_sizes, cuda.to_device(caps), d_fault, empty)
    fault = d_fault.copy_to_host()
    want = np.array([_walk(fmt, b, s) for b, s in cases], np.int32)
    assert (fault == want).all()
    bad = fault != BLOCK_OK
    assert bad.sum() > 50 and (~bad).sum() >= 5
    got_ptrs, got_sizes = d_ptrs.copy_to_host(), d_sizes.copy_to_host()
    assert (got_ptrs[bad] == empty).all() and (got_sizes[bad] == 1).all()
    assert (got_ptrs[~bad] == ptrs[~bad]).all() and (got_sizes[~bad] == sizes[~bad]).all()
    assert _walk(fmt, b"\x00", 0) == BLOCK_OK  # the empty block the faulty ones become decodes to nothing
