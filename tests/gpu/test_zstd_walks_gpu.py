"""The Huffman stream walk on the GPU, beside nvCOMP (GPU machine).

The kernel gives the host walk's bits on generated pages, crafted
frames and random streams far from their counts; over-read pages among good ones, through the nvCOMP backend, come
back as libzstd decodes them and only they are redone; a lone stream a byte
short is an error naming its page; and a call compiles nothing the backend's
warm-up did not.
"""

from __future__ import annotations

import numpy as np
import pytest
from zstd_crafting import datasets, far_streams, huffman_literals, resized, unzstd, zstd

from dask_hwdecomp.errors import CorruptPageError, PageLocation
from dask_hwdecomp.format import zstd_streams
from dask_hwdecomp.jobs import Algo, Job

from pagegen import make_batch

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def backend(nvcomp_available):
    """An nvCOMP backend in this process (its runners and kernel are inspected)."""
    from dask_hwdecomp.decompress.nvcomp import create
    from dask_hwdecomp.options import Options

    b = create(Options(streams=2, batch_latency_ms=2.0, zstd_stream_walk=True))
    yield b
    b.close()


def _crafted() -> tuple[list[bytes], list[bytes], list[int]]:
    """(over-read frames, their data's good frames, the data's sizes), one per dataset, level and stream."""
    bad, good, sizes = [], [], []
    for _, data in datasets():
        for level in (1, 3, 9, 19):
            frame = zstd(data, level)
            lits = huffman_literals(frame, 4)
            if lits is None:
                continue
            for k in range(4):
                bad.append(resized(frame, lits, k, -1))
                good.append(frame)
                sizes.append(len(data))
    return bad, good, sizes


def _layout(frames: list[bytes], sizes: list[int]):
    src = bytearray(b"".join(frames))
    jobs, at, out = [], 0, 0
    for i, (f, n) in enumerate(zip(frames, sizes)):
        jobs.append(Job(Algo.ZSTD, at, len(f), out, n, 6, PageLocation(file="t.parquet", row_group=0, column="c",
                                                                        page=i)))
        at += len(f)
        out += n
    return src, jobs, out


def _run(backend, src, jobs, dst_len):
    with backend.host_buffer(len(src)) as s, backend.host_buffer(dst_len) as d:
        s.view[:] = src
        redone = backend.decompress(jobs, s.view, d.view)
        return redone, bytes(d.view)


def test_the_kernel_walks_as_the_host_does(cuda_device):
    from dask_hwdecomp.decompress.zstd_walk_kernel import LANES, walk_kernel
    from dask_hwdecomp.gpu.cuda_jit import cuda

    jobs, src, _, _ = make_batch([Algo.ZSTD], [1000, 30_000, 100_000, 262_144] * 10, seed=7)
    bad, good, _ = _crafted()
    data = bytes(src) + b"".join(bad + good)
    offsets = [j.src_offset for j in jobs]
    sizes = [j.src_size for j in jobs]
    at = len(src)
    for f in bad + good:
        offsets.append(at)
        sizes.append(len(f))
        at += len(f)
    host = np.frombuffer(data, np.uint8)
    s = zstd_streams.pages_streams(host, np.array(offsets, np.int64), np.array(sizes, np.int64))
    left = zstd_streams.walk_streams(host, s.start, s.end, s.literals, s.tree, s.lengths, s.lengths_at, s.table_log)
    assert (left < 0).sum() >= len(bad) and len(left) > 200
    out = cuda.device_array(len(left), np.int64)
    args = [cuda.to_device(np.ascontiguousarray(a)) for a in (host, s.start, s.end, s.literals, s.lengths_at[s.tree],
                                                              s.table_log[s.tree], s.lengths)]
    walk_kernel[len(left), LANES](*args, out)
    assert (out.copy_to_host() == left).all()


def test_the_kernel_walks_streams_far_from_their_counts_as_the_host_does(cuda_device):
    from dask_hwdecomp.decompress.zstd_walk_kernel import LANES, walk_kernel
    from dask_hwdecomp.gpu.cuda_jit import cuda

    f = far_streams()
    m = len(f.start)
    left = zstd_streams.walk_streams(f.src, f.start, f.end, f.count, np.arange(m), f.lengths, f.lengths_at,
                                     f.table_log)
    assert (left < 0).any() and (left > 0).any() and (left == 0).any()
    out = cuda.device_array(m, np.int64)
    args = [cuda.to_device(np.ascontiguousarray(a)) for a in (f.src, f.start, f.end, f.count, f.lengths_at,
                                                              f.table_log, f.lengths)]
    walk_kernel[m, LANES](*args, out)
    assert (out.copy_to_host() == left).all()


def test_over_read_pages_among_good_ones_come_back_as_libzstd_decodes_them(backend):
    bad, good, n = _crafted()
    assert len(bad) >= 30
    frames, sizes = [], []
    for b, g, size in zip(bad[:30], good, n):
        frames += [g, b]
        sizes += [size, size]
    src, jobs, dst_len = _layout(frames, sizes)
    redone, out = _run(backend, src, jobs, dst_len)
    assert redone == 30
    for j, f, n in zip(jobs, frames, sizes):
        assert out[j.dst_offset : j.dst_offset + n] == unzstd(f, n), j.location


def test_good_pages_are_not_redone(backend):
    jobs, src, dst_len, expected = make_batch([Algo.ZSTD], [1000, 30_000, 100_000, 262_144] * 25, seed=8)
    redone, out = _run(backend, src, jobs, dst_len)
    assert redone == 0
    assert all(out[j.dst_offset : j.dst_offset + j.dst_size] == e for j, e in zip(jobs, expected))


def test_a_lone_stream_a_byte_short_is_named_by_its_page(backend):
    short = datasets()[-1][1]
    frame = zstd(short, 1)
    lits = huffman_literals(frame, 1)
    frames = [zstd(datasets()[0][1], 3), resized(frame, lits, 0, -1), frame]
    src, jobs, dst_len = _layout(frames, [len(datasets()[0][1]), len(short), len(short)])
    with pytest.raises(CorruptPageError) as err:
        _run(backend, src, jobs, dst_len)
    assert err.value.location.page == 1


def test_a_call_compiles_no_walk_step_the_backend_did_not(backend):
    from dask_hwdecomp.decompress.zstd_walk_kernel import walk_kernel

    before = (len(zstd_streams.pages_streams.signatures), len(walk_kernel.overloads))
    assert before[1] >= 1
    bad, good, n = _crafted()
    src, jobs, dst_len = _layout([good[0], bad[0]], [n[0], n[0]])
    for view in (memoryview(bytes(src)), memoryview(src)):
        dst = bytearray(dst_len)
        backend.decompress(jobs, view, memoryview(dst))
    assert (len(zstd_streams.pages_streams.signatures), len(walk_kernel.overloads)) == before


def test_every_stream_walking_its_first_call_at_once_fails_none(nvcomp_available, tmp_path):
    # numba-cuda loads a kernel's module into the context at its first
    # launch: four streams launching the walk at once for the first time
    # failed with "key already in dictionary" until launches took a lock.
    # A fresh process, so that no earlier test has loaded the kernel.
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import sys, threading
        sys.path[:0] = ["tests", "tests/gpu"]
        from test_zstd_walks_gpu import _crafted, _layout
        from zstd_crafting import unzstd
        from dask_hwdecomp.decompress.nvcomp import create
        from dask_hwdecomp.options import Options

        bad, good, sizes = _crafted()
        frames, lengths = good[:8] + bad[:8], sizes[:8] + sizes[:8]
        src, jobs, dst_len = _layout(frames, lengths)
        expected = b"".join(unzstd(f, n) for f, n in zip(frames, lengths))
        errors, results = [], []
        with create(Options(streams=4, batch_latency_ms=0.0, batch_bytes=1, zstd_stream_walk=True)) as b:
            gate = threading.Barrier(4)
            def one():
                try:
                    with b.host_buffer(len(src)) as s, b.host_buffer(dst_len) as d:
                        s.view[:] = src
                        gate.wait()
                        results.append((b.decompress(jobs, s.view, d.view), bytes(d.view)))
                except BaseException as exc:
                    errors.append(repr(exc))
            threads = [threading.Thread(target=one) for _ in range(4)]
            for t in threads: t.start()
            for t in threads: t.join()
        assert not errors, errors
        assert all(r == (8, expected) for r in results), [r[0] for r in results]
        print("ok", len(results))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0 and "ok 4" in done.stdout, done.stdout[-2000:] + done.stderr[-4000:]
