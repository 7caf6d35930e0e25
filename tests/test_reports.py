"""``collect_reports``: each block gets exactly its own reads (nested, threads, schedulers)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import dask.dataframe as dd
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dask_hwdecomp
from dask_hwdecomp import collect_reports, hwdecomp
from dask_hwdecomp.report_processes import ENV

CPU = {"backend": "cpu"}  # the page path: pages and bytes are counted


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("reports")
    out = []
    for i in range(4):
        path = root / f"part{i}.parquet"
        pq.write_table(pa.table({"k": np.arange(i * 2000, (i + 1) * 2000)}), path, compression="zstd", row_group_size=500)
        out.append(str(path))
    return out


def test_nested_blocks_keep_their_own_reads(files):
    with collect_reports() as outer:
        with collect_reports() as inner:
            pass
        dask_hwdecomp.read_table(files[0], **CPU)
    assert (outer.files, inner.files) == (1, 0)


def test_a_read_in_an_inner_block_counts_in_both(files):
    with collect_reports() as outer:
        dask_hwdecomp.read_table(files[0], **CPU)
        with collect_reports() as inner:
            dask_hwdecomp.read_table(files[1], **CPU)
        with collect_reports() as empty:
            pass
    assert (outer.files, inner.files, empty.files) == (2, 1, 0)


def _in_threads(work) -> list:
    """Run ``work(i, barrier)`` in two threads; return their results."""
    barrier = threading.Barrier(2, timeout=60)
    results: list = [None, None]
    errors: list = []

    def run(i):
        try:
            results[i] = work(i, barrier)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return results


def test_blocks_in_two_threads_get_their_own_reads(files):
    def work(i, barrier):
        with collect_reports() as report:
            barrier.wait()  # both blocks open and still empty
            for path in files[: i + 1]:
                dask_hwdecomp.read_table(path, **CPU)
            barrier.wait()  # both done reading before either closes
        return report.files

    assert _in_threads(work) == [1, 2]


def test_threaded_scheduler_reads_go_to_the_block_that_computes(files):
    def work(i, barrier):
        df = dd.read_parquet(files[: 2 * i + 1], engine=hwdecomp, hwdecomp_options=CPU)
        with collect_reports() as report:
            barrier.wait()
            df.compute(scheduler="threads")
            barrier.wait()
        return report.files

    assert _in_threads(work) == [1, 3]


def test_processes_scheduler_report_is_gathered(files):
    df = dd.read_parquet(files, engine=hwdecomp, hwdecomp_options=CPU)
    with collect_reports() as threaded:
        df.compute(scheduler="threads")
    with collect_reports() as processes:
        df.compute(scheduler="processes", num_workers=2)
    assert processes.files == threaded.files == 4
    assert processes.batches == threaded.batches
    assert {k: (s.pages, s.compressed_bytes) for k, s in processes.by_backend.items()} == {
        k: (s.pages, s.compressed_bytes) for k, s in threaded.by_backend.items()
    }
    assert ENV not in os.environ  # the spool is gone with the last block


@pytest.mark.distributed
def test_a_block_under_distributed_says_nothing_was_gathered_and_where_to_look(files):
    from distributed import Client, LocalCluster

    from dask_hwdecomp.engine.metrics import cluster_report
    from dask_hwdecomp.engine.plugin import HwdecompPlugin
    from dask_hwdecomp.report import NotGatheredWarning

    df = dd.read_parquet(files, engine=hwdecomp, hwdecomp_options=CPU)
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            client.register_plugin(HwdecompPlugin())
            with pytest.warns(NotGatheredWarning, match=r"cluster_report\(client\)"):
                with collect_reports() as report:
                    df.compute()
            # what it points to has the reads
            assert cluster_report(client).files == 4
            with collect_reports() as threaded:
                df.compute(scheduler="threads")  # in this process: gathered
    assert (report.files, dict(report.by_backend), dict(report.columns)) == (0, {}, {})
    assert "distributed" in report.not_gathered and "cluster_report(client)" in report.not_gathered
    assert str(report).startswith("nothing gathered: ")
    assert report.to_dict()["not_gathered"] == report.not_gathered
    assert threaded.files == 4 and threaded.not_gathered == ""


def _in_a_new_process(script: str) -> list:
    """Run ``script`` (which prints one JSON value) in a fresh interpreter: numba has loaded nothing there.

    The interpreter leaves with ``os._exit`` once the value is out: what is
    measured is its first reads, not its teardown (a fresh clone's CI run
    once saw such a child abort at exit, "terminate called without an
    active exception", after printing its stages; not reproduced since).
    """
    script = textwrap.dedent(script) + "\nimport os, sys\nsys.stdout.flush()\nos._exit(0)\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_kernel_load_of_a_first_read_is_booked_apart_from_its_scan(files):
    # numba loads the compiled scan and layout kernels on a process's first
    # read: most of a second, which was booked as a 15 ms scan's.
    first, second = _in_a_new_process(f"""
        import json, dask_hwdecomp
        reports = [dask_hwdecomp.ReadReport(), dask_hwdecomp.ReadReport()]
        for path, report in zip({files[:2]!r}, reports):
            dask_hwdecomp.read_table(path, backend="cpu", report=report)
        print(json.dumps([r.stages for r in reports]))
    """)
    assert first["kernel_load"] > first["scan"] > 0
    assert second["kernel_load"] == 0.0 and second["scan"] > 0


def test_loading_the_kernels_loads_them_for_what_a_read_passes(files):
    loaded, read, stages = _in_a_new_process(f"""
        import json, dask_hwdecomp
        from dask_hwdecomp.format import fastlayout, place_kernels, scan_kernels

        def signatures():
            kernels = {{"scan_chunks": scan_kernels.scan_chunks, "place": place_kernels.place,
                        "fill": place_kernels.fill}}
            return {{k: len(f.overloads) for k, f in kernels.items()}}

        assert fastlayout.load_kernels() > 0
        loaded = signatures()
        report = dask_hwdecomp.ReadReport()
        dask_hwdecomp.read_table({files[0]!r}, backend="cpu", report=report)
        print(json.dumps([loaded, signatures(), report.stages]))
    """)
    assert loaded == read == {"scan_chunks": 1, "place": 1, "fill": 1}  # the read compiled nothing more
    assert stages["kernel_load"] == 0.0


# --- what str(report) says ---------------------------------------------------------------------


def test_columns_decoded_alike_print_once_and_different_ones_each(tmp_path):
    path = tmp_path / "wide.parquet"
    pq.write_table(pa.table({f"c{i}": np.arange(2000) * i for i in range(16)}), path, row_group_size=500)
    report = dask_hwdecomp.ReadReport()
    dask_hwdecomp.read_table(path, backend="cpu", report=report)
    lines = report.decode_lines()
    assert lines == [
        f"all 16 columns decoded on pyarrow: 4 chunks and 2000 rows each, "
        f"{sum(d.arrow_bytes for d in report.columns.values()) / 1e6:.1f} MB Arrow (not on the GPU: no GPU backend in use)"
    ]
    assert lines[0] in str(report)
    report.add_decode("c0", "gpu", 4, 2000, 16000)  # one more place: each column says its own
    assert len(report.decode_lines()) == 17
    assert "column 'c0' decoded on gpu: 4 chunks, 2000 rows, 0.0 MB Arrow" in report.decode_lines()


def test_the_stages_line_says_its_seconds_are_summed_over_reads():
    # tasks read concurrently: their stages can add up to more than the wall time
    text = str(dask_hwdecomp.ReadReport())
    assert "stages (seconds summed over reads, which may run at once: can exceed the wall time): io 0.000s" in text


def test_the_user_guide_s_report_examples_run(files):
    # Its examples read the report as it is: DecodeStats records by attribute, decoded_on() as dicts.
    guide = (Path(__file__).resolve().parents[1] / "docs" / "user-guide.md").read_text()
    section = guide.split("\n## What happened\n", 1)[1].split("\n## ", 1)[0]
    examples = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(examples) == 2, examples
    scope = {"df": dd.read_parquet(files, engine=hwdecomp, hwdecomp_options=CPU)}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for example in examples:
            exec(example, scope)
    assert scope["report"].files == 4
    assert "k: pyarrow no GPU backend in use, 16 chunks, 8000 rows" in out.getvalue()
    assert "pyarrow: 1 columns, 16 chunks" in out.getvalue()
