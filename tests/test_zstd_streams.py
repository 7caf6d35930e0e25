"""The Huffman literal streams of Zstd pages: found on the host, walked on the host and by the kernel.

libzstd's frames consume every stream exactly; a stream a byte short is
over-read and one a byte long has bits left, in each of the four positions;
the kernel (numba's CUDA simulator here) gives the host walk's bits; and a
GPU backend over a Zstd launcher as lenient as nvCOMP (``tests/standin_zstd.py``)
hands the pages it flags to libzstd.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import cramjam
import numpy as np
import pyarrow.parquet as pq
import pytest
from standin_zstd import ForkingKernelStandin, KernelStandin, LenientZstdLauncher
from zstd_crafting import datasets, far_streams, huffman_literals, resized, unzstd, zstd

from dask_hwdecomp.decompress.gpu_backend import GpuBackend
from dask_hwdecomp.decompress.zstd_walks import HUFFMAN
from dask_hwdecomp.errors import CorruptPageError, PageLocation
from dask_hwdecomp.format.zstd_streams import NO_END_MARK, pages_streams, walk_streams
from dask_hwdecomp.jobs import Algo, Job
from dask_hwdecomp.options import Options

from standin_hwengine import StandinHwEngine

ROOT = Path(__file__).resolve().parent.parent
CASE_1137 = ROOT / "benchmarks/results/2026-12-06-no-device/zstd-1137-frame.zst"
LEVELS = (1, 3, 9, 19)


def _streams(frames: list[bytes]):
    """(src, streams, bits left) over ``frames`` laid end to end, one page each."""
    src = np.frombuffer(b"".join(frames), np.uint8)
    sizes = np.array([len(f) for f in frames], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    s = pages_streams(src, offsets, sizes)
    return src, s, walk_streams(src, s.start, s.end, s.literals, s.tree, s.lengths, s.lengths_at, s.table_log)


def _content_size(frame: bytes) -> int:
    fhd = frame[4]
    single, code = (fhd >> 5) & 1, fhd >> 6
    at = 5 + (0 if single else 1) + [0, 1, 2, 4][fhd & 3]
    n = [1 if single else 0, 2, 4, 8][code]
    return int.from_bytes(frame[at : at + n], "little") + (256 if n == 2 else 0)


def _libzstd_frames() -> list[bytes]:
    frames = []
    for _, data in datasets():
        for level in LEVELS:
            frames.append(zstd(data, level))
            frames.append(bytes(cramjam.zstd.compress(data, level=level)))
    return frames


def test_every_stream_of_the_frames_libzstd_writes_is_consumed_exactly():
    frames = _libzstd_frames()
    _, s, left = _streams(frames)
    assert not s.bad.any()
    assert len(left) > 300, len(left)
    assert (left == 0).all(), np.flatnonzero(left)
    pages_of_one = [k for k in range(len(frames)) if (s.page == k).sum() % 4]
    assert pages_of_one, "no frame with one-stream literals"
    # Treeless blocks: sections that reuse a tree of an earlier block.
    assert (np.bincount(s.tree) > 4).any()


@pytest.mark.parametrize("k", range(4))
def test_a_stream_a_byte_short_is_over_read_and_a_byte_long_has_bits_left(k):
    crafted = 0
    for _, data in datasets():
        for level in LEVELS:
            frame = zstd(data, level)
            lits = huffman_literals(frame, 4)
            if lits is None:
                continue
            for delta in (-1, 1):
                _, s, left = _streams([resized(frame, lits, k, delta)])
                at = np.flatnonzero(s.start == lits.starts[k])[0]  # the stream crafted (its start is unmoved)
                assert (left[at] < 0) if delta < 0 else (left[at] == 8), (level, delta, left)
                assert (np.delete(left, at) == 0).all()
                crafted += 1
    assert crafted >= 16


def test_a_lone_stream_a_byte_short_is_over_read_and_libzstd_refuses_it():
    frame = zstd(datasets()[-1][1], 1)
    lits = huffman_literals(frame, 1)
    assert lits is not None
    bad = resized(frame, lits, 0, -1)
    _, s, left = _streams([bad])
    assert len(left) == 1 and left[0] < 0
    with pytest.raises(OSError):
        unzstd(bad, len(datasets()[-1][1]))


def test_a_stream_without_its_end_mark_is_refused():
    src = np.array([0x35, 0x00], np.uint8)
    _, s, _ = _streams([zstd(datasets()[0][1], 1)])
    assert walk_streams(src, np.array([0]), np.array([2]), np.array([1]), np.array([0]), s.lengths,
                        s.lengths_at, s.table_log)[0] == NO_END_MARK


def test_case_1137_has_one_over_read_stream_and_pyarrow_reads_it():
    frame = CASE_1137.read_bytes()
    _, s, left = _streams([frame])
    assert len(left) == 4
    assert (left < 0).sum() == 1 and (left > 0).sum() == 0, left
    assert len(unzstd(frame, _content_size(frame))) == _content_size(frame)


def _simulated_walk(src, start, end, count, lengths_at, table_log, lengths) -> np.ndarray:
    from dask_hwdecomp.gpu.simulator import simulated

    if not simulated():
        pytest.skip("the kernel runs on the GPU here (tests/gpu/test_zstd_walks_gpu.py)")
    from dask_hwdecomp.decompress.zstd_walk_kernel import LANES, walk_kernel
    from dask_hwdecomp.gpu.cuda_jit import cuda

    out = cuda.to_device(np.full(len(start), 12345, np.int64))
    args = [cuda.to_device(np.ascontiguousarray(a)) for a in (src, start, end, count, lengths_at, table_log, lengths)]
    walk_kernel[len(start), LANES](*args, out)
    return out.copy_to_host()


def test_the_kernel_walks_as_the_host_does_under_the_simulator():
    frames = [zstd(data, 3) for _, data in datasets()[:1] + datasets()[-2:]]
    for n in (4, 1):
        for frame in list(frames):
            lits = huffman_literals(frame, n)
            if lits is not None:
                frames += [resized(frame, lits, k, d) for k in range(n) for d in (-1, 1)]
    frames.append(CASE_1137.read_bytes())
    src, s, left = _streams(frames)
    assert (left < 0).sum() >= 5 and (left > 0).sum() >= 5
    # Numba's simulator runs a thread of Python per lane: a few streams of each outcome, each long enough
    # for half the lanes to have a piece, the shortest such first.
    size = s.end - s.start
    order = np.argsort(np.where(size * 8 >= 16 * 64, size, size.max() + 1), kind="stable")
    pick = np.concatenate([order[np.sign(left[order]) == sign][:3] for sign in (-1, 0, 1)])
    assert len(pick) == 9 and (size[pick] * 8 >= 16 * 64).all()
    got = _simulated_walk(src, s.start[pick], s.end[pick], s.literals[pick], s.lengths_at[s.tree][pick],
                          s.table_log[s.tree][pick], s.lengths)
    assert (got == left[pick]).all()


def test_the_kernel_walks_streams_far_from_their_counts_as_the_host_does():
    f = far_streams()
    m = len(f.start)
    left = walk_streams(f.src, f.start, f.end, f.count, np.arange(m), f.lengths, f.lengths_at, f.table_log)
    assert left[4] > 0 and left[5] > 0 and left[6] < 0 and left[-1] == NO_END_MARK
    assert (left[:3] <= 0).all() and left[3] > 0
    assert (_simulated_walk(f.src, f.start, f.end, f.count, f.lengths_at, f.table_log, f.lengths) == left).all()


# -- the walk in a GPU backend -------------------------------------------------


def _pages(frames: list[bytes], sizes: list[int]):
    src = bytearray(b"".join(frames))
    jobs, at, out = [], 0, 0
    for i, (f, n) in enumerate(zip(frames, sizes)):
        jobs.append(Job(Algo.ZSTD, at, len(f), out, n, 6, PageLocation(file="t.parquet", row_group=0,
                                                                        column="c", page=i)))
        at += len(f)
        out += n
    return src, jobs, bytearray(out)


def _backend(walks: bool = True, ops=None) -> GpuBackend:
    return GpuBackend("nvcomp", ops or StandinHwEngine(), LenientZstdLauncher(walks),
                      Options(streams=1, batch_latency_ms=1.0, zstd_stream_walk=True))


def _kernel_ops() -> KernelStandin:
    from dask_hwdecomp.gpu.simulator import simulated

    if not simulated():
        pytest.skip("the kernel runs on the GPU here (tests/gpu/test_zstd_walks_gpu.py)")
    return KernelStandin()


def _over_read_pages():
    """Three pages: good, a 4-stream section over-read (libzstd decodes other rows), good."""
    _, data = datasets()[0]
    frame = zstd(data, 3)
    lits = huffman_literals(frame, 4)
    bad = resized(frame, lits, 3, -1)
    good2 = zstd(datasets()[-1][1], 3)
    frames, sizes = [frame, bad, good2], [len(data), len(data), len(datasets()[-1][1])]
    return frames, sizes


@pytest.mark.parametrize("walks", ["on the host", "by the kernel", False])
def test_an_over_read_page_is_judged_by_libzstd(walks):
    frames, sizes = _over_read_pages()
    expected = [unzstd(f, n) for f, n in zip(frames, sizes)]
    src, jobs, dst = _pages(frames, sizes)
    ops = _kernel_ops() if walks == "by the kernel" else StandinHwEngine()
    with _backend(bool(walks), ops) as backend:
        redone = backend.decompress(jobs, memoryview(src), memoryview(dst))
    if walks == "by the kernel":
        assert ops.launches == 1
    got = [bytes(dst[j.dst_offset : j.dst_offset + j.dst_size]) for j in jobs]
    if walks:
        assert redone == 1
        assert got == expected
    else:  # what the walk is for: nvCOMP's zero-fill gives other rows than pyarrow's
        assert redone == 0
        assert got[0] == expected[0] and got[2] == expected[2] and got[1] != expected[1]


def test_where_the_ops_fork_streams_the_walk_runs_on_the_side_stream_and_joins_the_call():
    # The walk runs beside the launcher's decoding, on a side stream that
    # joins the call's stream before its synchronisation: its findings are
    # there when the call's results are read.
    from dask_hwdecomp.gpu.simulator import simulated

    if not simulated():
        pytest.skip("the kernel runs on the GPU here (tests/gpu/test_zstd_walks_gpu.py)")
    frames, sizes = _over_read_pages()
    expected = [unzstd(f, n) for f, n in zip(frames, sizes)]
    src, jobs, dst = _pages(frames, sizes)
    ops = ForkingKernelStandin()
    with _backend(True, ops) as backend:
        redone = backend.decompress(jobs, memoryview(src), memoryview(dst))
        (fork,) = ops.forks
        assert ops.launch_streams == [fork.side]
        assert fork.begun == fork.ended == 1
    assert redone == 1
    assert [bytes(dst[j.dst_offset : j.dst_offset + j.dst_size]) for j in jobs] == expected


def test_a_part_with_a_flagged_page_is_not_kept_on_the_device():
    from dask_hwdecomp.service.kept import KeptStore, RunKeeper

    frames, sizes = _over_read_pages()
    src, jobs, dst = _pages(frames, sizes)
    store = KeptStore()
    keeper = RunKeeper(store, lambda n: np.zeros(n, np.uint8))
    # A part a page: the budget is the smallest it may be.
    with GpuBackend("nvcomp", StandinHwEngine(), LenientZstdLauncher(),
                    Options(streams=1, batch_latency_ms=1.0, batch_bytes=1, zstd_stream_walk=True)) as backend:
        assert backend.decompress(jobs, memoryview(src), memoryview(dst), keep=keeper) == 1
    kept = {(a, n) for p in keeper.pages for a, n in p.outputs.tolist()}
    assert kept == {(j.dst_offset, j.dst_size) for j in (jobs[0], jobs[2])}
    assert bytes(dst[jobs[1].dst_offset : jobs[1].dst_offset + sizes[1]]) == unzstd(frames[1], sizes[1])
    keeper.release_all()
    assert store.stats()["kept_bytes"] == 0


def test_a_lone_stream_a_byte_short_is_an_error_naming_its_page():
    short = datasets()[-1][1]
    frame = zstd(short, 1)
    lits = huffman_literals(frame, 1)
    frames = [zstd(datasets()[0][1], 3), resized(frame, lits, 0, -1), frame]
    sizes = [len(datasets()[0][1]), len(short), len(short)]
    src, jobs, dst = _pages(frames, sizes)
    with _backend() as backend, pytest.raises(CorruptPageError) as err:
        backend.decompress(jobs, memoryview(src), memoryview(dst))
    assert err.value.location.page == 1
    assert "Huffman literal stream" in str(err.value)
    # Without the walk the page comes back, where pyarrow raises.
    src, jobs, dst = _pages(frames, sizes)
    with _backend(walks=False) as backend:
        assert backend.decompress(jobs, memoryview(src), memoryview(dst)) == 0


@pytest.mark.parametrize("where", ["on the host", "by the kernel"])
def test_good_pages_are_not_redone(where):
    # The stand-in's decoder is Python, and so is the kernel under the simulator (a thread per lane).
    small = [data for _, data in datasets() if len(data) < (200_000 if where == "on the host" else 70_000)]
    frames = [zstd(data, level) for data in small for level in (1, 9)]
    sizes = [len(data) for data in small for _ in (1, 9)]
    src, jobs, dst = _pages(frames, sizes)
    ops = _kernel_ops() if where == "by the kernel" else StandinHwEngine()
    with _backend(True, ops) as backend:
        assert backend.decompress(jobs, memoryview(bytes(src)), memoryview(dst)) == 0
        walked = sum(r.beside.streams_walked for r in backend._open().batcher._runners)
    assert walked > (20 if where == "on the host" else 12)
    assert bytes(dst) == b"".join(data for data in small for _ in (1, 9))


@pytest.mark.parametrize("parts", [1, 3])
def test_the_streams_are_found_on_the_callers_thread_not_the_calls_dispatcher(monkeypatch, parts):
    # The host's share of the walk that depends on a part alone rides on the
    # part: the dispatcher thread, which every call of its stream waits for,
    # only lays the streams out. One part a page where parts=3 (the budget
    # at its smallest), so a call's streams come from several parts.
    import threading

    from dask_hwdecomp.decompress import zstd_walks

    frames, sizes = _over_read_pages()
    expected = [unzstd(f, n) for f, n in zip(frames, sizes)]
    src, jobs, dst = _pages(frames, sizes)
    threads = []
    search = zstd_walks.pages_streams

    def counted(*args):
        threads.append(threading.current_thread())
        return search(*args)

    monkeypatch.setattr(zstd_walks, "pages_streams", counted)
    options = Options(streams=1, batch_latency_ms=20.0, zstd_stream_walk=True, batch_bytes=1 if parts == 3 else 1 << 30)
    with GpuBackend("nvcomp", StandinHwEngine(), LenientZstdLauncher(), options) as backend:
        threads.clear()  # the warm-up's searches
        assert backend.decompress(jobs, memoryview(src), memoryview(dst)) == 1
    assert threads == [threading.current_thread()] * parts
    assert [bytes(dst[j.dst_offset : j.dst_offset + j.dst_size]) for j in jobs] == expected


def test_the_hardware_engine_backend_does_not_walk():
    from dask_hwdecomp.decompress.hardware import create_with

    with create_with(StandinHwEngine(), Options(streams=1)) as backend:
        assert Algo.ZSTD not in backend.algorithms and not backend.walks_streams


def test_the_nvcomp_launcher_walks_zstd():
    from dask_hwdecomp.gpu.nvcomp_launcher import NvcompLauncher

    assert NvcompLauncher.walks_huffman_streams and Algo.ZSTD in NvcompLauncher.algorithms
    assert HUFFMAN == "huffman"


# -- the bench's data ------------------------------------------------------------


def _zstd_pages(data: bytes) -> list[tuple[int, int]]:
    """(body start, body size) of every page of every column chunk of a Parquet file."""
    from dask_hwdecomp.format.footer import parse_footer
    from dask_hwdecomp.format.pages import chunk_range, scan_chunk

    footer = parse_footer(data, len(data), "bench")
    out = []
    for rg in range(footer.num_row_groups):
        for chunk in footer.column_chunks(rg):
            rng = chunk_range(chunk, footer.footer_offset, PageLocation())
            view = memoryview(data)[rng.start : rng.start + rng.length]
            for p in scan_chunk(view, rng, PageLocation(), max_page_bytes=1 << 30):
                out.append((rng.start + p.body_start, p.body_size))
    return out


@pytest.mark.parametrize("kind", ["lineitem", "entropy"])
def test_no_stream_of_the_bench_data_is_flagged(kind):
    from dask_hwdecomp.bench.tables import make_table

    buf = io.BytesIO()
    pq.write_table(make_table(kind, 20_000, 42), buf, compression="zstd")
    data = buf.getvalue()
    pages = np.array(_zstd_pages(data), np.int64)
    src = np.frombuffer(data, np.uint8)
    s = pages_streams(src, pages[:, 0], pages[:, 1])
    left = walk_streams(src, s.start, s.end, s.literals, s.tree, s.lengths, s.lengths_at, s.table_log)
    assert len(left) > 20 and not s.bad.any()
    assert (left == 0).all()


# -- warming ---------------------------------------------------------------------

_CALL = textwrap.dedent('''
    import sys
    sys.path.insert(0, "tests")
    import numpy as np
    from standin_hwengine import StandinHwEngine
    from standin_zstd import ForkingKernelStandin, KernelStandin, LenientZstdLauncher
    from zstd_crafting import datasets, zstd
    from dask_hwdecomp.decompress import zstd_walks
    from dask_hwdecomp.decompress.gpu_backend import GpuBackend
    from dask_hwdecomp.errors import PageLocation
    from dask_hwdecomp.format import zstd_streams
    from dask_hwdecomp.jobs import Algo, Job
    from dask_hwdecomp.options import Options

    data = datasets()[0][1]
    frame = zstd(data, 3)
    steps = (zstd_streams.pages_streams, zstd_streams.walk_streams)
    with GpuBackend("nvcomp", StandinHwEngine(), LenientZstdLauncher(), Options(streams=1, zstd_stream_walk=True)) as backend:
        warmed = [list(fn.signatures) for fn in steps]
        src = memoryview(frame) if sys.argv[1] == "read-only" else memoryview(bytearray(frame))
        dst = bytearray(len(data))
        backend.decompress([Job(Algo.ZSTD, 0, len(frame), 0, len(data), 6, PageLocation())], src, memoryview(dst))
        assert bytes(dst) == data
        print([[str(t) for t in fn.signatures if t not in w] for fn, w in zip(steps, warmed)])
''')


@pytest.mark.parametrize("source", ["writable", "read-only"])
def test_a_call_compiles_no_walk_step_that_warming_did_not(source):
    out = subprocess.run([sys.executable, "-c", _CALL, source], cwd=ROOT, capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "[[], []]", out.stdout


@pytest.mark.parametrize("walk", [None, False])
def test_the_walk_is_on_unless_turned_off(walk):
    # On by default: the over-read page comes back as libzstd decodes it. Turned off, no runner walks,
    # and it comes back as nvCOMP decodes it.
    frames, sizes = _over_read_pages()
    expected = [unzstd(f, n) for f, n in zip(frames, sizes)]
    src, jobs, dst = _pages(frames, sizes)
    options = Options(streams=1) if walk is None else Options(streams=1, zstd_stream_walk=walk)
    with GpuBackend("nvcomp", StandinHwEngine(), LenientZstdLauncher(), options) as backend:
        assert backend.walks_streams is (walk is None)
        assert backend.decompress(jobs, memoryview(src), memoryview(dst)) == (1 if walk is None else 0)
    got = [bytes(dst[j.dst_offset : j.dst_offset + j.dst_size]) for j in jobs]
    assert got[0] == expected[0] and got[2] == expected[2]
    assert (got[1] == expected[1]) is (walk is None)
