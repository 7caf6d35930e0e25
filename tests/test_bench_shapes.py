"""Cluster shapes: the default set, --cluster, every shape in one run, figures and targets named by shape."""

from __future__ import annotations

import json

import pytest

from dask_hwdecomp.bench import BenchConfig, run_bench
from dask_hwdecomp.bench.e2eruns import e2e_runs, shapes_of
from dask_hwdecomp.bench.markdown import render_report
from dask_hwdecomp.bench.shapes import ClusterShape, default_shapes, parse_shapes, threaded_shapes
from dask_hwdecomp.bench.stats import summarize
from dask_hwdecomp.bench.system import system_info
from dask_hwdecomp.bench.targets import check_targets
from dask_hwdecomp.cli.bench import config_from_args
from dask_hwdecomp.cli.main import build_parser, main


def _labels(shapes) -> list[str]:
    return [str(s) for s in shapes]


@pytest.mark.parametrize(("cores", "want"), [(16, ["4x4", "16x1", "1x16"]), (8, ["4x2", "8x1", "1x8"]),
                                             (6, ["4x1", "6x1", "1x6"]), (2, ["2x1", "1x2"]), (1, ["1x1"])])
def test_default_shapes_scale_with_the_cores(cores, want):
    assert _labels(default_shapes(cores)) == want
    assert all(s.total_threads <= cores for s in default_shapes(cores))


def test_shapes_parse_in_order_each_once():
    assert _labels(parse_shapes("4x4, 16x1,4x4,1x16")) == ["4x4", "16x1", "1x16"]
    assert parse_shapes([(2, 8), "4x4", ClusterShape(1, 2)]) == (ClusterShape(2, 8), ClusterShape(4, 4), ClusterShape(1, 2))
    for bad in ("4x", "4*4", "", "0x4"):
        with pytest.raises(ValueError, match="WORKERSxTHREADS|at least 1 worker"):
            parse_shapes(bad)
    # the threaded scheduler runs once per total of threads
    assert _labels(threaded_shapes("4x4,16x1,1x16,2x4")) == ["1x16", "1x8"]


def test_cluster_option_takes_a_list_and_defaults_to_the_scaled_set(capsys):
    parse = build_parser().parse_args
    assert _labels(config_from_args(parse(["bench", "--cluster", "4x4,16x1"])).shapes) == ["4x4", "16x1"]
    assert config_from_args(parse(["bench"])).shapes == default_shapes()
    assert config_from_args(parse(["bench"])).files == 32
    assert BenchConfig().shapes == default_shapes() and BenchConfig().files == 32
    with pytest.raises(SystemExit):
        main(["bench", "--cluster", "4x4,lots"])
    assert "'lots' is not WORKERSxTHREADS" in capsys.readouterr().err
    (sub,) = [a for a in build_parser()._actions if a.choices and "bench" in a.choices]
    text = " ".join(sub.choices["bench"].format_help().split())
    assert "(default: 4x(C/4),Cx1,1xC on C cores: here " + ",".join(_labels(default_shapes())) + ")" in text


def _fig(gbps, cpu=1.0, gpu=None) -> dict:
    return {"arrow_gbps": summarize([gbps]), "file_gbps": summarize([gbps]), "cpu_s_per_gb": summarize([cpu]),
            "report": None, "gpu": gpu}


def _per_variant(pyarrow: float, auto: float, gpu=None) -> dict:
    return {"pyarrow": {"uncompressed": _fig(pyarrow), "snappy": _fig(pyarrow)},
            "hwdecomp-auto": {"uncompressed": _fig(auto), "snappy": _fig(auto, gpu=gpu)},
            "hwdecomp-cpu": {"uncompressed": _fig(pyarrow), "snappy": _fig(pyarrow)}}


def _by_shape_results() -> dict:
    """lineitem at 4x4 (hwdecomp-auto 3.5x pyarrow) and 16x1 (2x, one GPU context, 2500 pages a call), 3 GB."""
    gpu = {"services": 1, "gpu_processes": 1, "calls_per_read": 4.0, "pages_per_call": 2500.0}
    return {"started": "now", "finished": "later", "system": system_info(), "skipped": {},
            "config": {"shapes": ["4x4", "16x1"], "repeats": 3, "command": "hwdecomp bench", "schedulers": (),
                       "parts": ()},
            "datasets": {"lineitem": {"file_bytes": {"uncompressed": 3 * 10**9, "snappy": 10**9}, "rows": 1,
                                      "arrow_bytes": 3 * 10**9, "files": 32}},
            "endtoend": {"lineitem": {"distributed": {"4x4": _per_variant(2.0, 7.0), "16x1": _per_variant(2.0, 4.0, gpu)},
                                      "threads": {"1x16": _per_variant(1.0, 1.0)}}}}


def test_targets_are_judged_at_each_shape_and_the_shape_bound_ones_at_theirs():
    results = _by_shape_results()
    checks = check_targets(results)
    uncompressed = [c for c in checks if c["kind"] == "uncompressed"]
    assert [(c["shape"], c["what"].split(":")[0], c["value"]) for c in uncompressed] == [
        ("4x4", "lineitem, LocalCluster 4x4, uncompressed", 3.5), ("16x1", "lineitem, LocalCluster 16x1, uncompressed", 2.0)]
    (decode,) = [c for c in checks if c["kind"] == "gpu-decode"]
    assert decode["shape"] == "4x4" and decode["value"] == pytest.approx(3.5) and decode["met"] is True
    (contexts,) = [c for c in checks if c["kind"] == "contexts"]
    (per_call,) = [c for c in checks if c["kind"] == "pages-per-call"]
    assert contexts["shape"] == per_call["shape"] == "16x1" and contexts["met"] is True and per_call["value"] == 2500
    # every end-to-end line records its shape (the kernels alone have none)
    assert all(c["shape"] in ("4x4", "16x1") for c in checks if c["kind"] not in ("decompress", "gpu-kernels"))
    # a shape the run has no figures of says so
    del results["endtoend"]["lineitem"]["distributed"]["16x1"]
    (contexts,) = [c for c in check_targets(results) if c["kind"] == "contexts"]
    assert contexts["met"] is None and contexts["limit"] == "not measured: the run has no LocalCluster 16x1 read of lineitem"


def test_shape_bound_targets_name_the_shapes_a_run_had():
    results = _by_shape_results()
    results["config"]["shapes"] = ["2x1", "1x2"]
    results["endtoend"]["lineitem"]["distributed"] = {"2x1": _per_variant(2.0, 2.0), "1x2": _per_variant(2.0, 2.0)}
    checks = check_targets(results)
    for kind in ("contexts", "pages-per-call", "gpu-decode"):
        assert {c["limit"] for c in checks if c["kind"] == kind} == {"not measured (clusters 2x1, 1x2)"}, kind


def test_report_and_results_name_the_shape_of_every_figure():
    results = _by_shape_results()
    text = render_report(results, check_targets(results), {})
    assert "one LocalCluster each, the variants interleaved within it: 4x4, 16x1; threaded scheduler: 16 threads" in text
    headings = [line for line in text.splitlines() if line.startswith("### ")]
    assert headings == ["### lineitem, LocalCluster 4x4", "### lineitem, LocalCluster 16x1",
                        "### lineitem, threaded scheduler, 16 threads"]
    assert [(r.scheduler, r.shape) for r in e2e_runs(results)] == [("distributed", "4x4"), ("distributed", "16x1"),
                                                                   ("threads", "1x16")]


def test_results_of_one_shape_from_before_read_as_that_shape():
    old = {"config": {"workers": 4, "threads": 4},
           "endtoend": {"lineitem": {"distributed": _per_variant(2.0, 7.0), "threads": _per_variant(1.0, 1.0)}}}
    assert [(r.scheduler, r.shape) for r in e2e_runs(old)] == [("distributed", "4x4"), ("threads", "1x16")]
    assert shapes_of(old, "distributed") == ["4x4"] and shapes_of(old, "threads") == ["1x16"]
    (decode,) = [c for c in check_targets(old) if c["kind"] == "gpu-decode"]
    assert decode["value"] == pytest.approx(3.5)
    # results that recorded no shape at all still name their runs
    (run,) = e2e_runs({"endtoend": {"lineitem": {"threads": _per_variant(1.0, 1.0)}}})
    assert run.where == "threaded scheduler, shape ?"


@pytest.mark.distributed
def test_every_shape_is_measured_in_one_run(tmp_path):
    cfg = BenchConfig(out_dir=tmp_path / "out", size_bytes=1_000_000, datasets=("lineitem",), codecs=("uncompressed",),
                      files=1, repeats=1, parts=("e2e",), shapes=("1x2", "2x1"), backends=("cpu",), decodes=("auto",),
                      progress=False)
    run_bench(cfg)
    results = json.loads((cfg.out_dir / "results.json").read_text())
    assert results["config"]["shapes"] == ["1x2", "2x1"]
    e2e = results["endtoend"]["lineitem"]
    # one LocalCluster per shape; the threaded scheduler once: both shapes have 2 threads
    assert list(e2e["distributed"]) == ["1x2", "2x1"] and list(e2e["threads"]) == ["1x2"]
    for shape in ("1x2", "2x1"):
        per_variant = e2e["distributed"][shape]
        assert set(per_variant) == {"pyarrow", "hwdecomp-cpu", "ipc-ceiling"}
        assert all(fig["arrow_gbps"]["median"] > 0 for codecs in per_variant.values() for fig in codecs.values())
    report = (cfg.out_dir / "report.md").read_text()
    assert "### lineitem, LocalCluster 1x2 (small read)" in report and "### lineitem, LocalCluster 2x1 (small read)" in report
    assert {c["shape"] for c in results["targets"] if c["kind"] == "cpu-backend"} == {"1x2", "2x1"}
