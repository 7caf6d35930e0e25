"""The LZ4 block walk that runs before nvCOMP, against the LZ4 library.

The host walk (:func:`~dask_hwdecomp.gpu.lz4_check.lz4_block_fault`) is held
to the LZ4 library's verdict (``LZ4_decompress_safe`` through cramjam, to
exactly the declared size, as Parquet reads a page) on every block it
writes and on mutated ones; the device kernel is held to the host walk. The
kernel runs on a GPU where there is one, else under numba's CUDA simulator
(``conftest`` chooses).
"""

from __future__ import annotations

import numpy as np
import pytest
from lz4_cases import compress, datas, library_reads, mutants

from dask_hwdecomp.gpu.cuda_jit import cuda
from dask_hwdecomp.gpu.lz4_check import LZ4_FAULTS, LZ4_OK, LZ4_STATUS, check_blocks, lz4_block_fault
from dask_hwdecomp.gpu.nvcomp_launcher import NvcompLauncher

_OFFSET_ZERO = next(code for code, text in LZ4_FAULTS.items() if "offset 0" in text)


def _walk(block: bytes, size: int) -> int:
    return int(lz4_block_fault(np.frombuffer(block, np.uint8), 0, len(block), size))


@pytest.mark.parametrize("length", [1, 2, 5, 12, 13, 17, 40, 1000, 70000, 300000])
def test_the_walk_accepts_every_block_the_library_writes(length):
    rng = np.random.default_rng(length)
    for data in (rng.integers(0, 4, length).astype(np.uint8).tobytes(), rng.bytes(length), bytes(length)):
        block = compress(data)
        assert library_reads(block, len(data))
        assert _walk(block, len(data)) == LZ4_OK


def test_the_walk_refuses_every_block_the_library_refuses_and_more_only_for_offset_zero():
    agree = refused = 0
    for block, size in mutants(4000):
        fault, reads = _walk(block, size), library_reads(block, size)
        if reads:
            # The format calls offset 0 invalid; the library copies zeros.
            assert fault in (LZ4_OK, _OFFSET_ZERO), (block.hex(), size, LZ4_FAULTS.get(fault))
        else:
            assert fault != LZ4_OK, (block.hex(), size)
            refused += 1
        agree += (fault == LZ4_OK) == reads
    assert refused > 1000 and agree > 3900  # the mutants are mostly refused; the verdicts almost all agree


def test_a_match_reaching_before_the_start_is_named():
    # 14 literals, a match of offset 20 (only 14 bytes produced) and length 4, then 10 last literals.
    block = bytes([0xE0]) + b"abcdefghijklmn" + bytes([20, 0]) + bytes([0xA0]) + b"0123456789"
    assert library_reads(block.replace(bytes([20, 0]), bytes([10, 0])), 28)  # the same with offset 10 is valid
    assert not library_reads(block, 28)
    assert LZ4_FAULTS[_walk(block, 28)] == "a match reaches back before the block's start"
    assert "reaches back before the block's start" in NvcompLauncher.status_text(LZ4_STATUS - _walk(block, 28))
    assert NvcompLauncher.status_text(12).startswith("nvcompErrorCannotDecompress")


def test_the_kernel_gives_the_host_walks_verdicts_and_swaps_faulty_blocks_for_the_empty_one():
    cases = [(compress(d), len(d)) for d in datas()] + list(mutants(120, seed=3))
    arena = np.concatenate([np.frombuffer(b, np.uint8) for b, _ in cases])
    offsets = np.cumsum([0] + [len(b) for b, _ in cases[:-1]]).astype(np.uint64)
    base, empty = 1 << 40, 12345
    ptrs = offsets + np.uint64(base)
    sizes = np.array([len(b) for b, _ in cases], np.uint64)
    caps = np.array([s for _, s in cases], np.uint64)
    d_ptrs, d_sizes = cuda.to_device(ptrs), cuda.to_device(sizes)
    d_fault = cuda.to_device(np.full(len(cases), -1, np.int32))
    check_blocks(cuda.to_device(arena), base, d_ptrs, d_sizes, cuda.to_device(caps), d_fault, empty)
    fault = d_fault.copy_to_host()
    want = np.array([_walk(b, s) for b, s in cases], np.int32)
    assert (fault == want).all()
    bad = fault != LZ4_OK
    assert bad.sum() > 50 and (~bad).sum() >= 5
    got_ptrs, got_sizes = d_ptrs.copy_to_host(), d_sizes.copy_to_host()
    assert (got_ptrs[bad] == empty).all() and (got_sizes[bad] == 1).all()
    assert (got_ptrs[~bad] == ptrs[~bad]).all() and (got_sizes[~bad] == sizes[~bad]).all()
    assert _walk(b"\x00", 0) == LZ4_OK  # the empty block the faulty ones become decodes to nothing
