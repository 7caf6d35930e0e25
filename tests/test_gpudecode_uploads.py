"""A decode's bytes from kept pages and the host: the vectorised split against its old loop, and the gather.

``plan_uploads`` once cut its ranges in a Python loop a range; the loop is
kept here (``_reference_plan_uploads``) as the reference the vectorised one
must equal row for row. The gather kernel runs for real: on the GPU where
there is one, else under numba's CUDA simulator (``conftest`` chooses).
"""

from __future__ import annotations

import numpy as np
import pytest

from dask_hwdecomp.gpu.cuda_jit import cuda
from dask_hwdecomp.gpudecode.gather import TILE_BYTES, copy_pieces
from dask_hwdecomp.gpudecode.gather_tiles import count_tiles, write_tiles
from dask_hwdecomp.gpudecode.uploads import (
    KeptPages,
    Uploads,
    _outputs,
    _split,
    device_address,
    pack_patches,
    plan_uploads,
)


def _reference_plan_uploads(ranges, kept, patch_bytes):
    """plan_uploads as it was: one loop iteration a range, one a group of hits (device, host, patches)."""
    ranges = np.asarray(ranges, dtype=np.int64).reshape(-1, 3)
    ranges = ranges[ranges[:, 1] > 0]
    if not kept:
        return Uploads([], *_split(ranges, patch_bytes))
    table = _outputs(kept)
    device: dict[int, list] = {}
    host: list[tuple[int, int, int]] = []
    for so, n, do in ranges.tolist():
        end = so + n
        lo = int(np.searchsorted(table[:, 1], so, side="right"))
        hi = int(np.searchsorted(table[:, 0], end, side="left"))
        hits = table[lo:hi]
        starts = np.maximum(hits[:, 0], so)
        ends = np.minimum(hits[:, 1], end)
        cuts = np.concatenate([[so], ends])
        nexts = np.concatenate([starts, [end]])
        gap = nexts > cuts
        host.extend((int(a), int(b - a), int(do + a - so)) for a, b in zip(cuts[gap], nexts[gap]))
        if not len(hits):
            continue
        boff = hits[:, 4] + (starts - hits[:, 0])
        new = np.ones(len(hits), bool)
        new[1:] = hits[1:, 3] != hits[:-1, 3]
        heads = np.flatnonzero(new)
        tails = np.concatenate([heads[1:], [len(hits)]]) - 1
        for h, t in zip(heads.tolist(), tails.tolist()):
            device.setdefault(int(hits[h, 2]), []).append((int(boff[h]), int(do + starts[h] - so),
                                                           int(ends[t] - starts[h])))
    host_rows = np.array(host, dtype=np.int64).reshape(-1, 3)
    big, small = _split(host_rows, patch_bytes)
    return Uploads([(k, np.array(rows, dtype=np.int64)) for k, rows in sorted(device.items())], big, small)


def _layout(rng, n_outputs: int, blocks: int):
    """Host bytes, kept blocks and their arrays.

    Outputs are dealt to blocks at random (some to none: not kept); a block's
    spans join nearby outputs, with garbage between them.
    """
    gaps = rng.integers(0, 120, n_outputs)
    sizes = rng.integers(0, 3000, n_outputs)  # some outputs of no bytes
    starts = np.cumsum(gaps) + np.concatenate([[0], np.cumsum(sizes)[:-1]])
    host = rng.integers(0, 256, int(starts[-1] + sizes[-1] + 200), dtype=np.uint8)
    owner = rng.integers(-1, blocks, n_outputs)  # -1: not kept (another backend, the CPU)
    kept, arrays = [], []
    for k in range(blocks):
        mine = np.flatnonzero(owner == k)
        if not len(mine):
            kept.append(KeptPages(np.zeros(1, np.uint8), np.zeros((0, 3), np.int64),
                                  np.zeros((0, 2), np.int64)))
            arrays.append(np.zeros(1, np.uint8))
            continue
        out = np.stack([starts[mine], sizes[mine]], axis=1).astype(np.int64)
        ends = out[:, 0] + out[:, 1]
        new = np.ones(len(out), bool)
        new[1:] = out[1:, 0] - ends[:-1] > int(rng.integers(0, 400))
        heads = np.flatnonzero(new)
        tails = np.append(heads[1:], len(out)) - 1
        lo, hi = out[heads, 0], ends[tails]
        order = rng.permutation(len(lo))  # spans apart in the block, in shuffled order
        room = (hi - lo + 5)[order]
        at = np.empty(len(lo), np.int64)
        at[order] = np.cumsum(room) - room
        block = np.full(int((hi - lo + 5).sum()), 0xAB, np.uint8)
        for s, n in out.tolist():
            span = np.searchsorted(lo, s, side="right") - 1
            block[at[span] + s - lo[span] : at[span] + s - lo[span] + n] = host[s : s + n]
        spans = np.stack([lo, hi - lo, at], axis=1).astype(np.int64)[order]
        kept.append(KeptPages(block, spans, out[rng.permutation(len(out))]))
        arrays.append(block)
    return host, kept, arrays


def _ranges(rng, nbytes: int, count: int) -> np.ndarray:
    cuts = np.sort(rng.choice(nbytes, 2 * count, replace=False))
    spans = cuts.reshape(-1, 2)
    sizes = spans[:, 1] - spans[:, 0]
    rows = np.stack([spans[:, 0], sizes, np.cumsum(sizes) - sizes], axis=1).astype(np.int64)
    return rows[rng.permutation(len(rows))]  # plans list ranges in any order of the buffer


def _same(a: Uploads, b: Uploads) -> None:
    assert [k for k, _ in a.device] == [k for k, _ in b.device]
    for (_, x), (_, y) in zip(a.device, b.device):
        assert x.dtype == y.dtype == np.int64 and x.tolist() == y.tolist()
    assert a.host.dtype == b.host.dtype and a.host.tolist() == b.host.tolist()
    assert a.patches.dtype == b.patches.dtype and a.patches.tolist() == b.patches.tolist()


@pytest.mark.parametrize("seed", range(12))
def test_vectorised_plan_uploads_equals_the_loop_it_replaced(seed):
    rng = np.random.default_rng(seed)
    host, kept, _ = _layout(rng, n_outputs=int(rng.integers(1, 400)), blocks=int(rng.integers(1, 5)))
    ranges = _ranges(rng, len(host), count=int(rng.integers(1, 60)))
    ranges[rng.random(len(ranges)) < 0.1, 1] = 0  # empty ranges are dropped
    for patch_bytes in (1, 300, 1 << 16):
        _same(plan_uploads(ranges, kept, patch_bytes), _reference_plan_uploads(ranges, kept, patch_bytes))
    _same(plan_uploads(ranges, []), _reference_plan_uploads(ranges, [], 1 << 16))


def test_ranges_that_no_kept_output_touches_come_from_the_host():
    block = np.zeros(100, np.uint8)
    kept = [KeptPages(block, np.array([[1000, 100, 0]], np.int64),
                      np.array([[1000, 60], [1070, 0]], np.int64)),
            KeptPages(block, np.zeros((0, 3), np.int64), np.zeros((0, 2), np.int64))]
    ranges = np.array([[0, 500, 0], [1060, 5, 500], [2000, 70_000, 505]], np.int64)
    up = plan_uploads(ranges, kept)
    _same(up, _reference_plan_uploads(ranges, kept, 1 << 16))
    assert not up.device and up.pieces.shape == (0, 4)
    assert up.host.tolist() == [[2000, 70_000, 505]] and up.patches.tolist() == [[0, 500, 0], [1060, 5, 500]]


def test_ranges_that_overlap_each_other_are_cut_each_on_its_own():
    rng = np.random.default_rng(99)
    host, kept, _ = _layout(rng, n_outputs=50, blocks=2)
    a = _ranges(rng, len(host), 10)
    b = _ranges(rng, len(host), 7)
    b[:, 2] += int(a[:, 1].sum())
    ranges = np.concatenate([a, b])
    _same(plan_uploads(ranges, kept, 64), _reference_plan_uploads(ranges, kept, 64))


def _fill(rows_in_order, nbytes: int) -> np.ndarray:
    data = np.full(nbytes, 0xEE, np.uint8)
    for dst, src in rows_in_order:
        data[dst : dst + len(src)] = src
    return data


@pytest.mark.parametrize("seed", range(6))
def test_the_exact_pieces_and_the_host_pieces_fill_data_in_any_order(seed):
    rng = np.random.default_rng(seed)
    host, kept, arrays = _layout(rng, n_outputs=200, blocks=3)
    ranges = _ranges(rng, len(host), count=int(rng.integers(1, 20)))
    expected = np.concatenate([host[so : so + n] for so, n, _ in sorted(ranges.tolist(), key=lambda r: r[2])])
    up = plan_uploads(ranges, kept, patch_bytes=100)
    writes = [(do, arrays[k][bo : bo + n]) for k, bo, do, n in up.pieces.tolist()]
    writes += [(do, host[so : so + n]) for so, n, do in np.concatenate([up.host, up.patches]).tolist()]
    # They tile ``data`` exactly: no byte twice, none missing.
    cover = np.zeros(len(expected), np.int64)
    for do, src in writes:
        cover[do : do + len(src)] += 1
    assert (cover == 1).all()
    for order in (range(len(writes)), reversed(range(len(writes))), rng.permutation(len(writes))):
        assert np.array_equal(_fill([writes[i] for i in order], len(expected)), expected)
    # the merged device rows copy the same outputs (and the bytes between them)
    assert up.pieces[:, 3].sum() <= up.device_bytes


def test_patches_pack_end_to_end_into_a_buffer_of_their_own_or_a_given_one():
    host = np.arange(100, dtype=np.uint8)
    patches = np.array([[10, 3, 500], [0, 0, 7], [90, 10, 0], [50, 1, 42]], np.int64)
    pack, rows = pack_patches(host, patches)
    assert pack.tolist() == [10, 11, 12, *range(90, 100), 50]
    assert rows.tolist() == [[0, 500, 3], [3, 7, 0], [3, 0, 10], [13, 42, 1]]
    out = np.zeros(20, np.uint8)
    pack, rows = pack_patches(host, patches, out, at=5)
    assert out[5:19].tolist() == [10, 11, 12, *range(90, 100), 50] and not out[:5].any() and not out[19:].any()
    assert rows[:, 0].tolist() == [5, 8, 8, 18] and len(pack) == 14
    with pytest.raises(ValueError, match="packed at 7 of 20"):
        pack_patches(host, patches, out, at=7)


def _reference_tiles(rows: np.ndarray, tile_bytes: int = TILE_BYTES) -> np.ndarray:
    """``rows`` (source, destination, bytes) cut into tiles in NumPy: rows of no bytes give none."""
    rows = rows[rows[:, 2] > 0]
    counts = -(-rows[:, 2] // tile_bytes)
    first = np.cumsum(counts) - counts
    row = np.repeat(np.arange(len(rows)), counts)
    skip = (np.arange(len(row)) - first[row]) * tile_bytes
    return np.stack([rows[row, 0] + skip, rows[row, 1] + skip, np.minimum(rows[row, 2] - skip, tile_bytes)],
                    axis=1).astype(np.int64)


def test_tiles_cover_each_row_in_order_and_none_is_longer_than_a_tile():
    rows = np.array([[1000, 7, 0], [5, 3, TILE_BYTES * 3 + 1], [9, 50, 0], [0, 2, TILE_BYTES]], np.int64)
    out = np.zeros(3 * 5, np.int64)
    base, span, count = write_tiles(rows, TILE_BYTES, 256, out)
    assert (base, span, count) == (0, 5 + TILE_BYTES * 3 + 1, 5)
    tiles = out.reshape(-1, 3)
    assert tiles[:, 2].max() <= TILE_BYTES and (tiles[:, 2] > 0).all()
    assert tiles[:, 2].sum() == rows[:, 2].sum()
    assert tiles[:4].tolist() == [[5, 3, TILE_BYTES], [5 + TILE_BYTES, 3 + TILE_BYTES, TILE_BYTES],
                                  [5 + 2 * TILE_BYTES, 3 + 2 * TILE_BYTES, TILE_BYTES],
                                  [5 + 3 * TILE_BYTES, 3 + 3 * TILE_BYTES, 1]]
    assert tiles[4:].tolist() == [[0, 2, TILE_BYTES]]


@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_tile_table_is_the_numpy_one(seed):
    """``write_tiles`` (what the gather uploads) equals the NumPy tiling less the window's base, and counts alike."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    sizes = rng.choice([0, 1, 7, 8, TILE_BYTES - 1, TILE_BYTES, TILE_BYTES + 1, 3 * TILE_BYTES + 5, -3], n)
    rows = np.stack([rng.integers(1 << 20, 1 << 40, n), rng.integers(0, 1 << 30, n), sizes], axis=1).astype(np.int64)
    want = _reference_tiles(rows)
    assert count_tiles(np.ascontiguousarray(rows[:, 2]), TILE_BYTES) == len(want)
    out = np.full(3 * len(want) + 3, -7, np.int64)
    base, span, count = write_tiles(rows, TILE_BYTES, 256, out)
    assert count == len(want)
    if not len(want):
        assert (base, span) == (0, 0)
        return
    live = rows[rows[:, 2] > 0]
    assert base == int(live[:, 0].min()) & ~255 and span == int((live[:, 0] + live[:, 2]).max()) - base
    want[:, 0] -= base
    assert out[: 3 * count].reshape(-1, 3).tolist() == want.tolist() and (out[3 * count :] == -7).all()


def test_one_launch_gathers_pieces_of_several_device_arrays_and_of_the_host_at_every_alignment():
    rng = np.random.default_rng(7)
    sources = [rng.integers(0, 256, n, dtype=np.uint8) for n in (3000, 70_000, 1)]
    device = [cuda.to_device(a) for a in sources]
    hosts = [rng.integers(0, 256, 900, dtype=np.uint8), rng.integers(0, 256, 50, dtype=np.uint8)]
    nbytes = 200_000
    expected = np.full(nbytes, 0x5A, np.uint8)
    rows, packed, at = [], [], 3
    # pieces at every offset modulo 8 on either side (bytes, 4-byte and 8-byte words), some past a tile
    plan = [(0, 0, 1), (0, 1, 17), (0, 8, 100), (1, 4, 40_000), (1, 13, 9), (1, 100, TILE_BYTES + 37),
            (1, 61_000, 9000), (2, 0, 1), (0, 2990, 10), (1, 3, 0)]
    for k, so, n in plan:
        if n:
            expected[at : at + n] = sources[k][so : so + n]
        rows.append((device_address(device[k]) + so, at, n))
        at += n + int(rng.integers(0, 9))
    for h, po, n in ((0, 0, 5), (0, 600, 300), (1, 3, 40), (0, 7, 595), (1, 0, 0)):
        expected[at : at + n] = hosts[h][po : po + n]
        packed.append((h, po, n, at))
        at += n + 3
    patches = [(host, np.array([(po, n, do) for k, po, n, do in packed if k == h], np.int64))
               for h, host in enumerate(hosts)]
    data = cuda.to_device(np.full(nbytes, 0x5A, np.uint8))
    stream = cuda.stream()
    copy_pieces(data, np.array(rows, np.int64), patches, stream)
    stream.synchronize()
    assert np.array_equal(data.copy_to_host(), expected)


def test_every_alignment_of_source_and_destination_and_every_short_length_is_copied_exactly():
    rng = np.random.default_rng(11)
    source = rng.integers(0, 256, 4000, dtype=np.uint8)
    block = cuda.to_device(source)
    rows, at = [], 5
    for so in range(8):
        for do in range(8):
            for n in (1, 7, 8, 9, 15, 16, 17, 40):
                rows.append((so + 64 * len(rows) % 3000, at + do, n))
                at = (at + do + n + 8) // 8 * 8
    expected = np.zeros(at + 64, np.uint8)
    for so, do, n in rows:
        expected[do : do + n] = source[so : so + n]
    data = cuda.to_device(np.zeros(len(expected), np.uint8))
    table = np.array([(device_address(block) + so, do, n) for so, do, n in rows], np.int64)
    stream = cuda.stream()
    copy_pieces(data, table, [], stream)
    stream.synchronize()
    assert np.array_equal(data.copy_to_host(), expected)


def test_nothing_to_gather_launches_nothing_and_a_piece_past_data_is_refused():
    data = cuda.to_device(np.zeros(16, np.uint8))
    stream = cuda.stream()
    copy_pieces(data, np.zeros((0, 3), np.int64), [], stream)
    copy_pieces(data, np.zeros((0, 3), np.int64), [(np.zeros(4, np.uint8), np.zeros((0, 3), np.int64))], stream)
    src = cuda.to_device(np.ones(8, np.uint8))
    with pytest.raises(ValueError, match="leaves the decode's data of 16 bytes"):
        copy_pieces(data, np.array([[device_address(src), 10, 8]], np.int64), [], stream)
    with pytest.raises(ValueError, match="leaves the decode's data of 16 bytes"):
        copy_pieces(data, np.zeros((0, 3), np.int64), [(np.ones(8, np.uint8), np.array([[0, 8, 9]]))], stream)
    with pytest.raises(ValueError, match="outside the 8 bytes"):
        copy_pieces(data, np.zeros((0, 3), np.int64), [(np.ones(8, np.uint8), np.array([[4, 5, 0]]))], stream)
    stream.synchronize()
    assert not data.copy_to_host().any()


def _reference_outputs(kept):
    """_outputs as it was: one loop iteration a block."""
    rows = []
    span_base = 0
    for k, pages in enumerate(kept):
        spans, out = pages.spans, pages.outputs[pages.outputs[:, 1] > 0]
        order = np.argsort(spans[:, 0], kind="stable")
        spans = spans[order]
        at = np.searchsorted(spans[:, 0], out[:, 0], side="right") - 1
        inside = at >= 0
        inside[inside] &= out[inside, 0] + out[inside, 1] <= spans[at[inside], 0] + spans[at[inside], 1]
        if not inside.all():
            raise ValueError(f"kept block {k} has an output outside its spans")
        block_off = spans[at, 2] + (out[:, 0] - spans[at, 0])
        rows.append(np.stack([out[:, 0], out[:, 0] + out[:, 1], np.full(len(out), k), span_base + order[at],
                              block_off], axis=1))
        span_base += len(spans)
    table = np.concatenate(rows) if rows else np.zeros((0, 5), np.int64)
    table = table[np.argsort(table[:, 0], kind="stable")].astype(np.int64)
    if len(table) > 1 and (table[1:, 0] < table[:-1, 1]).any():
        raise ValueError("kept outputs overlap")
    return table


@pytest.mark.parametrize("seed", range(8))
def test_every_blocks_outputs_found_at_once_equal_the_loop_a_block(seed):
    rng = np.random.default_rng(seed)
    _, kept, _ = _layout(rng, n_outputs=int(rng.integers(1, 300)), blocks=int(rng.integers(1, 6)))
    assert _outputs(kept).tolist() == _reference_outputs(kept).tolist()


def test_an_output_outside_the_spans_names_the_first_such_block():
    block = np.zeros(100, np.uint8)
    good = KeptPages(block, np.array([[0, 10, 0]], np.int64), np.array([[2, 3]], np.int64))
    # in another block's span, not in its own
    stray = KeptPages(block, np.array([[50, 10, 0]], np.int64), np.array([[3, 2]], np.int64))
    past = KeptPages(block, np.array([[200, 10, 0], [300, 5, 10]], np.int64), np.array([[303, 5]], np.int64))
    for kept, k in (([good, stray], 1), ([good, past, stray], 1), ([stray, good], 0)):
        with pytest.raises(ValueError, match=f"kept block {k} has an output outside its spans"):
            _outputs(kept)
        with pytest.raises(ValueError, match=f"kept block {k} has"):
            _reference_outputs(kept)

