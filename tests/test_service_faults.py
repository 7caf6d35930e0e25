"""What a fault of the GPU service costs, and whom, without a GPU (CI).

The deadline rule (``service/deadline.py``) on its own; then real service
processes hosting the GPU backend's code over the engine stand-in
(``standin_hwengine.StandinHwEngine``) with the faults nvCOMP 6.0 showed on
the H200 (a call that hangs, a process that dies), a stand-in that is slow
(a busy GPU), and one that is SIGKILLed under 16 readers. The stand-ins
that test the rule declare the rate they are granted (``service_backends``).
Asserted: which error names which page, how many requests were retried,
timed out or restarted, what was left behind; never how fast anything was.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dask_hwdecomp.errors import CorruptPageError
from dask_hwdecomp.format.codecs import Algo
from dask_hwdecomp.options import Options
from dask_hwdecomp.report import ReadReport
from dask_hwdecomp.routing.router import Router
from dask_hwdecomp.service.connection import InFlight, Overdue, ServiceGone, TakenUp
from dask_hwdecomp.service.deadline import FLOOR_S, GPU_BYTES_PER_S, deadline_s
from dask_hwdecomp.service.launch import wait_for_exit

from corruption import corrupt
from helpers import gpu_available, until
from pagegen import assert_outputs, make_batch, run_batch
from service_backends import BUSY_BYTES_PER_S, EVENTS_ENV, MERGE_ENV, events, open_backend
from service_readers import READ_OPTIONS, read_in_threads, registry_on, shared_segments

OPTS = Options(streams=1, batch_latency_ms=1.0, batch_bytes=8 << 20, cpu_threads=2)
ENGINE_ALGOS = (Algo.SNAPPY, Algo.DEFLATE, Algo.LZ4)
TESTS = Path(__file__).resolve().parent


# -- the rule ------------------------------------------------------------------

def test_deadline_is_a_second_and_the_bytes_queued_ahead_at_most_gpu_timeout():
    assert deadline_s(4096, GPU_BYTES_PER_S, 60.0) == pytest.approx(FLOOR_S, abs=1e-3)
    assert deadline_s(0, GPU_BYTES_PER_S, 60.0, wait_s=0.002) == pytest.approx(FLOOR_S + 0.002)
    assert deadline_s(256 << 20, GPU_BYTES_PER_S, 60.0) == pytest.approx(FLOOR_S + 0.25)
    assert deadline_s(1 << 40, GPU_BYTES_PER_S, 60.0) == 60.0  # gpu_timeout_s bounds it
    assert deadline_s(1, 0, 7.5) == 7.5  # no rate known: only the bound
    # 16 tasks of 100 MB of output (150 MB in and out) sent together: the
    # k-th is done after k + 1 tasks' bytes at the service's speed, and given
    # a second plus the k tasks ahead of it and its own at the rule's rate,
    # at 8 GB/s and on a GPU busy enough to give a fifth of that.
    task = 150_000_000
    for speed in (8e9, 1.6e9):
        for k in range(16):
            assert (k + 1) * task / speed < deadline_s(k * task + task, GPU_BYTES_PER_S, 60.0), (speed, k)


def _answer_later(flight: InFlight, seconds: float, msg="done") -> None:
    threading.Timer(seconds, flight.answer.set_result, args=(msg,)).start()


def test_a_request_waits_until_its_deadline_counted_from_when_the_service_took_it_up():
    # Sent 30 s ago, taken up now with 4 GiB ahead of it: its deadline is 5 s
    # from now, so an answer a moment later is taken.
    flight = InFlight()
    flight.sent -= 30.0
    flight.started.set_result(TakenUp(time.monotonic(), 4 << 30, GPU_BYTES_PER_S))
    _answer_later(flight, 0.05)
    assert flight.wait(1000, limit_s=60.0) == "done"
    # Taken up with nothing ahead and no answer: overdue after about a second.
    flight = InFlight()
    flight.started.set_result(TakenUp(time.monotonic(), 0, GPU_BYTES_PER_S))
    with pytest.raises(Overdue, match=r"did not answer within 1\.0 s of taking the request up \(1000 B in and "
                                      r"out, 0 B ahead of it, at 1\.0 GiB/s\)"):
        flight.wait(1000, limit_s=60.0)


def test_a_request_never_taken_up_or_of_no_known_rate_waits_gpu_timeout_s():
    flight = InFlight()
    with pytest.raises(Overdue, match=r"did not take the request up within 0\.2 s \(gpu_timeout_s\)"):
        flight.wait(1000, limit_s=0.2)
    flight = InFlight()
    flight.started.set_result(TakenUp(time.monotonic(), 0, 0))
    with pytest.raises(Overdue, match=r"did not answer within 0\.2 s \(gpu_timeout_s\)"):
        flight.wait(1000, limit_s=0.2)
    flight = InFlight()  # a service lost meanwhile ends the wait with that
    flight.answer.set_exception(ServiceGone("died (test)"))
    with pytest.raises(ServiceGone, match="died"):
        flight.wait(1000, limit_s=60.0)


def test_a_started_message_wakes_a_request_that_waits_for_it():
    # The wait follows the take-up when it comes, not only at gpu_timeout_s.
    flight = InFlight()
    threading.Timer(0.05, flight.started.set_result,
                    args=(TakenUp(time.monotonic(), 0, GPU_BYTES_PER_S),)).start()
    with pytest.raises(Overdue, match="of taking the request up"):
        flight.wait(0, limit_s=60.0)


def test_the_steps_a_service_loads_first_are_all_a_run_compiles():
    # A run of the GPU backend's code (over the engine stand-in) with jobs and
    # ranges as the service unpacks them, in shared memory, adds no compiled
    # signature to those load_run_steps loaded: nothing is left for numba to
    # load inside a run's deadline. A run of one job too: its columns view
    # the read-only wire bytes and are contiguous as they are.
    from dask_hwdecomp.decompress.hardware import create_with
    from dask_hwdecomp.decompress.table_checks import _walk
    from dask_hwdecomp.gpu.staging import _run_ids
    from dask_hwdecomp.service import wire
    from dask_hwdecomp.service.server import load_run_steps
    from dask_hwdecomp.service.shm import SharedPool

    from standin_hwengine import StandinHwEngine

    load_run_steps()
    loaded = {f: set(f.signatures) for f in (_walk, _run_ids)}
    jobs, src, dst_len, expected = make_batch(ENGINE_ALGOS, [3000] * 6, seed=2)
    with SharedPool(16 << 20) as pool, create_with(StandinHwEngine(), OPTS) as backend:
        for some, protect in ((jobs, []), (jobs, [(jobs[0].dst_offset + jobs[0].dst_size, jobs[1].dst_offset)]),
                              (jobs[:1], [])):
            with pool.get(len(src)) as s, pool.get(dst_len) as d:
                s.view[:] = src
                run = wire.Run(1, 1, 0, len(src), 2, 0, dst_len, len(some), len(protect), False)
                table, ranges = wire.unpack_jobs(run, wire.pack_jobs(some) + wire.pack_protect(protect))
                backend.decompress(table, s.view, d.view, protect=ranges)
                assert_outputs(bytes(d.view), some, expected[: len(some)])
    assert {f: set(f.signatures) for f in loaded} == loaded


# -- through a service -------------------------------------------------------------

@pytest.fixture
def open_service(service_dir):
    def open_(factory: str, **changes):
        return open_backend(factory, OPTS.replace(**changes), service_dir)

    return open_


def _corrupt(batch, which: list[int], seed=7):
    """``batch`` (of Snappy pages) with noise after the preamble of the jobs ``which``: host checks pass."""
    jobs, src, _, _ = batch
    for k in which:
        corrupt(Algo.SNAPPY, "noise", jobs[k], src, np.random.default_rng(seed))
    return batch


@pytest.mark.timeout(120)
def test_standin_hang_on_a_corrupt_page_read_alone_is_found_after_a_second(open_service):
    # gpu_timeout_s is the minute it always was; the page is named when the
    # request's own deadline passes (the message says which rule applied).
    with open_service("standin_hangs_at_gpu_rate", gpu_timeout_s=60.0) as b:
        jobs, src, dst_len, _ = _corrupt(make_batch([Algo.SNAPPY], [6000] * 12, seed=5), [4])
        bad = jobs[4]
        with pytest.raises(CorruptPageError, match=r"did not answer within 1\.0 s of taking the request up") as err:
            run_batch(b, jobs, src, dst_len)
        assert err.value.location == bad.location
        stats = b.stats()  # from a fresh service
        assert (stats["timeouts"], stats["restarts"], stats["retried"]) == (1, 1, 0), stats
        good = make_batch(ENGINE_ALGOS, [5000] * 20, seed=6)
        assert_outputs(run_batch(b, *good[:3]), good[0], good[3])


@pytest.mark.timeout(120)
def test_standin_busy_service_serves_16_queued_tasks_without_a_timeout(open_service):
    # One stream, one task a call, each call taking its bytes at the busy
    # rate: the last of 16 tasks queued behind each other is answered well
    # after the deadline one task alone would have; counted with the bytes
    # ahead of it, none is taken for hung. Each task is sent once the
    # service took the one before up, so that they queue in that order
    # (taken up at the same moment, a CPU-starved CI service may let them
    # reach the batcher in any order, which only the GPU's speed absorbs).
    batches = [make_batch(ENGINE_ALGOS, [40_000] * 20, seed=40 + t) for t in range(16)]
    task = len(batches[0][1]) + batches[0][2]
    failed: list = []

    def read(batch):
        try:
            assert_outputs(run_batch(b, *batch[:3]), batch[0], batch[3])
        except BaseException as exc:  # raised below
            failed.append(exc)

    with open_service("standin_busy", streams=1, batch_bytes=20 * 40_000) as b:
        first = b.stats()["taken_up"]
        began = time.monotonic()
        threads = []
        for k, batch in enumerate(batches):
            threads.append(threading.Thread(target=read, args=(batch,)))
            threads[-1].start()
            until(lambda k=k: b.stats()["taken_up"] > first + k, f"task {k} taken up", every_s=0.002)
        for t in threads:
            t.join(100)
        took = time.monotonic() - began
        stats = b.stats()
    assert not failed, failed[0]
    assert (stats["timeouts"], stats["restarts"], stats["recoveries"]) == (0, 0, 0), stats
    # The sleeps alone outlast a lone task's deadline: the queue was real.
    assert took > deadline_s(task, BUSY_BYTES_PER_S // 8, 60.0, 0.001)


TASKS = 8


@pytest.mark.timeout(180)
@pytest.mark.parametrize("fault,said", [("hangs", "did not answer within"), ("dies", "died (exited with status -9)"),
                                        ("illegal_address", "CUDA_ERROR_ILLEGAL_ADDRESS")])
def test_standin_fault_in_a_call_merged_from_8_tasks_is_the_bad_tasks_alone(fault, said, open_service, service_dir,
                                                                             monkeypatch):
    # The service's first call waits until the 8 tasks' parts are queued, so
    # the corrupt page's call holds pages of all 8; it hangs (or the service
    # dies) there. The bad task gets its page named, by its own deadline;
    # the 7 others are released by that kill, not their own deadlines, found
    # innocent on the CPU, which keeps their output (reported). A call
    # that fails as a whole reaches the bad task by one of three ways (its
    # own reply, the kill of the task that got one, the service's exit
    # after sending one): each names the CUDA error.
    log = os.path.join(service_dir, "events")
    monkeypatch.setenv(EVENTS_ENV, log)
    monkeypatch.setenv(MERGE_ENV, str(TASKS))
    bad_batch = make_batch([Algo.SNAPPY], [12_000, 12_000], seed=50)
    _corrupt(bad_batch, [1])
    innocents = [make_batch(ENGINE_ALGOS, [3000] * 30, seed=60 + t) for t in range(TASKS - 1)]
    results: dict = {}

    def read(key, batch):
        jobs, src, dst_len = batch[:3]
        report = ReadReport()
        try:  # as a read does: the router keeps the CPU's output of an innocent batch
            with b.host_buffer(len(src)) as s, b.host_buffer(dst_len) as d:
                s.view[:] = src
                Router.over(OPTS, {a: [b] for a in ENGINE_ALGOS}).run(jobs, s.view, d.view, report)
                results[key] = (bytes(d.view), report)
        except BaseException as exc:  # inspected below
            results[key] = exc

    with open_service(f"standin_{fault}_merged", gpu_timeout_s=60.0) as b:
        threads = [threading.Thread(target=read, args=("bad", bad_batch))]
        threads[0].start()
        until(lambda: "held" in events(log), "the bad task's part waits for the others")
        threads += [threading.Thread(target=read, args=(k, batch)) for k, batch in enumerate(innocents)]
        for t in threads[1:]:
            t.start()
        for t in threads:
            t.join(120)
        stats = b.stats()
    bad = results["bad"]
    assert isinstance(bad, CorruptPageError), bad
    assert bad.location == bad_batch[0][1].location and said in str(bad), str(bad)
    for k, (jobs, _, _, expected) in enumerate(innocents):
        assert not isinstance(results[k], BaseException), results[k]
        out, report = results[k]
        assert_outputs(out, jobs, expected)
        assert len(report.retries) == 1 and "its output is used" in report.retries[0], report.retries
        assert {b for b, _ in report.by_backend} == {"cpu"}, report.by_backend
    assert [e for e in events(log) if e.startswith("fault")] == [f"fault {2 + 30 * (TASKS - 1)}"]
    counts = {k: stats[k] for k in ("restarts", "recoveries", "cpu_kept", "retried", "timeouts")}
    assert counts == {"restarts": 1, "recoveries": TASKS, "cpu_kept": TASKS - 1, "retried": 0,
                      "timeouts": 1 if fault == "hangs" else 0}, counts


def _files(root: Path) -> list[str]:
    rng = np.random.default_rng(3)
    n = 5000
    table = pa.table({"k": np.arange(n), "v": rng.random(n),
                      "s": pa.array([f"row-{j % 300}" for j in range(n)])})
    paths = []
    for codec in ("snappy", "gzip", "lz4", "snappy"):
        path = root / f"{len(paths)}-{codec}.parquet"
        pq.write_table(table, path, compression=codec, data_page_size=8 << 10, use_dictionary=len(paths) != 3)
        paths.append(str(path))
    return paths


@pytest.mark.timeout(300)
def test_standin_service_sigkilled_under_16_readers_every_read_ends_right(service_dir, tmp_path):
    # 16 readers: 4 threads in each of 2 processes and 8 in this one, over a
    # busy stand-in. The service is SIGKILLed while requests are in it: every
    # read returns pyarrow's table (a batch lost under it keeps the CPU's
    # output, and the report says why), no reader process dies, and
    # no shared segment is left open in any of them.
    paths = _files(tmp_path)
    before = shared_segments()
    reader = [sys.executable, str(TESTS / "service_readers.py"), service_dir, "standin_busy", "4", "3", *paths]
    others = [subprocess.Popen(reader, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        for p in others:
            assert p.stdout.readline().strip() == "reading"
        with registry_on(service_dir, "standin_busy") as opened:
            from dask_hwdecomp import read_table

            read_table(paths[0], **READ_OPTIONS)
            b = opened["hardware"]
            here: dict = {}
            mine = threading.Thread(target=lambda: here.update(read_in_threads(paths, 8, 3)))
            mine.start()
            until(lambda: b.stats()["taken_run_bytes"] > 0, "a request in the service", every_s=0.001)
            killed = b.pid
            os.kill(killed, signal.SIGKILL)
            mine.join(240)
            outs = [p.communicate(timeout=240)[0] for p in others]
            stats = b.stats()  # every reader done
    finally:
        for p in others:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in others] == [0, 0]
    theirs = [json.loads(out.splitlines()[-1]) for out in outs]
    here.update({k: stats[k] for k in ("restarts", "recoveries", "cpu_kept", "retried", "timeouts")})
    for summary in (here, *theirs):
        assert (summary["errors"], summary["wrong"], summary["unreported"]) == ([], [], []), summary
        assert summary["reads"] == (8 if summary is here else 4) * 3 * len(paths), summary
        assert summary["cpu_kept"] == summary["recoveries"] and summary["timeouts"] == 0, summary
    assert sum(s["recoveries"] for s in (here, *theirs)) >= 1  # reads were in flight at the kill
    assert here["restarts"] >= 1 and wait_for_exit(killed, 10.0)
    # Nothing left in the service, nothing mapped there that this process freed ...
    assert stats["taken_run_bytes"] == 0 and stats["mapped_segments"] <= stats["pinned_idle_blocks"], stats
    # ... and no segment left open here or in the other readers.
    assert shared_segments() <= before
    assert [s["segments_left"] for s in theirs] == [[], []]


def _memfd_mappings(pid: int) -> int:
    """Mappings of the readers' shared-pool memfds in process ``pid``."""
    return sum("memfd:hwdecomp-" in line for line in Path(f"/proc/{pid}/maps").read_text().splitlines())


@pytest.mark.timeout(180)
def test_a_reader_killed_mid_read_leaves_none_of_its_segments_in_the_service(service_dir, tmp_path):
    # Another process reads through the service this process uses, and is
    # SIGKILLed mid-read, its segments shared and requests in flight. The
    # service drops its connection and unmaps (and unpins) every segment it
    # shared, and goes on serving this process.
    paths = _files(tmp_path)
    with registry_on(service_dir, "standin_busy") as opened:
        from dask_hwdecomp import read_table

        read_table(paths[0], **READ_OPTIONS)
        b = opened["hardware"]
        service = b.pid
        mine = _memfd_mappings(service)
        pinned = b.stats()["all_host_pinned_bytes"]
        reader = subprocess.Popen([sys.executable, str(TESTS / "service_readers.py"), service_dir, "standin_busy",
                                   "4", "50", *paths], stdout=subprocess.PIPE, text=True)
        try:
            assert reader.stdout.readline().strip() == "reading"
            until(lambda: b.stats()["clients"] == 2 and b.stats()["taken_run_bytes"] > 0
                   and _memfd_mappings(service) > mine, "the other reader's requests in the service", every_s=0.001)
            os.kill(reader.pid, signal.SIGKILL)
            assert reader.wait(30) == -signal.SIGKILL
        finally:
            if reader.poll() is None:
                reader.kill()
        until(lambda: b.stats()["clients"] == 1, "the service to drop the killed reader's connection")
        until(lambda: _memfd_mappings(service) <= mine, "the killed reader's segments unmapped in the service", timeout_s=20)
        stats = b.stats()
        assert stats["all_host_pinned_bytes"] <= pinned and stats["taken_run_bytes"] == 0, stats
        assert b.pid == service  # the same service, still serving this process
        assert read_table(paths[1], **READ_OPTIONS).equals(pq.read_table(paths[1]))


# -- the decode path -----------------------------------------------------------

def _decode_source(b):
    table = pa.table({"x": pa.array(np.arange(600, dtype=np.int64)),
                      "y": pa.array(np.random.default_rng(1).random(600))})
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="none", use_dictionary=False, data_page_size=1024)
    data = sink.getvalue()
    buf = b.host_buffer(len(data))
    buf.view[: len(data)] = data
    return table, buf, buf.view[: len(data)]


@pytest.mark.timeout(180)
def test_standin_decoder_that_hangs_is_killed_by_the_same_rule_and_the_decode_lost(service_dir):
    from dask_hwdecomp.gpudecode.plan import plan_file
    from dask_hwdecomp.service.decoding import DecoderLost

    with open_backend("standin_decoder_hangs", OPTS.replace(gpu_timeout_s=60.0), service_dir) as b:
        _, buf, view = _decode_source(b)
        with pytest.raises(DecoderLost, match=r"did not answer within 1\.0 s of taking the request up.*"
                                              r"sent again after: .*did not answer within 1\.0 s"):
            b.decode(plan_file(view), view)
        buf.close()
        assert (b.timeouts, b.retried) == (2, 0)


@pytest.mark.timeout(240)
@pytest.mark.skipif(gpu_available(), reason="killing the service during a decode needs the simulator's slow one")
def test_standin_service_killed_during_a_decode_sends_it_again_to_a_fresh_one(service_dir):
    from dask_hwdecomp.gpudecode.assemble import assemble
    from dask_hwdecomp.gpudecode.plan import plan_file

    with open_backend("standin", OPTS, service_dir) as b:
        table, buf, view = _decode_source(b)
        plan = plan_file(view)
        done: Future = Future()

        def decode():
            try:
                done.set_result(b.decode(plan, view))
            except BaseException as exc:  # raised below, in the test's thread
                done.set_exception(exc)

        threading.Thread(target=decode).start()
        until(lambda: b.stats()["taken_decode_bytes"] > 0, "the decode in the service", timeout_s=120)
        os.kill(b.pid, signal.SIGKILL)
        out = done.result(timeout=200)
        (columns,) = assemble(out.buffer, out.owner, out.chunks, plan)
        assert all(columns[name].equals(table.column(name)) for name in table.column_names)
        buf.close()
        assert (b.retried, b.timeouts, b.restarts) == (1, 0, 1)
