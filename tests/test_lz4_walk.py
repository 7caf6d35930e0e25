"""The host walk of LZ4 blocks: never stricter than LZ4's reference decoder, and it refuses what nvCOMP accepts."""

from __future__ import annotations

import random

import cramjam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dask_hwdecomp.decompress.cpu import CpuBackend
from dask_hwdecomp.decompress.lz4_walk import BEFORE_START, check_lz4_blocks, walk_blocks
from dask_hwdecomp.errors import CorruptPageError, PageLocation
from dask_hwdecomp.jobs import Algo, Job, JobTable

_LZ4_RAW = pa.Codec("lz4_raw")


def _sample(rnd: random.Random, n: int) -> bytes:
    """Data of mixed compressibility: runs, repeats of earlier bytes, small integers, random bytes."""
    out = bytearray()
    while len(out) < n:
        kind = rnd.randrange(4)
        k = rnd.randrange(1, 300)
        if kind == 0:
            out += bytes([rnd.randrange(256)]) * k
        elif kind == 1 and out:
            at = rnd.randrange(len(out))
            out += out[at : at + k]
        elif kind == 2:
            out += np.array([rnd.randrange(50) for _ in range(k // 4 + 1)], np.int32).tobytes()
        else:
            out += rnd.randbytes(k)
    return bytes(out[:n])


def _reference_accepts(block: bytes, size: int) -> bool:
    """Whether LZ4's reference decoder (pyarrow's codec) decodes ``block`` to exactly ``size`` bytes."""
    try:
        _LZ4_RAW.decompress(block, decompressed_size=size)
    except (OSError, pa.ArrowException):
        return False
    out = np.zeros(size + 64, np.uint8)  # room to see a longer output
    try:
        return cramjam.lz4.decompress_block_into(block, out) == size
    except Exception:
        return False


def _table(blocks: list[tuple[bytes, int]]) -> tuple[JobTable, np.ndarray]:
    src = np.frombuffer(b"".join(b for b, _ in blocks), np.uint8)
    jobs, at, out = [], 0, 0
    for i, (b, size) in enumerate(blocks):
        jobs.append(Job(algo=Algo.LZ4, src_offset=at, src_size=len(b), dst_offset=out, dst_size=size, codec=7,
                        location=PageLocation(file="f.parquet", row_group=0, column="c", page=i)))
        at += len(b)
        out += size
    return JobTable.from_jobs(jobs), src


def _flipped(block: bytes, rnd: random.Random) -> bytes:
    b = bytearray(block)
    for _ in range(rnd.randrange(1, 4)):
        b[rnd.randrange(len(b))] ^= 1 << rnd.randrange(8)
    return bytes(b)


def test_the_walk_refuses_no_block_the_reference_decodes_and_finds_matches_before_the_start():
    rnd = random.Random(7)
    blocks, accepted = [], []
    for _ in range(1500):
        data = _sample(rnd, rnd.randrange(1, 6000))
        block = _LZ4_RAW.compress(data, asbytes=True)
        blocks.append((block, len(data)))
        accepted.append(True)
        bad = _flipped(block, rnd)
        blocks.append((bad, len(data)))
        accepted.append(_reference_accepts(bad, len(data)))
    table, src = _table(blocks)
    verdicts = walk_blocks(table, src)
    stricter = [i for i, ok in enumerate(accepted) if ok and verdicts[i]]
    assert not stricter, f"the walk refuses {len(stricter)} blocks LZ4's reference decodes, e.g. row {stricter[0]}"
    refused = [i for i, ok in enumerate(accepted) if not ok]
    assert refused, "the mutations never broke a block"
    # What nvCOMP decodes without an error and the walk exists for.
    assert (verdicts[refused] == BEFORE_START).sum() > 0
    # Most broken blocks are named by the walk too (the rest the decoder's size check finds).
    assert (verdicts[refused] != 0).mean() > 0.5


def test_an_empty_output_is_the_single_byte_zero_as_for_the_reference():
    blocks = [(b"\x00", 0), (b"\x10\x41", 0), (b"", 0)]
    table, src = _table(blocks)
    verdicts = walk_blocks(table, src)
    assert verdicts[0] == 0 and verdicts[1] != 0 and verdicts[2] != 0
    assert [_reference_accepts(b, n) for b, n in blocks] == [True, False, False]


def _match_before_start() -> tuple[bytes, int]:
    """A block whose first match copies from 40 bytes back after only 20 literals, then 20 last literals."""
    return bytes([0xF0, 5]) + bytes(range(20)) + (40).to_bytes(2, "little") + bytes([0xF0, 5]) + bytes(20), 44


class _Unchecked:
    """A backend's capabilities as the router reads them, for a GPU backend's walk."""

    name = "nvcomp"
    lz4_checked = False


def test_the_check_names_the_page_whose_match_reaches_before_its_start():
    block, size = _match_before_start()
    assert not _reference_accepts(block, size)
    good = _LZ4_RAW.compress(b"x" * 500, asbytes=True)
    table, src = _table([(good, 500), (block, size)])
    with pytest.raises(CorruptPageError, match="before the block's start") as info:
        check_lz4_blocks(table, memoryview(src), _Unchecked())
    assert info.value.location.page == 1
    assert isinstance(info.value, OSError)  # caught as pyarrow's "Corrupt Lz4 compressed data" is


def test_no_walk_for_a_backend_whose_decoder_is_the_reference():
    block, size = _match_before_start()
    table, src = _table([(block, size)])
    assert CpuBackend.lz4_checked
    check_lz4_blocks(table, memoryview(src), CpuBackend)  # the CPU backend refuses the block itself


@pytest.mark.parametrize("bad_at", [0, 13, 39])
def test_a_batch_walked_in_parts_names_its_first_bad_page_wherever_it_lies(bad_at):
    rnd = random.Random(bad_at)
    good = [(_LZ4_RAW.compress(d, asbytes=True), len(d)) for d in (_sample(rnd, 700_000) for _ in range(40))]
    blocks = list(good)
    blocks[bad_at] = _match_before_start()
    if bad_at != 39:
        blocks[39] = _match_before_start()  # a later bad page: the first is named
    table, src = _table(blocks)
    assert table.rows["src_size"].sum() >= 4 * (2 << 20)  # cut in the most parts
    with pytest.raises(CorruptPageError) as info:
        check_lz4_blocks(table, memoryview(src), _Unchecked())
    assert info.value.location.page == bad_at
    table, src = _table(good)
    check_lz4_blocks(table, memoryview(src), _Unchecked())


def test_a_gpu_backend_that_accepts_a_match_before_the_start_is_refused_through_the_walk(monkeypatch):
    """The router walks LZ4 blocks before a GPU backend's call: a block nvCOMP decodes with success still raises."""
    from dask_hwdecomp.decompress.hardware import create_with
    from dask_hwdecomp.options import Options
    from dask_hwdecomp.report import ReadReport
    from dask_hwdecomp.routing import registry
    from dask_hwdecomp.routing.router import Router

    from standin_hwengine import StandinHwEngine

    block, size = _match_before_start()
    good = _LZ4_RAW.compress(bytes(range(256)) * 8, asbytes=True)
    table, src = _table([(good, 2048), (block, size)])
    options = Options(backend="hardware", streams=1, batch_latency_ms=1.0, cpu_threads=2, cpu_retry=True)
    engine = StandinHwEngine(mask=7, max_length=4 << 20, misbehave="lenient_lz4")
    hw = create_with(engine, options)
    monkeypatch.setattr(registry, "probe", lambda name: None)
    monkeypatch.setattr(registry, "get_backend", lambda name, opts: hw if name == "hardware" else CpuBackend(2))
    try:
        dst = memoryview(bytearray(2048 + size))
        hw.decompress(table, memoryview(bytearray(src)), dst)  # the backend alone: no error, other bytes
        engine.calls.clear()
        with pytest.raises(CorruptPageError, match="rejected before the GPU") as info:
            Router(options).run(table, memoryview(bytearray(src)), dst, ReadReport())
        assert info.value.location.page == 1
        assert engine.calls == []  # the bad block, and those beside it, never reached the engine
    finally:
        hw.close()


def test_every_lz4_block_of_the_corpus_passes_the_walk(monkeypatch):
    """Real writers' LZ4 blocks (raw, and Hadoop-framed ones' inner blocks), as the reader plans them."""
    import dask_hwdecomp
    from dask_hwdecomp.jobs import ALGOS, as_table
    from dask_hwdecomp.routing.router import Router

    from helpers import corpus_root

    files = sorted((corpus_root() / "data").glob("*lz4*.parquet"))
    if not files:
        pytest.skip("the parquet-testing corpus is not here")
    walked: list[tuple[int, int]] = []
    run = Router.run

    def run_and_walk(self, jobs, src, dst, report):
        table = as_table(jobs)
        lz4 = table.algo_codes() == ALGOS.index(Algo.LZ4)
        walked.append((int(lz4.sum()), int((walk_blocks(table, np.frombuffer(src, np.uint8)) != 0).sum())))
        return run(self, jobs, src, dst, report)

    monkeypatch.setattr(Router, "run", run_and_walk)
    for f in files:
        assert dask_hwdecomp.read_table(f, backend="cpu").equals(pq.read_table(f)), f.name
    assert sum(n for n, _ in walked) >= 5
    assert sum(bad for _, bad in walked) == 0


def test_the_pages_read_beside_case_936_in_the_mutation_run_are_refused_before_any_gpu_call(tmp_path, monkeypatch):
    """Zstd pages relabelled LZ4 (the mutation run's neighbours of an unmutated file that came back wrong)."""
    from mutation_seeds import mutant_of, seed_maps

    import dask_hwdecomp
    from dask_hwdecomp.jobs import ALGOS, as_table
    from dask_hwdecomp.routing.router import Router

    maps = seed_maps(tmp_path)
    walked: list[tuple[int, int]] = []
    run = Router.run

    def run_and_walk(self, jobs, src, dst, report):
        table = as_table(jobs)
        lz4 = table.algo_codes() == ALGOS.index(Algo.LZ4)
        walked.append((int(lz4.sum()), int((walk_blocks(table, np.frombuffer(src, np.uint8))[lz4] != 0).sum())))
        return run(self, jobs, src, dst, report)

    monkeypatch.setattr(Router, "run", run_and_walk)
    for i, seed in {930: "zstd-v1-dict", 931: "zstd-v1-plain", 932: "zstd-v2-dict", 933: "zstd-v2-plain",
                    935: "zstd-checksummed-v1"}.items():
        _, data = mutant_of(maps, f"{seed}.parquet", "wrong_codec_everywhere", i)
        path = tmp_path / f"case{i}.parquet"
        path.write_bytes(data)
        with pytest.raises(CorruptPageError):
            dask_hwdecomp.read_table(path, backend="cpu")
    assert sum(n for n, _ in walked) >= 30
    assert all(n == bad for n, bad in walked)  # every LZ4 block of them refused
