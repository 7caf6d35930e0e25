"""Pages the GPU service keeps on the device for its decoder: the upload split, the store, the runner's copies.

The stream runner's copies run in the real hardware backend over the
engine stand-in (``standin_hwengine``: its "device" memory is host memory),
so a kept block here is a NumPy array and its address a host address. The
decode of kept pages through the service is tested end to end in
``test_decode_gpu_read.py`` (simulator) and ``tests/gpu`` (the GPU).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from dask_hwdecomp.decompress.gpu_backend import _check_zstd_contents
from dask_hwdecomp.decompress.hardware import create_with
from dask_hwdecomp.decompress.validate import zstd_frames
from dask_hwdecomp.errors import CorruptPageError, PageLocation
from dask_hwdecomp.format.xxh64 import xxh64
from dask_hwdecomp.gpudecode.uploads import KeptPages, pack_patches, plan_uploads
from dask_hwdecomp.jobs import Algo, Job
from dask_hwdecomp.options import Options
from dask_hwdecomp.service.kept import KeptStore, RunKeeper

from pagegen import make_batch
from standin_hwengine import StandinHwEngine

GARBAGE = 0xAB


def _fill(uploads, host: np.ndarray, blocks: list[np.ndarray], nbytes: int) -> np.ndarray:
    """``data`` as the decoder fills it: device copies, large host pieces, then the packed patches."""
    data = np.full(nbytes, 0xEE, np.uint8)
    for k, rows in uploads.device:
        for bo, do, n in rows.tolist():
            data[do : do + n] = blocks[k][bo : bo + n]
    for so, n, do in uploads.host.tolist():
        data[do : do + n] = host[so : so + n]
    pack, where = pack_patches(host, uploads.patches)
    for po, do, n in where.tolist():
        data[do : do + n] = pack[po : po + n]
    return data


def _kept_layout(rng, n_outputs: int = 80, max_gap: int = 48):
    """A buffer of outputs between "headers", its outputs kept in blocks with garbage between them.

    Returns the host bytes, the kept pages, their blocks, and every output.
    """
    outputs, pos = [], 0
    for _ in range(n_outputs):
        pos += int(rng.integers(1, 200))  # a header
        size = int(rng.integers(1, 5000))
        outputs.append((pos, size))
        pos += size
    host = rng.integers(0, 256, pos + 100, dtype=np.uint8)
    # Three parts: two kept, the last done elsewhere (the CPU), so uploaded.
    third = n_outputs // 3
    kept, blocks = [], []
    for part in (outputs[:third], outputs[third : 2 * third]):
        spans, block, run = [], [], [part[0]]
        for o in part[1:]:  # a span joins outputs whose gap is small, as the copies back do
            if o[0] - (run[-1][0] + run[-1][1]) <= max_gap:
                run.append(o)
            else:
                spans.append(run)
                run = [o]
        spans.append(run)
        rows, at = [], 0
        for run in spans:
            lo, hi = run[0][0], run[-1][0] + run[-1][1]
            piece = np.full(hi - lo, GARBAGE, np.uint8)  # the bytes between outputs: not written yet
            for s, n in run:
                piece[s - lo : s - lo + n] = host[s : s + n]
            block.append(piece)
            rows.append((lo, hi - lo, at))
            at += hi - lo
        blocks.append(np.concatenate(block))
        kept.append(KeptPages(blocks[-1], np.array(rows, np.int64), np.array(part, np.int64)))
    return host, kept, blocks, outputs


def _ranges(rng, nbytes: int, count: int) -> np.ndarray:
    cuts = np.sort(rng.choice(nbytes, 2 * count, replace=False))
    spans = cuts.reshape(-1, 2)
    sizes = spans[:, 1] - spans[:, 0]
    return np.stack([spans[:, 0], sizes, np.concatenate([[0], np.cumsum(sizes)[:-1]])], axis=1).astype(np.int64)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("patch_bytes", [1, 64, 1 << 16])
def test_uploads_from_kept_pages_fill_data_exactly_as_the_host(seed, patch_bytes):
    rng = np.random.default_rng(seed)
    host, kept, blocks, _ = _kept_layout(rng)
    ranges = _ranges(rng, len(host), count=int(rng.integers(1, 8)))
    expected = np.concatenate([host[so : so + n] for so, n, _ in ranges.tolist()])
    up = plan_uploads(ranges, kept, patch_bytes=patch_bytes)
    assert np.array_equal(_fill(up, host, blocks, len(expected)), expected)
    # Kept outputs are copied on the device, not uploaded.
    uploaded = int(up.host[:, 1].sum() + up.patches[:, 1].sum())
    assert uploaded < len(expected) or not up.device


def test_consecutive_outputs_of_a_span_go_in_one_copy():
    rng = np.random.default_rng(3)
    host, kept, blocks, outputs = _kept_layout(rng, max_gap=10**9)  # one span a part
    ranges = np.array([[0, len(host), 0]], np.int64)
    up = plan_uploads(ranges, kept)
    assert [len(rows) for _, rows in up.device] == [1, 1]
    # from the host: the header before each kept output, and the third part with the tail in one piece
    assert len(up.host) + len(up.patches) == 2 * (len(outputs) // 3) + 1
    assert np.array_equal(_fill(up, host, blocks, len(host)), host)


def test_without_kept_pages_everything_is_uploaded():
    ranges = np.array([[10, 5, 0], [100, 1 << 17, 5]], np.int64)
    up = plan_uploads(ranges, [])
    assert not up.device
    assert up.host.tolist() == [[100, 1 << 17, 5]] and up.patches.tolist() == [[10, 5, 0]]


def test_contradicting_kept_pages_are_refused():
    block = np.zeros(100, np.uint8)
    a = KeptPages(block, np.array([[0, 100, 0]], np.int64), np.array([[0, 60]], np.int64))
    b = KeptPages(block, np.array([[50, 50, 0]], np.int64), np.array([[50, 50]], np.int64))
    with pytest.raises(ValueError, match="overlap"):
        plan_uploads(np.array([[0, 100, 0]], np.int64), [a, b])
    outside = KeptPages(block, np.array([[0, 10, 0]], np.int64), np.array([[5, 10]], np.int64))
    with pytest.raises(ValueError, match="outside"):
        plan_uploads(np.array([[0, 100, 0]], np.int64), [outside])


def _pages(nbytes: int) -> KeptPages:
    return KeptPages(np.zeros(nbytes, np.uint8), np.array([[0, nbytes, 0]], np.int64),
                     np.array([[0, nbytes]], np.int64))


def test_the_store_lends_under_its_cap_and_tokens_serve_only_their_owner_and_range():
    store = KeptStore(cap_bytes=1000)
    me, other = object(), object()
    assert store.admit(600) and not store.admit(600) and store.admit(400)
    assert store.stats()["kept_refused_bytes"] == 600
    first = store.put(me, segment=7, offset=100, pages=[_pages(600)])
    second = store.put(me, segment=7, offset=2000, pages=[_pages(400)])
    # Another connection cannot take or drop them: a measure naming a token
    # it does not hold for its range is refused, and takes nothing (a run
    # may have left bytes only on the device, which the host lacks).
    with pytest.raises(KeyError, match="does not hold"):
        store.take(other, [first, second], 7, 0, 10_000)
    store.drop(other, [first])
    # Nor a measure over another segment, or a range that does not hold them.
    with pytest.raises(KeyError):
        store.take(me, [second], 8, 0, 10_000)
    with pytest.raises(KeyError):
        store.take(me, [first, second], 7, 50, 1000)
    assert store.stats()["kept_bytes"] == 1000 and store.stats()["kept_waiting"] == 2
    (got,) = store.take(me, [first], 7, 50, 1000)
    assert got.spans.tolist() == [[50, 600, 0]] and got.outputs.tolist() == [[50, 600]]
    with pytest.raises(KeyError):
        store.take(me, [first], 7, 50, 1000)  # a token serves one decode
    store.release([got])
    store.drop(me, [second])
    stats = store.stats()
    assert (stats["kept_bytes"], stats["kept_used"], stats["kept_dropped"], stats["kept_waiting"]) == (0, 1, 1, 0)
    third = store.put(me, 7, 0, [])
    store.drop(me)
    assert store.stats()["kept_waiting"] == 0
    with pytest.raises(KeyError):
        store.take(me, [third], 7, 0, 10)


def test_a_block_the_device_cannot_allocate_is_given_back_and_counted():
    store = KeptStore(cap_bytes=1000)

    def no_memory(nbytes):
        raise MemoryError(f"out of device memory for {nbytes} bytes")

    keeper = RunKeeper(store, no_memory)
    assert keeper.reserve(600) is None
    stats = store.stats()
    assert (stats["kept_bytes"], stats["kept_alloc_failures"], stats["kept_refused_bytes"]) == (0, 1, 0)
    assert store.admit(1000)  # the failed block's bytes are free again


def test_the_runner_keeps_every_part_whose_jobs_all_succeed():
    store = KeptStore()
    keeper = RunKeeper(store, lambda n: np.zeros(n, np.uint8))
    backend = create_with(StandinHwEngine(mask=7, max_length=4 << 20), Options(batch_bytes=1 << 20))
    try:
        jobs, src, dst_len, expected = make_batch([Algo.SNAPPY, Algo.LZ4], [300_000] * 8, seed=4)
        with backend.host_buffer(len(src)) as s, backend.host_buffer(dst_len) as d:
            s.view[:] = src
            backend.decompress(jobs, s.view, d.view, keep=keeper)
            out = np.frombuffer(bytes(d.view), np.uint8)
    finally:
        backend.close()
    assert len(keeper.pages) >= 2  # one a part: the budget cut the batch
    covered = []
    for pages in keeper.pages:
        for start, n in pages.outputs.tolist():
            s = pages.spans[(pages.spans[:, 0] <= start) & (start < pages.spans[:, 0] + pages.spans[:, 1])][0]
            at = s[2] + start - s[0]
            assert np.array_equal(pages.array[at : at + n], out[start : start + n])
            covered.append((start, n))
    assert sorted(covered) == sorted((j.dst_offset, j.dst_size) for j in jobs)
    assert store.stats()["kept_bytes"] == sum(p.nbytes for p in keeper.pages)
    keeper.release_all()
    assert store.stats()["kept_bytes"] == 0


def test_a_part_with_a_failed_job_is_not_kept():
    store = KeptStore()
    keeper = RunKeeper(store, lambda n: np.zeros(n, np.uint8))
    backend = create_with(StandinHwEngine(mask=7, max_length=4 << 20), Options(batch_bytes=1 << 20))
    try:
        jobs, src, dst_len, _ = make_batch([Algo.SNAPPY], [300_000] * 8, seed=5)
        bad = jobs[5]
        src = bytearray(src)
        src[bad.src_offset + bad.preamble : bad.src_offset + bad.src_size] = bytes([0xFF]) * (bad.src_size - bad.preamble)
        with backend.host_buffer(len(src)) as s, backend.host_buffer(dst_len) as d:
            s.view[:] = src
            with pytest.raises(CorruptPageError):
                backend.decompress(jobs, s.view, d.view, keep=keeper)
    finally:
        backend.close()
    kept = {(a, n) for p in keeper.pages for a, n in p.outputs.tolist()}
    assert kept and (bad.dst_offset, bad.dst_size) not in kept
    assert len(kept) < len(jobs)
    keeper.release_all()  # what the service does with a run that failed
    assert store.stats()["kept_bytes"] == 0


def _frame_without_size(content: bytes) -> bytes:
    """``content`` as a Zstd frame of raw blocks that does not declare its size (64 KiB window), checksummed."""
    parts = [struct.pack("<IBB", 0xFD2FB528, 0x04, 6 << 3)]
    for pos in range(0, len(content), 1 << 16):
        size = min(1 << 16, len(content) - pos)
        parts.append(struct.pack("<I", (size << 3) | (pos + size >= len(content)))[:3])
        parts.append(content[pos : pos + size])
    parts.append(struct.pack("<I", xxh64(content) & 0xFFFFFFFF))
    return b"".join(parts)


def test_a_page_decoded_again_on_the_cpu_after_the_call_is_read_from_the_host():
    # Two frames of undeclared sizes: the content check decodes the page
    # again with libzstd, into the host output. The device's copy (here
    # wrong bytes of the right size, what that check exists to catch) must
    # not be decoded.
    a, b = bytes(range(200)) * 30, b"xyz" * 999
    page = _frame_without_size(a) + _frame_without_size(b)
    n = len(a) + len(b)
    job = Job(Algo.ZSTD, 0, len(page), 0, n, 6, PageLocation("f", 0, "c", 0))
    frames: list = []
    zstd_frames(page, job, frames)
    assert [size for size, _ in frames] == [-1, -1]
    store = KeptStore()
    keeper = RunKeeper(store, lambda nbytes: np.zeros(nbytes, np.uint8))
    block = keeper.reserve(n)
    keeper.keep(block, np.array([[0, n, 0]], np.int64), np.array([[0, n]], np.int64))
    dst = bytearray(n)
    _check_zstd_contents([(job, frames)], memoryview(page), memoryview(dst), "test", keeper)
    assert bytes(dst) == a + b
    (pages,) = keeper.pages
    assert pages.outputs.shape == (0, 2)
    up = plan_uploads(np.array([[0, n, 0]], np.int64), keeper.pages)
    assert not up.device and up.host.tolist() + up.patches.tolist() == [[0, n, 0]]
    # A page whose frames declare their sizes is checked in place, and stays kept.
    keeper = RunKeeper(store, lambda nbytes: np.zeros(nbytes, np.uint8))
    keeper.keep(keeper.reserve(n), np.array([[0, n, 0]], np.int64), np.array([[0, n]], np.int64))
    one = _frame_without_size(a + b)
    job = Job(Algo.ZSTD, 0, len(one), 0, n, 6, PageLocation("f", 0, "c", 1))
    frames = []
    zstd_frames(one, job, frames)
    _check_zstd_contents([(job, frames)], memoryview(one), memoryview(a + b), "test", keeper)
    assert keeper.pages[0].outputs.tolist() == [[0, n]]
