"""The ``decode`` option: where pages are decoded into Arrow, and what the report says per column."""

from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dask_hwdecomp
from dask_hwdecomp import BackendUnavailableError, Options, collect_reports, hwdecomp, read_table
from dask_hwdecomp.decompress.cpu import CpuBackend
from dask_hwdecomp.decompress.hardware import create_with
from dask_hwdecomp.jobs import Algo
from dask_hwdecomp.options import current_options
from dask_hwdecomp.readpath.batch import (
    DECODE_CPU,
    NO_GPU_BACKEND,
    NO_GPU_DECODER,
    cpu_decode_reason,
    decompress_batch,
    use_column_decoder,
)
from dask_hwdecomp.readpath.plan import Piece, plan_piece
from dask_hwdecomp.report import ReadReport
from dask_hwdecomp.routing.router import Router

from helpers import PICKED_OUT, gpu_available, pyarrow_decoder
from standin_hwengine import StandinHwEngine

no_gpu = pytest.mark.skipif(gpu_available(), reason="needs a machine where no GPU backend can run")


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    p = tmp_path_factory.mktemp("decode") / "t.parquet"
    table = pa.table({"a": np.arange(3000), "s": [f"v{i % 13}" for i in range(3000)],
                      "l": [[i, i + 1] for i in range(3000)]})
    pq.write_table(table, p, compression="snappy", row_group_size=1000)
    return str(p)


def test_decode_defaults_to_auto_and_is_validated():
    # The GPU decodes by default: measured no slower than pyarrow at scale (see the option's docs).
    assert Options().decode == "auto"
    assert Options(decode="cpu").decode == "cpu"
    with pytest.raises(ValueError, match="decode 'fast' is not one of auto, gpu, cpu"):
        Options(decode="fast")


def test_decode_gpu_with_backend_cpu_names_both_options():
    with pytest.raises(ValueError, match="decode='gpu'.*backend='cpu'"):
        Options(decode="gpu", backend="cpu")
    with pytest.raises(ValueError, match="decode='gpu'.*backend='cpu'"):
        dd.read_parquet("unused.parquet", engine=hwdecomp, hwdecomp_options={"decode": "gpu", "backend": "cpu"})


def test_decode_from_environment_and_context(monkeypatch):
    monkeypatch.setenv("HWDECOMP_DECODE", "cpu")
    assert current_options().decode == "cpu"
    with dask_hwdecomp.options(decode="auto"):
        assert current_options().decode == "auto"
    monkeypatch.setenv("HWDECOMP_DECODE", "gpu-please")
    with pytest.raises(ValueError, match="decode 'gpu-please'"):
        current_options()


@no_gpu
@pytest.mark.parametrize("backend", ["auto", "cpu"])
def test_auto_without_a_gpu_decodes_with_pyarrow_and_says_why(path, backend):
    report = ReadReport()
    got = read_table(path, backend=backend, decode="auto", report=report)
    assert got.equals(pq.read_table(path))
    assert {(c, w, why) for (c, w, why) in report.columns} == {(c, "pyarrow", NO_GPU_BACKEND) for c in "asl"}
    assert report.columns[("a", "pyarrow", NO_GPU_BACKEND)].rows == 3000
    text = str(report)
    assert "all 3 columns decoded on pyarrow: 3 chunks and 3000 rows each" in text
    assert f"(not on the GPU: {NO_GPU_BACKEND})" in text
    assert report.to_dict()["columns"][0]["why_not_gpu"] == NO_GPU_BACKEND


@no_gpu
def test_decode_cpu_is_the_reason_given(path):
    with collect_reports() as report:
        dd.read_parquet(path, engine=hwdecomp, hwdecomp_options={"decode": "cpu"}).compute(scheduler="sync")
    assert {why for (_, _, why) in report.columns} == {DECODE_CPU}
    assert {c for (c, _, _) in report.columns} == {"a", "s", "l"}


@no_gpu
@pytest.mark.parametrize("backend", ["auto", "nvcomp"])
def test_decode_gpu_without_a_gpu_raises(path, backend):
    # Never a silent decode on the CPU: auto included, which otherwise hands
    # the read to pyarrow here.
    with pytest.raises(BackendUnavailableError):
        read_table(path, backend=backend, decode="gpu")
    ddf = dd.read_parquet(path, engine=hwdecomp, hwdecomp_options={"decode": "gpu", "backend": backend})
    with pytest.raises(BackendUnavailableError):
        ddf.compute(scheduler="sync")
    if backend == "auto":
        with pytest.raises(BackendUnavailableError, match="decode='gpu' was requested but no GPU backend"):
            read_table(path, decode="gpu")


@pytest.fixture
def hardware():
    # The hardware backend over the stand-in engine: a GPU backend in use,
    # in this process, on a machine without a GPU.
    hw = create_with(StandinHwEngine(mask=7, max_length=4 << 20), Options(streams=1))
    cpu = CpuBackend(1)
    yield hw, cpu
    hw.close()
    cpu.close()


def _routers(options, hardware):
    hw, cpu = hardware
    gpu = Router.over(options, {a: ([hw] if a in hw.algorithms else []) + [cpu] for a in Algo})
    return gpu, Router.over(options, {a: [cpu] for a in Algo})


def test_decision_follows_option_backends_and_decoder(hardware):
    auto, cpu, gpu = Options(decode="auto"), Options(decode="cpu"), Options(decode="gpu")
    with_gpu, without = _routers(auto, hardware)
    assert with_gpu.gpu_backends == ["hardware"] and without.gpu_backends == []
    assert cpu_decode_reason(auto, without) == NO_GPU_BACKEND
    assert cpu_decode_reason(cpu, with_gpu) == DECODE_CPU
    assert cpu_decode_reason(auto, with_gpu) == NO_GPU_DECODER
    with pytest.raises(BackendUnavailableError, match="no GPU decoder"):
        cpu_decode_reason(gpu, with_gpu)
    with use_column_decoder(pyarrow_decoder(lambda name: True)):
        assert cpu_decode_reason(auto, with_gpu) == ""
        assert cpu_decode_reason(gpu, with_gpu) == ""
        assert cpu_decode_reason(cpu, with_gpu) == DECODE_CPU
        assert cpu_decode_reason(auto, without) == NO_GPU_BACKEND


@pytest.mark.parametrize("decode", ["auto", "cpu"])
def test_a_batch_on_a_gpu_backend_is_decoded_by_the_decoder(tmp_path, hardware, decode):
    p = tmp_path / "f.parquet"
    pq.write_table(pa.table({"a": np.arange(500), "b": np.arange(500) * 0.5}), p, compression="snappy",
                   row_group_size=200)
    import fsspec

    fs = fsspec.filesystem("file")
    options = Options(decode=decode)
    router, _ = _routers(options, hardware)
    report = ReadReport()
    with use_column_decoder(pyarrow_decoder(lambda name: name == "a")):
        with decompress_batch(fs, [plan_piece(fs, Piece(str(p)), None)], router, options, report) as batch:
            (image,) = batch.images
            if decode == "auto":
                assert list(image.decoded) == ["a"] and image.why_not_gpu == {"b": PICKED_OUT}
                assert image.decoded["a"].num_chunks == 3
                assert image.decoded["a"].equals(pq.read_table(p, columns=["a"]).column(0))
                assert "gpu_decode" in report.stages
            else:
                assert image.decoded == {} and image.cpu_reason == DECODE_CPU


def test_report_merges_and_exports_decode_records():
    a, b = ReadReport(), ReadReport()
    a.add_decode("x", "gpu", 2, 100, 800)
    b.add_decode("x", "gpu", 1, 50, 400)
    b.add_decode("y", "pyarrow", 3, 150, 900, "nested column")
    a += b
    assert a.columns[("x", "gpu", "")].chunks == 3 and a.columns[("x", "gpu", "")].arrow_bytes == 1200
    assert a.to_dict()["columns"] == [
        {"column": "x", "decoded_on": "gpu", "why_not_gpu": "", "chunks": 3, "rows": 150, "arrow_bytes": 1200},
        {"column": "y", "decoded_on": "pyarrow", "why_not_gpu": "nested column", "chunks": 3, "rows": 150,
         "arrow_bytes": 900},
    ]
    assert "column 'y' decoded on pyarrow: 3 chunks, 150 rows" in str(a)
    assert "(not on the GPU: nested column)" in a.summary()
    assert "gpu_decode" in a.stages and "decode" in a.stages
    with pytest.raises(ValueError, match="where 'cuda'"):
        a.add_decode("z", "cuda", 1, 1, 1)


def test_frame_equal_with_decoded_columns_and_auto(path):
    # decode="auto" with a decoder that takes pyarrow's columns: the same frame.
    with use_column_decoder(pyarrow_decoder(lambda name: name == "s"), always=True):
        got = dd.read_parquet(path, engine=hwdecomp, hwdecomp_options={"backend": "cpu"}).compute(scheduler="sync")
    pd.testing.assert_frame_equal(got, dd.read_parquet(path, engine="pyarrow").compute(scheduler="sync"))
