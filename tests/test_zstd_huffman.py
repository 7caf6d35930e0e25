"""The Zstd Huffman tree check (``format/zstd_huffman.py``) accepts and refuses what libzstd does.

libzstd here is pyarrow's and cramjam's: every tree description they
write must pass, and of frames whose tree description is damaged, every
one libzstd still decodes must pass the host checks, and most it refuses
must be refused there. Held to libzstd's own ``HUF_readStats`` at scale by
``benchmarks/results/2026-12-07-no-device-zstd-tree/tree_fuzz.py``.
"""

from __future__ import annotations

import random

import cramjam
import numpy as np
import pyarrow as pa
import pytest

from dask_hwdecomp.decompress.table_checks import find_suspects
from dask_hwdecomp.format.zstd_huffman import huffman_tree
from dask_hwdecomp.jobs import Algo, Job, JobTable

ALL = frozenset(Algo)


def _datas() -> list[bytes]:
    rng = np.random.default_rng(7)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"epsilon", b"zeta", b"eta", b"theta"]
    return [
        b" ".join(str(x).encode() for x in rng.integers(0, 10 ** 6, 8000)),  # text of digits
        b" ".join(rng.choice(words, 6000)),  # words
        rng.integers(0, 1 << 20, 10000).astype(np.int32).tobytes(),  # ints
        rng.integers(0, 256, 20000).astype(np.uint8).tobytes(),  # random
        bytes(rng.geometric(0.4, 30000).clip(0, 255).astype(np.uint8)),  # low entropy
        bytes(rng.choice(np.arange(97, 101), 20000, p=[0.7, 0.1, 0.1, 0.1]).astype(np.uint8)),  # 4 letters
        rng.integers(0, 40, 60000).astype(np.uint8).tobytes(),  # 40 symbols
    ]


def _frames() -> list[tuple[bytes, int]]:
    """Frames libzstd writes (pyarrow and cramjam, several levels), each with its content size."""
    out = []
    for d in _datas():
        for level in (-1, 1, 3, 9, 19):
            out.append((pa.Codec("zstd", compression_level=level).compress(d).to_pybytes(), len(d)))
        for level in (2, 6):
            out.append((bytes(cramjam.zstd.compress(d, level=level)), len(d)))
    return out


def _trees(frame: bytes):
    """(description start, compressed literals end) of each compressed block with a Huffman tree description."""
    fhd = frame[4]
    single = (fhd >> 5) & 1
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + ((1 if single else 0), 2, 4, 8)[fhd >> 6]
    while True:
        bh = int.from_bytes(frame[pos:pos + 3], "little")
        btype, bsize = (bh >> 1) & 3, bh >> 3
        p = pos + 3
        if btype == 2 and frame[p] & 3 == 2:
            lhl = (frame[p] >> 2) & 3
            lhc = int.from_bytes(frame[p:p + 5], "little")
            lh, litc = ((3, (lhc >> 14) & 0x3FF), (3, (lhc >> 14) & 0x3FF), (4, (lhc >> 18) & 0x3FFF),
                        (5, (lhc >> 22) & 0x3FFFF))[lhl]
            yield p + lh, p + lh + litc
        pos = p + (1 if btype == 1 else bsize)
        if bh & 1:
            return


def _suspects(frames: list[tuple[bytes, int]]) -> set[int]:
    """The frames the table-wide host check refuses (one Zstd job each)."""
    src = bytearray()
    jobs = []
    dst = 0
    for frame, size in frames:
        jobs.append(Job(Algo.ZSTD, len(src), len(frame), dst, size, 0, None))
        src += frame
        dst += size
    found = find_suspects(JobTable.from_jobs(jobs), memoryview(bytes(src)), len(src), dst, 1 << 30, ALL)
    return set(found.rows.tolist())


def _libzstd_decodes(frame: bytes, size: int) -> bool:
    try:
        pa.Codec("zstd").decompress(frame, decompressed_size=size)
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def frames():
    return _frames()


def test_every_tree_libzstd_writes_passes(frames):
    weights = np.zeros(256, np.uint8)
    kinds = {"fse": 0, "direct": 0}
    for frame, _ in frames:
        src = np.frombuffer(frame, np.uint8)
        for start, end in _trees(frame):
            head = frame[start]
            size, symbols, table_log = huffman_tree(src, start, end, weights)
            assert size == 1 + (head if head < 128 else (head - 127 + 1) // 2)
            assert 2 <= symbols <= 256 and 1 <= table_log <= 12
            assert weights[symbols - 1] > 0 and not weights[symbols:].any()
            lengths = [table_log + 1 - int(w) for w in weights[:symbols] if w]
            assert sum(2.0 ** -n for n in lengths) == 1.0  # a complete prefix code
            kinds["fse" if head < 128 else "direct"] += 1
    assert kinds["fse"] >= 20 and kinds["direct"] >= 3, kinds
    assert _suspects(frames) == set()


def _flip_tree(rng: random.Random, frame: bytes) -> bytes | None:
    """The frame with 1 to 3 bits flipped in one tree description, after its header byte (so its size stays)."""
    trees = list(_trees(frame))
    if not trees:
        return None
    start, _ = rng.choice(trees)
    head = frame[start]
    size = 1 + (head if head < 128 else (head - 127 + 1) // 2)
    if size < 2:
        return None
    b = bytearray(frame)
    for _ in range(rng.randint(1, 3)):
        b[rng.randrange(start + 1, start + size)] ^= 1 << rng.randrange(8)
    return bytes(b)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_damaged_trees_are_refused_where_libzstd_refuses_them(frames, seed):
    rng = random.Random(seed)
    with_trees = [(f, n) for f, n in frames if any(True for _ in _trees(f)) and n <= 40000]
    cases, sources = [], []
    while len(cases) < 1200:
        frame, size = rng.choice(with_trees)
        mutated = _flip_tree(rng, frame)
        if mutated is not None:
            cases.append((mutated, size))
            sources.append((frame, size))
    refused = _suspects(cases)
    decodes = [_libzstd_decodes(f, n) for f, n in cases]
    # The check before the tree was read read only the description's header byte, left as it was, and
    # nothing else of it: its verdict on each case is its verdict on the frame the case came from, and
    # those all pass.
    assert _suspects(sources) == set()
    libzstd_refuses = [k for k, ok in enumerate(decodes) if not ok]
    assert len(libzstd_refuses) > 300
    assert not [k for k, ok in enumerate(decodes) if ok and k in refused]  # what libzstd decodes passes
    share = sum(k in refused for k in libzstd_refuses) / len(libzstd_refuses)
    print(f"seed {seed}: libzstd refuses {len(libzstd_refuses)} of {len(cases)}, the check {share:.1%} of them")
    assert share >= 0.75


def _direct(weights: list[int]) -> np.ndarray:
    """A direct (4-bit) tree description of ``weights`` (the last symbol's implied)."""
    nib = weights + [0] * (len(weights) & 1)
    return np.frombuffer(bytes([127 + len(weights)]) + bytes((nib[i] << 4) | nib[i + 1]
                                                              for i in range(0, len(nib), 2)), np.uint8)


@pytest.mark.parametrize("weights, want", [
    ([1], ([1, 1], 2, 1)),  # two codes of 1 bit
    ([3, 2, 1], ([3, 2, 1, 1], 4, 3)),  # 1, 2, 3 and 3 bits
    ([0, 2, 0, 0, 1], ([0, 2, 0, 0, 1, 1], 6, 2)),  # symbols without a code between
])
def test_direct_trees_give_their_weights(weights, want):
    out = np.full(256, 9, np.uint8)
    src = _direct(weights)
    size, symbols, table_log = huffman_tree(src, 0, len(src), out)
    assert size == len(src)
    assert (out[:symbols].tolist(), symbols, table_log) == want
    assert not out[symbols:].any()


@pytest.mark.parametrize("weights, why", [
    ([2, 1, 1, 1], "total 5: the remainder to 8 is 3, not a power of two"),
    ([13, 1], "a weight over 12"),
    ([0, 0, 0], "zero total"),
    ([12, 12], "total 4096 needs a table log of 13"),
    ([2, 2], "no code of the longest length (the last weight is 3)"),
    ([1, 1, 1, 1, 2, 2, 3, 1], "five of weight 1, total 13: remainder 3"),
])
def test_bad_direct_trees_are_refused(weights, why):
    # An odd number of weight-1 codes cannot be written: with one, the total is odd, so the remainder is 1
    # and the implied weight is 1 too; rank 1 < 2 is what that check of libzstd's refuses.
    src = _direct(weights)
    assert huffman_tree(src, 0, len(src), np.zeros(256, np.uint8))[0] == -1, why


def test_a_tree_past_its_end_or_an_accuracy_log_over_6_is_refused():
    w = np.zeros(256, np.uint8)
    src = _direct([3, 2, 1])
    assert huffman_tree(src, 0, len(src), w)[0] == len(src)
    assert huffman_tree(src, 0, len(src) - 1, w)[0] == -1
    # FSE-coded weights whose table claims accuracy log 7 (low nibble 2: 5 + 2)
    fse = np.frombuffer(bytes([9, 0x02, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x81]), np.uint8)
    assert huffman_tree(fse, 0, len(fse), w)[0] == -1


def test_case_658s_page_is_refused_before_any_gpu_call(tmp_path):
    """Mutation case 658 (flip_body on zstd-v1-dict): its tree's weights total 608, remainder 416."""
    import io

    import pyarrow.parquet as pq
    from mutation_seeds import mutant_of, seed_maps

    maps = seed_maps(tmp_path)
    label, data = mutant_of(maps, "zstd-v1-dict.parquet", "flip_body", 658)
    with pytest.raises(OSError, match="Data corruption"):
        pq.read_table(io.BytesIO(data))
    seed = next(fm for p, fm in maps if p.name == "zstd-v1-dict.parquet")
    assert len(data) == len(seed.data)
    pages = [(data[pg.body_start:pg.body_end], seed.data[pg.body_start:pg.body_end]) for pg in seed.pages]
    sizes = [len(cramjam.zstd.decompress(orig)) for _, orig in pages]
    changed = [k for k, (body, orig) in enumerate(pages) if body != orig]
    assert changed == [2], label
    assert _suspects([(orig, n) for (_, orig), n in zip(pages, sizes)]) == set()
    assert _suspects([(body, n) for (body, _), n in zip(pages, sizes)]) == {2}
