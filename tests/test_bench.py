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
        workers=1,
        threads=2,
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
    order = ["vs-uncompressed", "uncompressed", "cpu-backend", "cpu-seconds", "contexts", "pages-per-call", "decompress"]
    kinds = [c["kind"] for c in results["targets"]]
    assert sorted(kinds, key=order.index) == kinds and set(kinds) == set(order)
    for c in results["targets"]:
        if c["met"] is not None and c["kind"] not in ("decompress", "contexts", "pages-per-call"):
            assert float(c["measured"]) == pytest.approx(c["value"], abs=0.005), c
            assert c["met"] == (c["value"] >= float(c["target"][3:]) if c["target"].startswith(">=") else c["value"] <= float(c["target"][3:]))
        if c["kind"] in ("contexts", "pages-per-call"):
            assert c["met"] is None and c["limit"] == "not measured (cluster 1x2)", c
    base = results["endtoend"]["lineitem"]["distributed"]
    (gzip,) = [c for c in results["targets"] if c["kind"] == "vs-uncompressed" and c["what"].startswith("lineitem, LocalCluster 1x2, gzip")]
    want = base["hwdecomp-auto"]["gzip"]["arrow_gbps"]["median"] / base["pyarrow"]["uncompressed"]["arrow_gbps"]["median"]
    assert gzip["value"] == pytest.approx(want)
    assert "ipc-ceiling (reference)" in report and "64 KiB pages" in report
    for name in results["plots"].values():
        assert (cfg.out_dir / name).stat().st_size > 0
    assert {"throughput", "cpu", "stages", "decompression", "sweep"} <= set(results["plots"])
    for ds in ("lineitem", "entropy"):
        for sched in ("distributed", "threads"):
            per_variant = results["endtoend"][ds][sched]
            for variant in ("pyarrow", "hwdecomp-auto", "hwdecomp-cpu"):
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
        rep = results["endtoend"][ds]["threads"]["hwdecomp-auto"]["gzip"]["report"]
        # without a GPU, auto is pyarrow's own read: one "pyarrow" stage
        stage = "decode" if gpu_available() else "pyarrow"
        assert rep["stages_s"][stage] > 0 and rep["backends"]
        assert rep["decoded_arrow_bytes"]["pyarrow"] > 0 and "gpu" not in rep["decoded_arrow_bytes"]
    dec = results["decompression"]
    assert dec["small_pages"]["pages"]["page_bytes"] == 64 << 10
    for backends in (dec["backends"], dec["small_pages"]["backends"]):
        for label, per_codec in backends.items():
            assert _positive(per_codec["gzip"]["gbps"]), (label, "gzip")
    (pool,) = [k for k in dec["sweep"] if k.startswith("cpu-")]
    assert all(_positive(p["gbps"]) for pts in dec["sweep"][pool].values() for p in pts)
    assert any(c["met"] is not None for c in results["targets"])


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
