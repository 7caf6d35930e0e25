"""The GPU service machinery, without a GPU (CI).

The service hosts the real CPU backend, or the real GPU backend code over the
engine stand-in (``standin_hwengine.StandinHwEngine``) with the faults nvCOMP 6.0
showed on corrupt pages on the H200: the process dies, the call hangs, an
illegal address. Every test runs real service processes, sockets and shared
memory, in a service directory of its own.
"""

from __future__ import annotations

import gc
import os
import signal
import threading
import time

import numpy as np
import pytest

from dask_hwdecomp.errors import BackendUnavailableError, CorruptPageError, GpuBatchFailedError
from dask_hwdecomp.format.codecs import Algo
from dask_hwdecomp.options import Options, current_options
from dask_hwdecomp.report import ReadReport
from dask_hwdecomp.routing.router import Router
from dask_hwdecomp.service.client import ServiceClient
from dask_hwdecomp.service.launch import wait_for_exit
from dask_hwdecomp.service.shm import SharedBuffer, SharedPool

from corruption import corrupt
from pagegen import assert_outputs, make_batch, run_batch, run_concurrently
from service_backends import open_backend

OPTS = Options(streams=2, batch_latency_ms=1.0, batch_bytes=8 << 20, cpu_threads=2)
ENGINE_ALGOS = (Algo.SNAPPY, Algo.DEFLATE, Algo.LZ4)


@pytest.fixture
def open_service(service_dir):
    """``open_service(factory, **changes)``: a backend of a service hosting ``factory``, in the test's directory."""

    def open_(factory: str, **changes) -> ServiceClient:
        return open_backend(factory, OPTS.replace(**changes), service_dir)

    return open_


@pytest.fixture
def standin(open_service):
    with open_service("standin") as b:
        yield b


def _corrupt_batch(algo=Algo.SNAPPY, seed=5):
    jobs, src, dst_len, _ = make_batch([algo], [6000] * 12, seed=seed)
    broken = jobs[3:9:2]
    rng = np.random.default_rng(7)
    for job in broken:
        corrupt(algo, "noise", job, src, rng)
    return jobs, src, dst_len, broken[0]


def test_service_cpu_backend_runs_in_another_process(open_service):
    with open_service("cpu") as b:
        assert b.name == "cpu" and b.pid not in (None, os.getpid())
        jobs, src, dst_len, expected = make_batch([Algo.SNAPPY, Algo.DEFLATE, Algo.LZ4, Algo.ZSTD], [3000] * 40, seed=1)
        buf = b.host_buffer(10)
        assert isinstance(buf, SharedBuffer)
        buf.close()
        assert_outputs(run_batch(b, jobs, src, dst_len), jobs, expected)


def test_service_standin_hwengine_mirrors_capabilities_and_decodes(standin):
    assert standin.name == "hardware" and standin.overwrites_gaps
    assert standin.algorithms == frozenset(ENGINE_ALGOS) and standin.max_job_bytes > 0
    jobs, src, dst_len, expected = make_batch(ENGINE_ALGOS, [5000, 100, 70_000] * 10, seed=2)
    assert_outputs(run_batch(standin, jobs, src, dst_len), jobs, expected)


def test_service_concurrent_callers_share_the_childs_batcher(open_service):
    # One stream, its first call held until all 8 parts are in it or queued:
    # merged, the 8 callers take 1 or 2 calls; one call each would be 8.
    with open_service("standin_merging_8x30", streams=1) as b:
        run_concurrently(b, [make_batch(ENGINE_ALGOS, [3000 + 17 * t] * 30, seed=10 + t) for t in range(8)])
        stats = b.stats()
    assert stats["parts"] == 8 and stats["calls"] in (1, 2), stats


def test_service_segments_are_mapped_and_registered_once(standin):
    jobs, src, dst_len, expected = make_batch(ENGINE_ALGOS, [20_000] * 12, seed=6)
    for _ in range(3):
        run_batch(standin, jobs, src, dst_len)
    before = standin.stats()
    for _ in range(100):
        assert_outputs(run_batch(standin, jobs, src, dst_len), jobs, expected)
    after = standin.stats()
    for key in ("pinned_allocations", "pinned_held_bytes", "host_registrations", "host_register_s",
                "all_host_registrations", "all_host_register_s", "mapped_segments"):
        assert after[key] == before[key], (key, before, after)
    assert after["all_host_registrations"] >= after["host_registrations"]
    assert after["foreign_copies"] == 0 and after["restarts"] == 0


def test_service_foreign_buffers_are_staged_and_protect_holds(standin):
    jobs, src, dst_len, expected = make_batch(ENGINE_ALGOS, [4000] * 6, seed=3)
    dst = bytearray(b"\xab" * dst_len)
    gap = (jobs[0].dst_offset + jobs[0].dst_size, jobs[1].dst_offset)
    standin.decompress(jobs, memoryview(bytes(src)), memoryview(dst), protect=[gap])
    assert_outputs(bytes(dst), jobs, expected)
    assert dst[gap[0] : gap[1]] == b"\xab" * (gap[1] - gap[0])
    assert standin.stats()["foreign_copies"] == 2


def test_service_page_the_child_rejects_is_named_without_restart(standin):
    pid = standin.pid
    jobs, src, dst_len, bad = _corrupt_batch()
    with pytest.raises(CorruptPageError) as err:
        run_batch(standin, jobs, src, dst_len)
    assert err.value.location == bad.location
    assert standin.pid == pid


@pytest.mark.parametrize("factory,said", [
    ("standin_dies", "died (exited with status -9)"),
    ("standin_illegal_address", "CUDA_ERROR_ILLEGAL_ADDRESS"),
])
def test_service_lost_child_names_the_page_and_restarts(factory, said, open_service):
    with open_service(factory) as b:
        pid = b.pid
        jobs, src, dst_len, bad = _corrupt_batch()
        with pytest.raises(CorruptPageError) as err:
            run_batch(b, jobs, src, dst_len)
        assert err.value.location == bad.location
        assert said in str(err.value) and "restarted" in str(err.value), str(err.value)
        jobs, src, dst_len, expected = make_batch(ENGINE_ALGOS, [5000] * 20, seed=6)
        assert_outputs(run_batch(b, jobs, src, dst_len), jobs, expected)
        assert b.pid not in (None, pid)
        assert b.stats()["restarts"] == 1


def test_service_hung_child_is_killed_at_the_deadline(open_service):
    with open_service("standin_hangs", gpu_timeout_s=1.0) as b:
        jobs, src, dst_len, bad = _corrupt_batch()
        t0 = time.monotonic()
        # Taken up or not (a first run waits for the service to load its
        # compiled steps, seconds on a cold cache), a second is all it gets.
        with pytest.raises(CorruptPageError, match=r"did not (answer|take the request up) within 1 s") as err:
            run_batch(b, jobs, src, dst_len)
        assert time.monotonic() - t0 < 10
        assert err.value.location == bad.location
        jobs, src, dst_len, expected = make_batch(ENGINE_ALGOS, [5000] * 20, seed=6)
        assert_outputs(run_batch(b, jobs, src, dst_len), jobs, expected)


def test_service_killed_mid_batch_fails_fast_and_innocent_batch_is_retried(open_service):
    with open_service("standin_hangs", gpu_timeout_s=60.0) as b:
        bad_jobs, bad_src, bad_len, bad = _corrupt_batch(seed=8)
        good = make_batch(ENGINE_ALGOS, [5000] * 20, seed=9)
        results = {}

        def read(key, jobs, src, dst_len):
            try:
                results[key] = run_batch(b, jobs, src, dst_len)
            except BaseException as exc:  # inspected below
                results[key] = exc

        hung = threading.Thread(target=read, args=("bad", bad_jobs, bad_src, bad_len))
        t0 = time.monotonic()
        hung.start()
        time.sleep(0.5)
        innocent = threading.Thread(target=read, args=("good", *good[:3]))
        innocent.start()  # joins the hung batcher's queue behind the bad batch
        time.sleep(0.3)
        os.kill(b.pid, signal.SIGKILL)
        hung.join(30)
        innocent.join(30)
        assert time.monotonic() - t0 < 20
        assert isinstance(results["bad"], CorruptPageError), results["bad"]
        assert results["bad"].location == bad.location
        assert "died" in str(results["bad"])
        assert_outputs(results["good"], good[0], good[3])


def test_service_broken_device_fails_batch_the_cpu_decodes_and_its_cpu_output_stands(open_service, caplog):
    with open_service("standin_broken_device") as b:
        jobs, src, dst_len, expected = make_batch(ENGINE_ALGOS, [3000] * 10, seed=4)
        with b.host_buffer(len(src)) as s, b.host_buffer(dst_len) as d:
            s.view[:] = src
            d.view[:] = b"\xee" * dst_len
            with pytest.raises(GpuBatchFailedError, match="the CPU decodes every page: its output is used"):
                b.decompress(jobs, s.view, d.view)
            assert_outputs(bytes(d.view), jobs, expected)  # the client's CPU pass wrote them
        assert b.stats()["cpu_kept"] == 1
        # The router keeps the CPU's output without cpu_retry, says so in the report and the log.
        router = Router.over(OPTS, {a: [b] for a in ENGINE_ALGOS})
        report = ReadReport()
        dst = bytearray(dst_len)
        with b.host_buffer(len(src)) as s, caplog.at_level("WARNING", logger="dask_hwdecomp"):
            s.view[:] = src
            router.run(jobs, s.view, memoryview(dst), report)
        assert_outputs(bytes(dst), jobs, expected)
        assert len(report.retries) == 1 and "its output is used" in report.retries[0]
        assert any("decompressed on the CPU" in r.getMessage() for r in caplog.records)


def test_service_that_cannot_create_its_backend_says_why(open_service):
    with pytest.raises(BackendUnavailableError, match="CUDA_ERROR_NO_DEVICE"):
        open_service("no_device")


def _fds() -> set[str]:
    """This process's open files, ``"<fd> <target>"``."""
    return {f"{fd} {os.readlink(f'/proc/self/fd/{fd}')}" for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")}


def test_service_exits_when_its_last_client_leaves_and_every_segment_is_freed(open_service):
    # Segments of earlier tests in this process (another module's, under
    # xdist) may be freed meanwhile, by the collector: only this test's must go.
    gc.collect()
    before = {fd for fd in _fds() if "hwdecomp" in fd}
    b = open_service("standin")
    pid = b.pid
    jobs, src, dst_len, expected = make_batch(ENGINE_ALGOS, [5000] * 8, seed=1)
    assert_outputs(run_batch(b, jobs, src, dst_len), jobs, expected)
    held = b.host_buffer(1000)
    b.close()
    assert wait_for_exit(pid, 20.0)  # the last client left: the service exited
    assert not b.address.socket.exists()
    held.close()  # lent past close: freed when given back
    assert {fd for fd in _fds() if "hwdecomp" in fd} <= before


def test_shared_pool_caps_reuses_and_overflows():
    freed = []
    with SharedPool(4 << 20, on_free=freed.append) as pool:
        a = pool.get(3 << 20)
        b = pool.get(3 << 20)  # over the cap: a segment of its own, freed on close
        assert pool.stats()["overflows"] == 1
        overflow_id = b.segment.id
        b.close()
        assert freed == [overflow_id]
        a.close()
        c = pool.get(3 << 20)
        assert pool.stats()["reuses"] == 1
        c.close()


def _resident_bytes(address: int) -> int:
    """Rss of the mapping of this process that starts at ``address`` (from /proc/self/smaps)."""
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                inside = int(head.split("-")[0], 16) == address
            elif inside and head == "Rss:":
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no mapping starts at {address:#x}")


def test_a_new_segment_has_every_page_allocated_before_it_is_shared():
    # The service registers what it is given; an unallocated page would be
    # allocated and zeroed inside the registration, under the driver's lock.
    with SharedPool(64 << 20) as pool:
        buf = pool.get(8 << 20)
        try:
            assert buf.segment is not None
            assert _resident_bytes(buf.segment.address) >= buf.segment.nbytes
            assert not np.frombuffer(buf.view, np.uint8).any()
        finally:
            buf.close()


def test_buffers_given_back_later_are_reused_by_the_next_get():
    with SharedPool(64 << 20) as pool:
        a = pool.get(3 << 20)
        first = a.segment.id
        pool.give_back_later(a)  # as a finalizer does: nothing freed or taken yet
        b = pool.get(3 << 20)
        assert b.segment.id == first and pool.stats()["reuses"] == 1
        b.close()


def test_gpu_timeout_option():
    assert current_options(gpu_timeout_s=5).gpu_timeout_s == 5
    os.environ["HWDECOMP_GPU_TIMEOUT_S"] = "7.5"
    try:
        assert current_options().gpu_timeout_s == 7.5
    finally:
        del os.environ["HWDECOMP_GPU_TIMEOUT_S"]
    with pytest.raises(ValueError, match="gpu_timeout_s"):
        Options(gpu_timeout_s=0)


@pytest.mark.parametrize("codec", ["snappy", "gzip", "lz4"])
def test_service_read_path_fetches_into_shared_memory(standin, tmp_path, matrix_source, codec):
    import fsspec
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dask_hwdecomp.decompress.cpu import CpuBackend
    from dask_hwdecomp.readpath.batch import iter_batches
    from dask_hwdecomp.readpath.plan import Piece, plan_piece

    from helpers import assert_tables_equal

    path = tmp_path / f"{codec}.parquet"
    pq.write_table(matrix_source, path, compression=codec, data_page_size=4096)
    fs = fsspec.filesystem("file")
    plan = plan_piece(fs, Piece(str(path), None), None)
    with CpuBackend(2) as cpu:
        # the stand-in engine first, as "auto" routes a real one
        router = Router.over(OPTS, {a: ([standin] if a in standin.algorithms else []) + [cpu] for a in Algo})
        report = ReadReport()
        # pyarrow decodes the image below: the GPU decoder has its own tests.
        (batch,) = iter_batches(fs, [plan], router, OPTS.replace(decode="cpu"), report)
        with batch:
            got = pq.read_table(pa.BufferReader(batch.images[0].buffer))
    assert_tables_equal(got, pq.read_table(path))
    assert ("hardware", {"lz4": "LZ4_RAW"}.get(codec, codec.upper())) in report.by_backend, dict(report.by_backend)
    assert standin.stats()["foreign_copies"] == 0  # the reader fetched straight into shared segments



def test_service_batch_error_on_pages_the_cpu_decodes_keeps_the_cpu_output_with_the_gpu_error(open_service):
    from dask_hwdecomp.gpu.errors import CudaError

    with open_service("standin_illegal_address_every_call") as b:
        pid = b.pid
        jobs, src, dst_len, expected = make_batch(ENGINE_ALGOS, [3000] * 4, seed=12)
        with pytest.raises(GpuBatchFailedError, match="CUDA_ERROR_ILLEGAL_ADDRESS.*the CPU decodes every page") as err:
            out = bytearray(dst_len)
            with b.host_buffer(len(src)) as s, b.host_buffer(dst_len) as d:
                s.view[:] = src
                try:
                    b.decompress(jobs, s.view, d.view)
                finally:
                    out[:] = d.view
        assert isinstance(err.value.__cause__, CudaError) and err.value.__cause__.code == 700
        assert_outputs(bytes(out), jobs, expected)
        # Not sent again: the CPU's output stands; the next request attaches to a fresh service.
        stats = b.stats()
        assert (stats["restarts"], stats["cpu_kept"]) == (1, 1) and b.pid != pid


def test_service_reports_pages_the_engine_redid_on_the_cpu(open_service):
    # The child's hardware backend redoes a failed engine operation on the
    # CPU; the count reaches this process and the read's report.
    with open_service("standin_fails_7777") as b:
        jobs, src, dst_len, expected = make_batch(ENGINE_ALGOS, [3000, 7777, 5000, 7777, 7777], seed=33)
        with b.host_buffer(len(src)) as s, b.host_buffer(dst_len) as d:
            s.view[:] = src
            assert b.decompress(jobs, s.view, d.view) == 3
            assert_outputs(bytes(d.view), jobs, expected)
        router = Router.over(OPTS, {a: [b] for a in ENGINE_ALGOS})
        with b.host_buffer(len(src)) as s, b.host_buffer(dst_len) as d:
            s.view[:] = src
            report = ReadReport()
            router.run(jobs, s.view, d.view, report)
            assert_outputs(bytes(d.view), jobs, expected)
        assert report.redone == {"hardware": 3}
