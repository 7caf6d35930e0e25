"""The profiling timeline: spans of a real read through the GPU service (CPU stand-in), read back by window."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time

import pytest

from dask_hwdecomp.bench import timeline as tl

# The read below: 8 Snappy pages of 20,000 bytes each.
_PAGES, _PAGE_BYTES = 8, 20_000

_READ = r"""
import sys, time
import pyarrow as pa, pyarrow.parquet as pq
from dask_hwdecomp import timeline
sys.path.insert(0, sys.argv[2])
from service_backends import open_backend
from pagegen import make_batch, run_batch
from dask_hwdecomp.jobs import Algo
from dask_hwdecomp.options import Options
from dask_hwdecomp.report import ReadReport
import dask_hwdecomp

t0 = time.perf_counter()
with open_backend("standin", Options(streams=1, batch_bytes=8 << 20, cpu_threads=1), sys.argv[3]) as b:
    jobs, src, dst_len, _ = make_batch([Algo.SNAPPY], [int(sys.argv[4])] * int(sys.argv[5]), seed=3)
    run_batch(b, jobs, src, dst_len)
    b.stats()
pq.write_table(pa.table({"a": list(range(1000))}), sys.argv[1] + "/t.parquet")
dask_hwdecomp.read_table(sys.argv[1] + "/t.parquet", backend="cpu")
timeline.flush()
print(t0, time.perf_counter())
"""


@pytest.fixture(scope="module")
def service_read(tmp_path_factory) -> tuple[list[dict], tl.Window]:
    """The spans of a small read through the GPU service (the engine stand-in) and the read's window."""
    tmp_path = tmp_path_factory.mktemp("read")
    spans_dir = tmp_path / "spans"
    service_dir = f"/tmp/hwd-tl-{os.getpid()}"
    os.makedirs(service_dir, mode=0o700, exist_ok=True)
    env = {**os.environ, "HWDECOMP_TIMELINE": str(spans_dir)}
    tests = os.path.dirname(__file__)
    try:
        done = subprocess.run([sys.executable, "-c", _READ, str(tmp_path), tests, service_dir, str(_PAGE_BYTES),
                               str(_PAGES)], env=env, capture_output=True, text=True, timeout=240,
                              cwd=os.path.dirname(tests))
        assert done.returncode == 0, done.stderr[-3000:]
        t0, t1 = (float(x) for x in done.stdout.split())
        deadline = time.monotonic() + 20  # the service writes its spans when it exits
        while time.monotonic() < deadline:
            spans = tl.load(spans_dir)
            if {"run", "gpu_call", "gpu_sync"} <= {s["k"] for s in spans}:
                break
            time.sleep(0.2)
    finally:
        subprocess.run(["rm", "-rf", service_dir])
    return spans, tl.Window("read", t0, t1)


def test_a_read_and_the_service_record_their_spans_on_one_clock(service_read):
    spans, window = service_read
    kinds = {s["k"] for s in spans}
    # The service's spans (a process of its own) and the reader's, on one clock.
    assert {"run", "gpu_call", "gpu_sync", "stage_io", "stage_scan", "stage_decompress"} <= kinds, kinds
    assert len({s["proc"] for s in spans}) == 2
    summary = tl.summarize(spans, window)
    assert summary["run"]["count"] == 1 and summary["run"]["nbytes"] > 0
    for f in summary.values():
        assert 0 <= f["union_s"] <= f["sum_s"] + 1e-9 and f["union_s"] <= window.seconds + 1e-9
    assert "run" in tl.render(window, summary)


def test_each_gpu_call_of_a_read_is_listed_with_its_size_and_its_gpus_share(service_read):
    spans, window = service_read
    calls = tl.batcher_calls(spans, window)
    service = {s["proc"] for s in spans if s["k"] == "run"}
    # Every page of the read in some call of the service's one stream, every output byte counted once.
    assert calls and {(c.proc, c.stream) for c in calls} == {(service.pop(), 0)}
    assert sum(c.pages for c in calls) == _PAGES and sum(c.out_bytes for c in calls) == _PAGES * _PAGE_BYTES
    assert all(c.parts >= 1 for c in calls) and [c.t0 for c in calls] == sorted(c.t0 for c in calls)
    # The dispatcher's CPU seconds of each call; the stand-in has no GPU clock: no share, not a made-up one.
    assert all(c.cpu_s is not None and 0 <= c.cpu_s <= c.seconds + 1e-3 for c in calls)
    assert all(c.gpu_s is None and c.gpu_share is None for c in calls)
    text = tl.render(window, tl.summarize(spans, window), calls=calls)
    assert f"GPU calls: {len(calls)}" in text
    assert f"stream {calls[0].proc}/0: {len(calls)} calls" in text and "GPU -" in text
    assert sum(f"{c.proc}/0  {c.seconds:.4f} s" in line for c in calls for line in text.splitlines()) == len(calls)


def test_a_service_run_counts_the_cpu_seconds_of_its_thread(service_read):
    spans, _ = service_read
    runs = [s for s in spans if s["k"] == "run"]
    assert runs and all(0 <= s["cpu_s"] <= s["t1"] - s["t0"] + 1e-3 for s in runs)


def test_a_timed_calls_gpu_share_is_its_gpu_seconds_over_its_wall_and_each_stream_is_totalled():
    # Recorded spans: the events that time a call need a GPU (tests/gpu runs them there).
    def call(t0, t1, stream, gpu_s, pages):
        return {"k": "gpu_call", "t0": t0, "t1": t1, "proc": 7, "th": f"hwdecomp-stream-{stream}", "stream": stream,
                "parts": 2, "pages": pages, "nbytes": pages * 1_000_000, "gpu_s": gpu_s, "cpu_s": 0.01,
                "waited_s": 0.0}

    spans = [call(3.0, 3.5, 1, 0.125, 10), call(1.0, 2.0, 0, 0.5, 4), call(2.0, 2.5, 0, 0.25, 6),
             call(20.0, 21.0, 0, 0.5, 1)]  # after the read
    window = tl.Window("w", 0.0, 10.0)
    calls = tl.batcher_calls(spans, window)
    assert [(c.t0, c.stream, c.gpu_share) for c in calls] == [(1.0, 0, 0.5), (2.0, 0, 0.5), (3.0, 1, 0.25)]
    assert [c.out_bytes for c in calls] == [4_000_000, 6_000_000, 10_000_000]
    text = tl.render(window, {}, calls=calls)
    assert "stream 7/0: 2 calls, 1.500 s, parts 4, pages 10, 10.0 MB, GPU 0.7500 s (50%)" in text
    assert "stream 7/1: 1 calls, 0.500 s, parts 2, pages 10, 10.0 MB, GPU 0.1250 s (25%)" in text


def test_the_decoder_runners_split_is_its_cpu_its_gpu_waits_and_the_rest():
    # Recorded spans: one runner's run of 1 s, half of it inside the window.
    run = {"k": "decode_run", "t0": 9.0, "t1": 11.0, "proc": 5, "th": "runner", "cpu_s": 0.5}
    waits = [{"k": "measure_wait", "t0": 9.2, "t1": 9.5, "proc": 5, "th": "runner", "cpu_s": 0.1},
             {"k": "decode_sync", "t0": 9.6, "t1": 9.8, "proc": 5, "th": "runner", "cpu_s": 0.0},
             # another thread's wait is not the runner's; a step that is no wait is not one
             {"k": "write_wait", "t0": 9.2, "t1": 9.9, "proc": 5, "th": "copier", "cpu_s": 0.0},
             {"k": "decode_place", "t0": 9.1, "t1": 9.2, "proc": 5, "th": "runner", "cpu_s": 0.1}]
    [split] = tl.runner_split([run, *waits], tl.Window("w", 0.0, 10.0))
    assert (split.proc, split.thread, split.runs) == (5, "runner", 1)
    assert split.busy_s == pytest.approx(1.0) and split.cpu_s == pytest.approx(0.25)
    assert split.gpu_wait_s == pytest.approx(0.2 + 0.2) and split.other_s == pytest.approx(0.35)
    text = tl.render(tl.Window("w", 0.0, 10.0), {}, runners=[split])
    assert ("decoder runner 5 runner: 1 runs, busy 1.000 s (10%) of the read: CPU 0.250 s (25%), "
            "GPU waits 0.400 s (40%), other waits 0.350 s (35%)") in text


def test_a_real_decoder_runners_split_adds_up_to_its_busy_time(monkeypatch, tmp_path):
    # The hosted decoder's real kernels, under numba's CUDA simulator.
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dask_hwdecomp import timeline
    from dask_hwdecomp.gpudecode.hosted import DecodeRequest, HostedDecoder
    from dask_hwdecomp.gpudecode.merge import PlanRecords
    from dask_hwdecomp.gpudecode.plan import plan_file

    sink = io.BytesIO()
    pq.write_table(pa.table({"x": pa.array(np.arange(20), mask=np.arange(20) % 3 == 0)}), sink, compression="none")
    data = sink.getvalue()
    plan = plan_file(data)
    monkeypatch.setenv(timeline.ENV, str(tmp_path))
    t0 = time.perf_counter()
    decoder = HostedDecoder(runners=1, copy_streams=1)
    try:
        decoder.decode(DecodeRequest(memoryview(data), PlanRecords(plan.ranges, plan.chunks, plan.pages,
                                                                   plan.data_bytes))).close()
    finally:
        decoder.close()
    window = tl.Window("decode", t0, time.perf_counter())
    timeline.flush()
    spans = tl.load(tmp_path)
    kinds = {s["k"] for s in spans}
    # the run's steps, each a span for the Gantt chart
    assert {"decode_merge", "decode_upload", "decode_measure", "decode_place", "decode_write", "decode_split",
            "decode_sync", "measure_wait", "write_wait"} <= kinds, kinds
    [run] = [s for s in spans if s["k"] == "decode_run"]
    assert 0 < run["cpu_s"] <= run["t1"] - run["t0"] + 1e-3
    [split] = tl.runner_split(spans, window)
    assert split.thread == run["th"] == "hwdecomp-decoder-0" and split.runs == 1
    assert split.busy_s == pytest.approx(run["t1"] - run["t0"]) and split.cpu_s == pytest.approx(run["cpu_s"])
    # The simulator's "GPU" is this thread's CPU: its waits are the wall its syncs took past their CPU seconds.
    syncs = [s for s in spans if s["k"] in tl.GPU_WAITS and s["th"] == run["th"]]
    assert {s["k"] for s in syncs} >= {"measure_wait", "write_wait", "decode_sync"}
    assert split.gpu_wait_s == pytest.approx(sum(max(0.0, s["t1"] - s["t0"] - s["cpu_s"]) for s in syncs))
    assert split.cpu_s + split.gpu_wait_s + split.other_s == pytest.approx(split.busy_s)


def test_with_the_timeline_off_no_cpu_clock_is_read_and_no_event_pair_is_made(monkeypatch, tmp_path):
    from dask_hwdecomp import timeline
    from dask_hwdecomp.decompress.hardware import create_with
    from dask_hwdecomp.jobs import Algo
    from dask_hwdecomp.options import Options

    from pagegen import make_batch, run_batch
    from standin_hwengine import StandinHwEngine

    reads = []
    real = time.thread_time

    def counted() -> float:
        reads.append(threading.current_thread().name)
        return real()

    def no_pair():
        raise AssertionError("an event pair was made with the timeline off")

    monkeypatch.setattr(time, "thread_time", counted)
    engine = StandinHwEngine(mask=7, max_length=4 << 20)
    backend = create_with(engine, Options(streams=2, batch_latency_ms=1.0, batch_bytes=8 << 20))
    try:
        jobs, src, dst_len, _ = make_batch([Algo.SNAPPY], [20_000] * 4, seed=5)
        monkeypatch.delenv(timeline.ENV, raising=False)
        monkeypatch.setattr(engine, "event_pair", no_pair, raising=False)
        run_batch(backend, jobs, src, dst_len)
        assert timeline.thread_cpu() is None
        assert reads == []
        # On, the same read records the dispatcher's CPU seconds of its call.
        monkeypatch.delattr(engine, "event_pair")
        monkeypatch.setenv(timeline.ENV, str(tmp_path))
        run_batch(backend, jobs, src, dst_len)
    finally:
        backend.close()
    timeline.flush()
    calls = [s for s in tl.load(tmp_path) if s["k"] == "gpu_call"]
    assert calls and all("cpu_s" in s and s["gpu_s"] is None for s in calls) and reads


def test_union_counts_overlapping_spans_once():
    spans = [{"k": "x", "t0": 0.0, "t1": 2.0, "nbytes": 10}, {"k": "x", "t0": 1.0, "t1": 3.0, "nbytes": 10},
             {"k": "x", "t0": 5.0, "t1": 6.0}, {"k": "y", "t0": 9.0, "t1": 12.0, "nbytes": 30}]
    s = tl.summarize(spans, tl.Window("w", 0.0, 10.0))
    assert s["x"]["count"] == 3 and s["x"]["sum_s"] == 5.0 and s["x"]["union_s"] == 4.0
    # A span reaching out of the window counts by its part inside, its bytes likewise.
    assert s["y"]["union_s"] == 1.0 and s["y"]["nbytes"] == 10


def test_a_spans_fields_of_seconds_are_summed_by_their_share_in_the_window():
    spans = [{"k": "gpu", "t0": 0.0, "t1": 2.0, "gpu_measure_s": 0.5, "nbytes": 4, "th": "a_s"},
             {"k": "gpu", "t0": 9.0, "t1": 11.0, "gpu_measure_s": 0.25, "gpu_write_s": 1.0}]
    s = tl.summarize(spans, tl.Window("w", 0.0, 10.0))
    # the second span lies half inside: half its seconds count; strings and t0/t1 are no fields of seconds
    assert s["gpu"]["fields_s"] == {"gpu_measure_s": 0.625, "gpu_write_s": 0.5}
    assert "gpu_measure_s 0.625, gpu_write_s 0.500" in tl.render(tl.Window("w", 0.0, 10.0), s)


def test_a_process_that_sets_another_directory_records_there_from_then_on(tmp_path, monkeypatch):
    from dask_hwdecomp import timeline

    first, second = tmp_path / "first", tmp_path / "second"
    monkeypatch.setenv(timeline.ENV, str(first))
    timeline.record("one", 0.0, 1.0)
    monkeypatch.setenv(timeline.ENV, str(second))
    timeline.record("two", 1.0, 2.0)
    timeline.flush()
    assert [s["k"] for s in tl.load(first)] == ["one"]
    assert [s["k"] for s in tl.load(second)] == ["two"]


def test_spans_are_written_only_while_the_variable_is_set(tmp_path, monkeypatch):
    from dask_hwdecomp import timeline

    monkeypatch.setenv(timeline.ENV, str(tmp_path))
    with timeline.span("kept", nbytes=3) as fields:
        fields["extra"] = 1
    timeline.flush()
    monkeypatch.delenv(timeline.ENV)
    with timeline.span("dropped"):
        pass
    timeline.record("dropped", 0.0, 1.0)
    timeline.flush()
    spans = tl.load(tmp_path)
    assert [(s["k"], s["nbytes"], s["extra"]) for s in spans] == [("kept", 3, 1)]
    assert spans[0]["t1"] >= spans[0]["t0"] and not timeline.enabled()


def test_a_span_counts_its_threads_cpu_seconds_apart_from_its_waits(tmp_path, monkeypatch):
    from dask_hwdecomp import timeline

    monkeypatch.setenv(timeline.ENV, str(tmp_path))
    with timeline.span("waits"):
        time.sleep(0.2)
    with timeline.span("works"):
        end = time.thread_time() + 0.1
        while time.thread_time() < end:
            pass
    timeline.flush()
    spans = {s["k"]: s for s in tl.load(tmp_path)}
    waits, works = spans["waits"], spans["works"]
    assert waits["t1"] - waits["t0"] >= 0.2 and waits["cpu_s"] < 0.05
    assert works["cpu_s"] >= 0.1
    assert "cpu_s" in tl.summarize(list(spans.values()), tl.Window("w", waits["t0"], works["t1"]))["works"]["fields_s"]


def test_a_call_begun_with_the_timeline_off_is_not_recorded_without_its_cpu_seconds(monkeypatch, tmp_path):
    from dask_hwdecomp import timeline
    from dask_hwdecomp.gpu.batcher import Batcher

    from pagegen import make_part

    class TurnsItOn:
        """A call during which the timeline is set (as a test or a profile may, while a dispatcher works)."""

        def run(self, call):
            monkeypatch.setenv(timeline.ENV, str(tmp_path))
            return [[] for _ in call]

        def stats(self):
            return {}

        def close(self):
            pass

    class Ops:
        def activate(self):
            pass

    monkeypatch.delenv(timeline.ENV, raising=False)
    batcher = Batcher([TurnsItOn()], Ops(), budget_bytes=1 << 20, latency_s=0.0)
    try:
        assert batcher.run([make_part(0)]) == [[]]  # began off, ended on
        assert batcher.run([make_part(1)]) == [[]]  # on throughout
    finally:
        batcher.close()
    timeline.flush()
    calls = [s for s in tl.load(tmp_path) if s["k"] == "gpu_call"]
    assert len(calls) == 1 and "cpu_s" in calls[0]
