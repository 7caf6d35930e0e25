"""The profiling timeline: spans of a real read through the GPU service (CPU stand-in), read back by window."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from dask_hwdecomp.bench import timeline as tl

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
    jobs, src, dst_len, _ = make_batch([Algo.SNAPPY], [20_000] * 8, seed=3)
    run_batch(b, jobs, src, dst_len)
    b.stats()
pq.write_table(pa.table({"a": list(range(1000))}), sys.argv[1] + "/t.parquet")
dask_hwdecomp.read_table(sys.argv[1] + "/t.parquet", backend="cpu")
timeline.flush()
print(t0, time.perf_counter())
"""


def test_a_read_and_the_service_record_their_spans_on_one_clock(tmp_path):
    spans_dir = tmp_path / "spans"
    service_dir = f"/tmp/hwd-tl-{os.getpid()}"
    os.makedirs(service_dir, mode=0o700, exist_ok=True)
    env = {**os.environ, "HWDECOMP_TIMELINE": str(spans_dir)}
    tests = os.path.dirname(__file__)
    try:
        done = subprocess.run([sys.executable, "-c", _READ, str(tmp_path), tests, service_dir], env=env,
                              capture_output=True, text=True, timeout=240, cwd=os.path.dirname(tests))
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
    kinds = {s["k"] for s in spans}
    # The service's spans (a process of its own) and the reader's, on one clock.
    assert {"run", "gpu_call", "gpu_sync", "stage_io", "stage_scan", "stage_decompress"} <= kinds, kinds
    assert len({s["proc"] for s in spans}) == 2
    window = tl.Window("read", t0, t1)
    summary = tl.summarize(spans, window)
    assert summary["run"]["count"] == 1 and summary["run"]["nbytes"] > 0
    for f in summary.values():
        assert 0 <= f["union_s"] <= f["sum_s"] + 1e-9 and f["union_s"] <= window.seconds + 1e-9
    assert "run" in tl.render(window, summary)


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
