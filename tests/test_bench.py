"""``hwdecomp bench`` at a tiny size: a report and positive figures, not speed."""

from __future__ import annotations

import json

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
    assert "## Targets (issue 5)" in report and "## System" in report
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
        rep = results["endtoend"][ds]["threads"]["hwdecomp-auto"]["gzip"]["report"]
        # without a GPU, auto is pyarrow's own read: one "pyarrow" stage
        stage = "decode" if gpu_available() else "pyarrow"
        assert rep["stages_s"][stage] > 0 and rep["backends"]
    dec = results["decompression"]
    for label, per_codec in dec["backends"].items():
        for codec in ("gzip",):
            assert _positive(per_codec[codec]["gbps"]), (label, codec)
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
