"""``hwdecomp bench`` at a tiny size: a report and positive figures, not speed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dask_hwdecomp.bench import BenchConfig, run_bench
from dask_hwdecomp.bench.pages import PAGE_CODECS, compress_pages
from dask_hwdecomp.bench.tables import KINDS, make_table
from dask_hwdecomp.cli.bench import parse_size
from dask_hwdecomp.decompress.cpu import CpuBackend

from helpers import gpu_available


def _positive(summary):
    return summary["n"] >= 1 and summary["min"] > 0 and summary["min"] <= summary["median"] <= summary["max"]


@pytest.mark.distributed
def test_tiny_run_writes_report_and_positive_figures(tmp_path):
    cfg = BenchConfig(
        out_dir=tmp_path / "out",
        size_bytes=3_000_000,
        datasets=("lineitem", "entropy"),
        codecs=("uncompressed", "gzip"),
        files=2,
        repeats=1,
        shapes=("1x2",),
        backends=("auto", "cpu", "nvcomp"),
        decompress_bytes=4 << 20,
        pages_per_call=(1, 4),
        streams=(1,),
        progress=False,
    )
    run_bench(cfg)
    results = json.loads((cfg.out_dir / "results.json").read_text())
    report = (cfg.out_dir / "report.md").read_text()
    assert "## Targets" in report and "## System" in report
    assert not re.search(r"issue \d", report, re.I), "the report is for users: no issue numbers"
    assert not (cfg.out_dir / "data").exists(), "generated data is removed unless keep_data"
    # The target table's rows, in its order; each ratio line's figure is the one it says it measures.
    order = ["vs-uncompressed", "uncompressed", "cpu-backend", "cpu-seconds", "contexts", "pages-per-call", "decompress",
             "gpu-decode", "gpu-decode-entropy", "gpu-cpu-seconds", "gpu-kernels", "ceiling"]
    kinds = [c["kind"] for c in results["targets"]]
    assert sorted(kinds, key=order.index) == kinds and set(kinds) == set(order)
    assert [c["limit"] for c in results["targets"] if c["kind"] == "gpu-decode"] == ["not measured (cluster 1x2)"]
    if not gpu_available():
        assert results["gpudecode"]["skipped"] == results["skipped"]["GPU decode kernels alone"]
        (kernels,) = [c for c in results["targets"] if c["kind"] == "gpu-kernels"]
        assert kernels["met"] is None and kernels["limit"].startswith("not measurable here: ")
    assert [c["kind"] for c in results["targets"]][-2:] == ["ceiling", "ceiling"]
    assert "| reference |" in report and "## GPU decode kernels alone" in report
    for c in results["targets"]:
        if c.get("value") is not None and c["kind"] not in ("decompress", "contexts", "pages-per-call", "gpu-kernels"):
            assert float(c["measured"]) == pytest.approx(c["value"], abs=0.005), c
        if c["kind"] in ("contexts", "pages-per-call"):
            assert c["met"] is None and c["limit"] == "not measured (cluster 1x2)", c
    base = results["endtoend"]["lineitem"]["distributed"]["1x2"]
    (gzip,) = [c for c in results["targets"] if c["kind"] == "vs-uncompressed" and c["what"].startswith("lineitem, LocalCluster 1x2, gzip")]
    # the decompression targets judge the default read (decode="auto")
    want = base["hwdecomp-auto"]["gzip"]["arrow_gbps"]["median"] / base["pyarrow"]["uncompressed"]["arrow_gbps"]["median"]
    assert gzip["value"] == pytest.approx(want)
    assert "ipc-ceiling (reference)" in report and "64 KiB pages" in report
    for name in results["plots"].values():
        assert (cfg.out_dir / name).stat().st_size > 0
    assert {"throughput", "cpu", "stages", "decompression", "sweep"} <= set(results["plots"])
    for ds in ("lineitem", "entropy"):
        for sched in ("distributed", "threads"):
            per_variant = results["endtoend"][ds][sched]["1x2"]
            for variant in ("pyarrow", "hwdecomp-auto", "hwdecomp-auto-decode-cpu", "hwdecomp-cpu"):
                for codec in ("uncompressed", "gzip"):
                    fig = per_variant[variant][codec]
                    assert "error" not in fig, fig
                    for key in ("arrow_gbps", "file_gbps", "cpu_s_per_gb"):
                        assert _positive(fig[key]), (ds, sched, variant, codec, key)
            if results["variants"]["hwdecomp-nvcomp"]["unavailable"]:
                assert per_variant["hwdecomp-nvcomp"]["gzip"]["error"].startswith("unavailable")
            # the decode-free ceiling: on the uncompressed row only, interleaved with the engines
            assert list(per_variant["ipc-ceiling"]) == ["uncompressed"]
            for key in ("arrow_gbps", "file_gbps", "cpu_s_per_gb"):
                assert _positive(per_variant["ipc-ceiling"]["uncompressed"][key]), (ds, sched, key)
        rep = results["endtoend"][ds]["threads"]["1x2"]["hwdecomp-auto"]["gzip"]["report"]
        # without a GPU, auto is pyarrow's own read: one "pyarrow" stage
        stage = ("gpu_decode", "decode") if gpu_available() else ("pyarrow",)
        assert sum(rep["stages_s"][k] for k in stage) > 0 and rep["backends"]
        if not gpu_available():
            assert rep["decoded_arrow_bytes"]["pyarrow"] > 0 and "gpu" not in rep["decoded_arrow_bytes"]
        cpu_decoded = results["endtoend"][ds]["threads"]["1x2"]["hwdecomp-auto-decode-cpu"]["gzip"]["report"]["decoded"]
        assert cpu_decoded["gpu_fraction"] == 0 and cpu_decoded["gpu_columns"] == []
    assert results["variants"]["hwdecomp-auto-decode-cpu"]["decode"] == "cpu"
    assert results["variants"]["hwdecomp-auto"]["decode"] == "auto"
    dec = results["decompression"]
    assert dec["small_pages"]["pages"]["page_bytes"] == 64 << 10
    for backends in (dec["backends"], dec["small_pages"]["backends"]):
        for label, per_codec in backends.items():
            assert _positive(per_codec["gzip"]["gbps"]), (label, "gzip")
    (pool,) = [k for k in dec["sweep"] if k.startswith("cpu-")]
    assert all(_positive(p["gbps"]) for pts in dec["sweep"][pool].values() for p in pts)
    # 3 MB a dataset is a small read: the figures are kept and labelled, no target is judged on them
    assert results["small_read"]["datasets"] == ["lineitem", "entropy"] and results["datasets"]["entropy"]["small_read"]
    assert "**SMALL READ: figures under 1 GB per dataset are dominated by per-task costs; do not use them for " \
           "decisions** (Arrow data: lineitem 0.00" in report
    measured = [c for c in results["targets"] if c.get("value") is not None and not c.get("reference")]
    assert {c["kind"] for c in measured} >= {"vs-uncompressed", "uncompressed", "cpu-backend", "cpu-seconds"}
    for c in measured:
        assert c["met"] is None and c["small_read"] and c["shape"] == "1x2", c
        assert c["limit"].startswith("not judged at this size: small read (0.00"), c
    assert "| not judged (small read) |" in report and "### lineitem, LocalCluster 1x2 (small read)" in report
    assert "### entropy, threaded scheduler, 2 threads (small read)" in report


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_tables_have_the_rows_asked_for(kind):
    table = make_table(kind, 1000, seed=1)
    assert table.num_rows == 1000 and table.nbytes > 0
    assert make_table(kind, 1000, seed=1).equals(table)


@pytest.mark.parametrize("codec", sorted(PAGE_CODECS))
def test_page_sets_decompress_to_their_input(codec):
    pages = [bytes(range(256)) * 64, b"parquet page " * 5000]
    ps = compress_pages(codec, pages, threads=2)
    with CpuBackend(threads=2) as backend:
        src, dst = backend.host_buffer(len(ps.src)), backend.host_buffer(ps.out_bytes)
        src.view[:] = ps.src
        backend.decompress(ps.jobs, src.view, dst.view)
        assert bytes(dst.view) == b"".join(pages)


def test_parse_size():
    assert parse_size("3GB") == 3 * 10**9
    assert parse_size("512MiB") == 512 << 20
    assert parse_size("1e6") == 10**6
    with pytest.raises(Exception, match="not a size"):
        parse_size("lots")


def test_keep_data_keeps_and_default_removes(tmp_path):
    from dask_hwdecomp.bench.runner import remove_generated

    cfg = BenchConfig(out_dir=tmp_path / "out", datasets=("lineitem",), user_dataset=tmp_path / "mine", progress=False)
    for name in ("lineitem", "user"):
        (cfg.data_dir / name).mkdir(parents=True)
        (cfg.data_dir / name / "part.parquet").write_bytes(b"x")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "users-own.parquet").write_bytes(b"x")
    remove_generated(cfg)
    assert not cfg.data_dir.exists()
    assert (tmp_path / "mine" / "users-own.parquet").exists()


def test_bench_keep_data_option():
    from dask_hwdecomp.cli.bench import config_from_args
    from dask_hwdecomp.cli.main import build_parser

    args = build_parser().parse_args(["bench", "--keep-data", "--datasets", "lineitem"])
    assert config_from_args(args).keep_data is True
    assert config_from_args(build_parser().parse_args(["bench"])).keep_data is False


def test_stage_plot_labels_do_not_overlap():
    """Thirty reads (two datasets, three variants, five codecs): no two axis labels touch."""
    from dask_hwdecomp.bench.plots import plt, stage_figure

    rows = [
        (f"{ds} · {variant} · {codec}", {"io": 0.1, "scan": 1.0, "decompress": 2.0, "decode": 3.0})
        for ds in ("lineitem", "entropy")
        for variant in ("auto", "cpu", "nvcomp")
        for codec in ("uncompressed", "snappy", "gzip", "lz4_raw", "zstd")
    ]
    fig = stage_figure(rows)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for axis in ("x", "y"):
            ax = fig.axes[0]
            labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
            boxes = [t.get_window_extent(renderer) for t in labels if t.get_text()]
            assert len(boxes) >= (2 if axis == "x" else len(rows))
            for i, a in enumerate(boxes):
                for b in boxes[i + 1 :]:
                    assert not a.overlaps(b), (axis, a, b)
        # the long labels (one per read) stay inside the figure
        boxes = [t.get_window_extent(renderer) for t in fig.axes[0].get_yticklabels()]
        assert all(fig.bbox.x0 <= bx.x0 and bx.x1 <= fig.bbox.x1 for bx in boxes)
    finally:
        plt.close(fig)


def test_copy_bandwidth_needs_only_the_gpu_extra():
    """Measured with cuda-bindings (the gpu extra), never CuPy; without it, says so."""
    import importlib.util

    from dask_hwdecomp.bench.copybw import copy_bandwidth

    source = (Path(__file__).resolve().parents[1] / "dask_hwdecomp" / "bench" / "copybw.py").read_text()
    assert "cupy" not in source.lower()
    if importlib.util.find_spec("cuda") is None:
        assert "cuda-bindings is not installed" in copy_bandwidth()["skipped"]


def test_decode_variants_cross_the_gpu_backends():
    from dask_hwdecomp.bench.variants import DECODE_CPU, DEFAULT, engine_variants

    variants = engine_variants(("auto", "cpu", "nvcomp"), options={"batch_bytes": 1 << 20}, decodes=("auto", "cpu"))
    assert list(variants) == ["pyarrow", DEFAULT, DECODE_CPU, "hwdecomp-cpu", "hwdecomp-nvcomp",
                              "hwdecomp-nvcomp-decode-cpu"]
    # every variant sets decode itself: the options' default ("cpu") is one of the variants, not the plain name
    assert variants[DEFAULT].kwargs == {"hwdecomp_options": {"batch_bytes": 1 << 20, "backend": "auto",
                                                             "decode": "auto"}}
    assert variants[DECODE_CPU].kwargs == {"hwdecomp_options": {"batch_bytes": 1 << 20, "backend": "auto",
                                                                "decode": "cpu"}}
    assert (variants[DEFAULT].decode, variants[DECODE_CPU].decode, variants["pyarrow"].decode) == ("auto", "cpu", None)
    nv = (variants["hwdecomp-nvcomp"], variants["hwdecomp-nvcomp-decode-cpu"])
    assert nv[0].unavailable == nv[1].unavailable, "both decodes of a backend run, or neither"
    assert list(engine_variants(("auto",), decodes=("gpu",))) == ["pyarrow", "hwdecomp-auto-decode-gpu"]
    with pytest.raises(ValueError, match="unknown decode"):
        engine_variants(("auto",), decodes=("fpga",))


def test_bench_decodes_option():
    from dask_hwdecomp.cli.bench import config_from_args, run
    from dask_hwdecomp.cli.main import build_parser

    assert config_from_args(build_parser().parse_args(["bench"])).decodes == ("auto", "cpu")
    assert "gpudecode" in config_from_args(build_parser().parse_args(["bench"])).parts
    assert config_from_args(build_parser().parse_args(["bench", "--decodes", "auto"])).decodes == ("auto",)
    assert run(build_parser().parse_args(["bench", "--decodes", "auto,fast"])) == 2


def test_decode_summary_of_a_read_report():
    from dask_hwdecomp.bench.endtoend import decode_summary
    from dask_hwdecomp.report import ReadReport

    report = ReadReport()
    report.add_decode("a", "gpu", chunks=2, rows=100, arrow_bytes=600)
    report.add_decode("b", "pyarrow", chunks=2, rows=100, arrow_bytes=300, why="INT96")
    report.add_decode("c", "pyarrow", chunks=2, rows=100, arrow_bytes=100, why="nested")
    summary = decode_summary(report.to_dict()["columns"])
    assert summary["gpu_fraction"] == pytest.approx(0.6) and summary["arrow_bytes"] == 1000
    assert summary["gpu_columns"] == ["a"] and summary["pyarrow_columns"] == ["b", "c"]
    assert summary["why_not_gpu"] == pytest.approx({"INT96": 0.3, "nested": 0.1})
    assert list(summary["why_not_gpu"]) == ["INT96", "nested"], "largest share first"
    assert decode_summary([]) is None


@pytest.mark.skipif(gpu_available(), reason="a CUDA device is here: the part runs")
def test_gpudecode_part_says_why_it_cannot_run_without_a_gpu(tmp_path):
    from dask_hwdecomp.bench.gpudecode import measure_gpudecode, unavailable

    why = unavailable()
    assert why and ("CUDA" in why or "numba-cuda" in why)
    with pytest.raises(RuntimeError, match="the GPU decode kernels cannot run: "):
        measure_gpudecode([tmp_path / "x.parquet"], 1)
    cfg = BenchConfig(out_dir=tmp_path / "out", size_bytes=200_000, datasets=("lineitem",), codecs=("uncompressed",),
                      files=1, repeats=1, parts=("gpudecode",), progress=False)
    results = run_bench(cfg)
    assert results["gpudecode"] == {"skipped": why} and results["skipped"]["GPU decode kernels alone"] == why
    (kernels,) = [c for c in results["targets"] if c["kind"] == "gpu-kernels"]
    assert kernels["met"] is None and kernels["limit"] == f"not measurable here: {why}"
    report = (cfg.out_dir / "report.md").read_text()
    assert f"## GPU decode kernels alone\n\nNot measured: {why}." in report


_SIMULATED = """
import sys, json
from pathlib import Path
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from dask_hwdecomp.bench.gpudecode import measure_gpudecode
from dask_hwdecomp.gpudecode.plan import plan_file
n = 24
schema = pa.schema([pa.field("i", pa.int64(), False), pa.field("f", pa.float64(), True),
                    pa.field("t", pa.timestamp("us"), True), pa.field("s", pa.string(), False)])
table = pa.table({"i": np.arange(n), "f": pa.array(np.arange(n) * 0.5, mask=np.arange(n) % 7 == 0),
                  "t": pa.array(np.arange(n), pa.timestamp("us")), "s": [f"v{i % 13}" for i in range(n)]},
                 schema=schema)
path = Path(sys.argv[1])
pq.write_table(table, path, compression="none", row_group_size=16)
other = path.with_name("g.parquet")
pq.write_table(table.slice(5, 6), other, compression="none", row_group_size=16)
fig = measure_gpudecode([path, other], 1, allow_simulator=True)
# the buffers' sizes (nbytes counts a string array's offsets without the last one)
fig["arrow_nbytes"] = sum(b.size for p in (path, other) for col in pq.read_table(p).columns for chunk in col.chunks
                          for b in chunk.buffers() if b is not None)
fig["plan_bytes"] = sum(plan_file(p.read_bytes()).data_bytes for p in (path, other))
print(json.dumps(fig))
"""


def test_gpudecode_part_counts_the_arrow_output_under_the_simulator(tmp_path):
    """The kernels' Arrow output is exactly the bytes of pyarrow's arrays (no alignment gaps counted)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("numba.cuda")
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    out = subprocess.run([sys.executable, "-c", _SIMULATED, str(tmp_path / "f.parquet")], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    fig = json.loads(out.stdout.strip().splitlines()[-1])
    assert fig["output_bytes"] == fig["arrow_nbytes"]
    assert fig["input_bytes"] == fig["plan_bytes"] > 0
    assert fig["files"] == 2 and fig["chunks"] == 8 + 4 and fig["gpu_columns"] == ["f", "i", "s", "t"]
    assert fig["seconds"]["n"] == 1 and _positive(fig["output_gbps"]) and _positive(fig["input_gbps"])
    assert fig["merged_seconds"]["n"] == 1 and _positive(fig["merged_output_gbps"])
    assert fig["output_gbps"]["median"] / fig["input_gbps"]["median"] == pytest.approx(
        fig["output_bytes"] / fig["input_bytes"])


def test_report_renders_the_decode_rows(tmp_path):
    from dask_hwdecomp.bench.markdown import render_report
    from dask_hwdecomp.bench.stats import summarize
    from dask_hwdecomp.bench.system import system_info
    from dask_hwdecomp.bench.targets import check_targets

    def fig(gbps, report=None):
        return {"arrow_gbps": summarize([gbps]), "file_gbps": summarize([gbps]), "cpu_s_per_gb": summarize([0.4]),
                "report": report, "gpu": None}

    decoded = {"gpu_fraction": 0.75, "arrow_bytes": 4000, "gpu_columns": ["a", "b"], "pyarrow_columns": ["c"],
               "why_not_gpu": {"INT96": 0.25}}
    rep = {"stages_s": {"io": 0.1, "scan": 0.1, "decompress": 0.2, "gpu_decode": 0.3, "decode": 0.4},
           "backends": {"SNAPPY on nvcomp": {}}, "batches": 2, "decoded": decoded}
    per_variant = {"pyarrow": {"uncompressed": fig(2.0), "snappy": fig(1.8)},
                   "hwdecomp-auto": {"uncompressed": fig(7.0, rep), "snappy": fig(6.0, rep)},
                   "hwdecomp-auto-decode-cpu": {"uncompressed": fig(2.0), "snappy": fig(2.0)},
                   "ipc-ceiling": {"uncompressed": fig(8.28)}}
    results = {"started": "now", "system": system_info(), "skipped": {}, "finished": "later",
               "config": {"workers": 4, "threads": 4, "repeats": 1, "command": "hwdecomp bench", "schedulers": (),
                          "parts": ()},
               "datasets": {"lineitem": {"file_bytes": {"uncompressed": 10**9, "snappy": 5 * 10**8}, "rows": 1,
                                         "arrow_bytes": 10**9, "files": 1}},
               "endtoend": {"lineitem": {"distributed": per_variant, "threads": per_variant}},
               "gpudecode": {"lineitem": {"files": 2, "chunks": 8, "pages": 64, "input_bytes": 9 * 10**8,
                                          "output_bytes": 10**9, "output_gbps": summarize([150.0, 140.0, 160.0]),
                                          "input_gbps": summarize([135.0]), "fallbacks": {"c": "INT96"},
                                          "merged_output_gbps": summarize([400.0]),
                                          "timing": "measure + place_outputs + write", "merged_timing": "one batch"},
                             "entropy": {"files": 1, "chunks": 4, "pages": 8, "input_bytes": 10**8,
                                         "output_bytes": 10**8, "output_gbps": summarize([50.0]),
                                         "input_gbps": summarize([50.0]), "merged_error": "CudaAPIError: out of memory"}}}
    checks = check_targets(results)
    text = render_report(results, checks, {})
    assert "| GPU decoding: lineitem, LocalCluster 4x4, snappy: throughput, hwdecomp-auto (decode on the GPU) ÷ " \
           "pyarrow on snappy | >= 3.00 | 3.33 | met |" in text
    assert "| GPU decode kernels alone, lineitem, uncompressed files on the device: GB/s of Arrow output " \
           "(measure + place + write) | >= 100 GB/s | 150.0 GB/s | met |" in text
    assert "÷ pyarrow on snappy | reference | 4.60 | reference |" in text
    assert "| lineitem | hwdecomp-auto | snappy | 75% | 2 | 1 | INT96 (25%) |" in text
    assert "| lineitem | 2 | 0.900 | 1.000 | 150 (140–160) | 400 | 135 | c (INT96) |" in text
    assert "merged: one batch, as the GPU service decodes reads that reach it together" in text
    assert "| entropy | 1 | 0.100 | 0.100 | 50.0 | error: CudaAPIError: out of memory | 50.0 | – |" in text
    assert "| lineitem | hwdecomp-auto | snappy | 0.100 | 0.100 | 0.200 | 0.300 | 0.400 |" in text
    assert "hwdecomp-auto reads at the default options (decode='auto'" in text
    assert "hwdecomp-auto-decode-cpu is the same read with decode='cpu'" in text
