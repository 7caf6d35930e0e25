"""The decode-free ceiling and the bench's new figures, run for real on tiny data (CPU only)."""

from __future__ import annotations

import json
import shutil

import dask.dataframe as dd
import pyarrow.parquet as pq
import pytest

from dask_hwdecomp.bench import BenchConfig, run_bench
from dask_hwdecomp.bench.ceiling import IpcPart, ipc_parts, read_ipc_ceiling, read_ipc_part
from dask_hwdecomp.bench.data import generate
from dask_hwdecomp.bench.endtoend import ClusterShape, measure_dataset, threaded
from dask_hwdecomp.bench.targets import check_targets
from dask_hwdecomp.bench.variants import CEILING, ceiling_variant, engine_variants

from helpers import gpu_available


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Tiny lineitem-like data, uncompressed and snappy, three row groups per file."""
    return generate(tmp_path_factory.mktemp("bench"), "lineitem", 2_000_000, 2, ("uncompressed", "snappy"),
                    processes=1, row_group_rows=4000)


def test_ipc_twins_are_written_next_to_the_dataset(dataset):
    parquet = sorted(dataset.dirs["uncompressed"].glob("*.parquet"))
    twins = sorted(dataset.ipc_dir.glob("*.arrow"))
    assert dataset.ipc_dir == dataset.dirs["uncompressed"].parent / "ipc"
    assert [p.stem for p in twins] == [p.stem for p in parquet] and dataset.to_dict()["ipc_bytes"] > 0


def test_ipc_ceiling_reads_the_rows_pyarrow_reads(dataset):
    path = dataset.dirs["uncompressed"]
    ceiling = read_ipc_ceiling(path)
    parquet = dd.read_parquet(str(path), engine="pyarrow")
    assert ceiling.npartitions == parquet.npartitions
    assert ipc_parts(path)[1] == "the Parquet read's partitions"
    got, want = ceiling.compute(scheduler="sync"), parquet.compute(scheduler="sync")
    assert len(got) == len(want) == dataset.rows
    assert list(got.dtypes) == list(want.dtypes)
    assert got.reset_index(drop=True).equals(want.reset_index(drop=True))


def test_ipc_batches_are_the_row_groups(dataset):
    path = sorted(dataset.dirs["uncompressed"].glob("*.parquet"))[0]
    twin = dataset.ipc_dir / (path.stem + ".arrow")
    with pq.ParquetFile(path) as pf:
        assert pf.metadata.num_row_groups >= 2
        want = pf.read_row_group(1).to_pandas()
    got = read_ipc_part((IpcPart(str(twin), (1,)),))
    assert len(got) == len(want) and got["l_orderkey"].tolist() == want["l_orderkey"].tolist()


def test_ipc_ceiling_without_twins_says_so(tmp_path, dataset):
    bare = tmp_path / "copy" / "uncompressed"
    shutil.copytree(dataset.dirs["uncompressed"], bare)
    with pytest.raises(FileNotFoundError, match="no Arrow IPC twin"):
        read_ipc_ceiling(bare)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None or gpu_available(), reason="checks the figures a machine without a GPU gives")
def test_measured_figures_without_a_gpu_make_the_gpu_checks_not_measurable(dataset):
    """measure_dataset for real (threaded), then the targets on those figures as if from a 16x1 LocalCluster."""
    variants = {**engine_variants(("auto", "cpu")), CEILING: ceiling_variant()}
    with threaded(ClusterShape(1, 2)) as scheduler:
        figures = measure_dataset(scheduler, variants, dataset, repeats=1)
    assert list(figures[CEILING]) == ["uncompressed"]
    ceiling = figures[CEILING]["uncompressed"]
    assert ceiling["arrow_gbps"]["median"] > 0
    # its file bytes are its IPC files'
    ratio = ceiling["file_gbps"]["median"] / ceiling["arrow_gbps"]["median"]
    assert ratio == pytest.approx(dataset.ipc_bytes / dataset.arrow_bytes)
    results = {"config": {"workers": 16, "threads": 1}, "endtoend": {"lineitem": {"distributed": figures}}}
    checks = check_targets(results)
    service = [c for c in checks if c["kind"] in ("contexts", "pages-per-call")]
    assert [c["kind"] for c in service] == ["contexts", "pages-per-call"]
    assert all(c["met"] is None and c["limit"].startswith("not measurable here") for c in service), service
    for kind in ("vs-uncompressed", "uncompressed", "cpu-backend", "cpu-seconds"):
        assert all(c["value"] > 0 for c in checks if c["kind"] == kind), kind


def test_decompress_part_measures_64_kib_pages_at_default_options(tmp_path):
    cfg = BenchConfig(out_dir=tmp_path / "out", size_bytes=2_000_000, datasets=("lineitem",),
                      codecs=("uncompressed", "snappy"), files=1, repeats=1, parts=("decompress",),
                      backends=("auto",), decompress_bytes=1 << 20, progress=False)
    run_bench(cfg)
    results = json.loads((cfg.out_dir / "results.json").read_text())
    dec = results["decompression"]
    assert dec["pages"]["page_bytes"] == 1 << 20 and dec["pages"]["count"] == 1
    small = dec["small_pages"]
    assert small["pages"]["page_bytes"] == 64 << 10 and small["pages"]["count"] == 16
    assert small["ratios"]["snappy"] > 1
    for label in ("cpu-1", next(k for k in small["backends"] if k != "cpu-1")):
        assert small["backends"][label]["snappy"]["gbps"]["median"] > 0
        assert small["backends"][label]["snappy"]["pages"] == 16
    # "auto" asks for every GPU backend: each is measured or says why it cannot run here
    gpu_labels = {"nvcomp", "hardware"}
    assert gpu_labels == set(dec["unavailable"]) | (gpu_labels & set(small["backends"]))
    (check,) = [c for c in results["targets"] if c["kind"] == "decompress" and "snappy, 64 KiB" in c["what"]]
    if not gpu_available():
        assert check["met"] is None and check["limit"].startswith("not measurable here: no GPU backend ran (")
        assert "none was asked for" not in check["limit"]
    report = (cfg.out_dir / "report.md").read_text()
    assert "64 KiB pages (16 of them), default options" in report
    assert "1 MiB pages (1 of them), default options" in report
