"""``decode="gpu"`` from ``dd.read_parquet`` and ``read_table`` to the GPU service and back.

Without a GPU the whole path still runs: the registry opens the GPU
service hosting the hardware backend's real code over the engine stand-in
(``service_backends:standin``, it decompresses Snappy on the CPU), and the
service's GPU decoder runs the real kernels under numba's CUDA simulator.
The GPU machine runs the same path on its GPU in ``tests/gpu``.
"""

from __future__ import annotations

import gc

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dask_hwdecomp import CorruptDataError, hwdecomp, read_table
from dask_hwdecomp.report import ReadReport, collect_reports
from dask_hwdecomp.routing import registry

from helpers import assert_tables_equal, gpu_available, with_chunk_field
from service_backends import open_backend, service_directory

pytestmark = pytest.mark.skipif(gpu_available(), reason="the GPU machine runs this path on its GPU (tests/gpu)")


@pytest.fixture(scope="module")
def standin_service():
    """The registry's "hardware" backend: a service hosting the engine stand-in, its decoder simulated."""
    opened = {}
    with service_directory() as directory, pytest.MonkeyPatch.context() as mp:
        mp.setenv("NUMBA_ENABLE_CUDASIM", "1")
        mp.setattr(registry, "probe", lambda name: None if name in ("hardware", "cpu") else "not on this machine (test)")

        real_get_backend = registry.get_backend

        def get_backend(name, options):
            if name == "cpu":
                return real_get_backend(name, options)
            key = (name, options.batch_bytes)
            if key not in opened:
                opened[key] = open_backend("standin", options, directory)
            return opened[key]

        mp.setattr(registry, "get_backend", get_backend)
        yield opened
        for b in opened.values():
            b.close()


def _write(tmp_path):
    rng = np.random.default_rng(11)
    n = 240
    table = pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "value": pa.array(rng.random(n), mask=rng.random(n) < 0.2),
        "kind": pa.array(rng.integers(0, 5, n).astype(np.int32)),
        "small": pa.array(rng.integers(-9, 9, n).astype(np.int16)),
        "ts": pa.array(rng.integers(0, 10**12, n), type=pa.timestamp("ms")),
    })
    for i in range(2):
        pq.write_table(table.slice(i * 120, 120), tmp_path / f"part{i}.parquet", compression="snappy",
                       row_group_size=60, data_page_size=256)
    return str(tmp_path)


def test_read_parquet_decode_gpu_equals_pyarrow(standin_service, tmp_path):
    path = _write(tmp_path)
    with dask.config.set(scheduler="sync"), collect_reports() as reports:
        got = dd.read_parquet(path, engine=hwdecomp,
                              hwdecomp_options={"backend": "auto", "decode": "gpu"}).compute()
    expected = dd.read_parquet(path, engine="pyarrow").compute()
    pd.testing.assert_frame_equal(got, expected)
    report = reports
    where = {col: w for (col, w, _), _stats in report.columns.items()}
    assert where == {c: "gpu" for c in ["id", "value", "kind", "small", "ts"]}, report.columns


def test_filters_and_columns_with_decode_gpu(standin_service, tmp_path):
    path = _write(tmp_path)
    opts = {"backend": "auto", "decode": "gpu"}
    with dask.config.set(scheduler="sync"):
        got = dd.read_parquet(path, engine=hwdecomp, columns=["value", "small"], filters=[("kind", ">=", 3)],
                              hwdecomp_options=opts).compute()
        expected = dd.read_parquet(path, engine="pyarrow", columns=["value", "small"],
                                   filters=[("kind", ">=", 3)]).compute()
    pd.testing.assert_frame_equal(got, expected)


def test_read_table_decode_gpu_and_cpu_agree(standin_service, tmp_path):
    path = _write(tmp_path) + "/part1.parquet"
    report = ReadReport()
    gpu = read_table(path, backend="auto", decode="gpu", report=report)
    cpu = read_table(path, backend="auto", decode="cpu")
    assert gpu.equals(pq.read_table(path)) and cpu.equals(gpu)
    assert {w for (_, w, _) in report.columns} == {"gpu"}


def test_a_column_whose_values_do_not_add_up_leaves_the_whole_file_to_pyarrow(standin_service, tmp_path):
    # The metadata of one chunk counts fewer values than its row group's
    # rows: pyarrow 25 refuses the whole read ("expected length 60 but got
    # length 30") yet reads the column alone, so no column may come from the
    # GPU beside pyarrow's read of the others; pyarrow reads the file whole.
    good = _write(tmp_path) + "/part0.parquet"
    bad = tmp_path / "miscounted.parquet"
    bad.write_bytes(with_chunk_field(open(good, "rb").read(), 1, 2, 5, 30))  # num_values of "kind"
    report = ReadReport()
    try:
        want = pq.read_table(bad)
    except pa.ArrowException as exc:
        with pytest.raises(CorruptDataError) as got:
            read_table(bad, backend="auto", decode="gpu", report=report)
        assert isinstance(got.value, type(exc)) and str(exc) in str(got.value)
    else:
        assert_tables_equal(read_table(bad, backend="auto", decode="gpu", report=report), want)
        where = {col: (w, why) for (col, w, why) in report.columns}
        assert {w for w, _ in where.values()} == {"pyarrow"}, where
        assert "column chunk holds 30 values for 60 rows" in where["kind"][1]
        assert all(why.startswith("pyarrow reads this file whole") for c, (_, why) in where.items() if c != "kind")


def _kept_stats(opened) -> dict:
    (backend,) = opened.values()
    return {k: v for k, v in backend.stats().items() if k.startswith(("kept_", "decode_bytes"))}


def test_the_decoder_reads_the_pages_the_service_kept_on_the_device(standin_service, tmp_path):
    path = _write(tmp_path) + "/part0.parquet"
    read_table(path, backend="auto", decode="gpu")  # the service and its decoder started
    before = _kept_stats(standin_service)
    got = read_table(path, backend="auto", decode="gpu")
    after = _kept_stats(standin_service)
    assert got.equals(pq.read_table(path))
    assert after["kept_runs"] > before["kept_runs"]
    assert after["kept_used"] - before["kept_used"] == after["kept_runs"] - before["kept_runs"]
    # every data page body came from the device; headers and the like from the host
    kept = after["decode_bytes_kept"] - before["decode_bytes_kept"]
    read = after["decode_bytes_in"] - before["decode_bytes_in"]
    assert 0.5 * read < kept <= read
    assert (after["kept_bytes"], after["kept_waiting"]) == (0, 0)


def test_pages_kept_for_a_batch_the_gpu_does_not_decode_are_dropped(standin_service, tmp_path):
    table = pa.table({"nested": pa.array([[i, i + 1] for i in range(200)])})  # left to pyarrow
    pq.write_table(table, tmp_path / "nested.parquet", compression="snappy")
    read_table(str(tmp_path / "nested.parquet"), backend="auto", decode="auto")
    before = _kept_stats(standin_service)
    got = read_table(str(tmp_path / "nested.parquet"), backend="auto", decode="auto")
    after = _kept_stats(standin_service)
    assert got.equals(table)
    assert after["kept_runs"] > before["kept_runs"]
    assert after["kept_dropped"] - before["kept_dropped"] == after["kept_runs"] - before["kept_runs"]
    assert after["kept_used"] == before["kept_used"]
    assert (after["kept_bytes"], after["kept_waiting"]) == (0, 0)


def test_decode_cpu_keeps_nothing_on_the_device(standin_service, tmp_path):
    path = _write(tmp_path) + "/part1.parquet"
    read_table(path, backend="auto", decode="cpu")
    before = _kept_stats(standin_service)
    read_table(path, backend="auto", decode="cpu")
    assert _kept_stats(standin_service).get("kept_runs", 0) == before.get("kept_runs", 0)


def test_outputs_past_their_share_of_pinned_memory_are_copied_and_reported(standin_service, tmp_path, monkeypatch):
    from dask_hwdecomp.service import decoding

    path = _write(tmp_path) + "/part0.parquet"
    held = read_table(path, backend="auto", decode="gpu")  # its outputs stay alive over shared memory
    # A share of one byte: every output alive presses the pool.
    monkeypatch.setattr(decoding, "ZERO_COPY_SHARE", 1 << 40)
    report = ReadReport()
    got = read_table(path, backend="auto", decode="gpu", report=report)
    assert got.equals(pq.read_table(path)) and held.equals(got)
    assert report.output_copies >= 1 and report.output_copied_bytes > 0
    assert "copied out of pinned memory" in report.summary()
    assert report.to_dict()["output_copies"] == report.output_copies


def test_held_reads_in_a_loop_stay_within_the_zero_copy_share(standin_service, tmp_path, monkeypatch):
    from dask_hwdecomp.service import decoding

    path = _write(tmp_path) + "/part0.parquet"
    read_table(path, backend="auto", decode="gpu")  # the service, its decoder and the backend opened
    (backend,) = standin_service.values()
    returns = decoding._returns_of(backend)
    gc.collect()  # every output of the tests before is given back now, not during the reads below
    returns.drain()
    before = returns.live_bytes
    # Outputs the worker's earlier tests still hold may fill the default
    # share: the read that measures one read's outputs gets the whole pool.
    monkeypatch.setattr(decoding, "ZERO_COPY_SHARE", 1)
    one = read_table(path, backend="auto", decode="gpu")
    returns.drain()
    per_read = returns.live_bytes - before
    assert per_read > 0
    # A share of two and a half reads' outputs above what is alive now.
    monkeypatch.setattr(decoding, "ZERO_COPY_SHARE", max(1, backend.pool.cap_bytes // (before + per_read * 5 // 2)))
    bound = backend.pool.cap_bytes // decoding.ZERO_COPY_SHARE
    held, report = [one], ReadReport()
    for _ in range(4):
        held.append(read_table(path, backend="auto", decode="gpu", report=report))
        returns.drain()
        assert returns.live_bytes <= bound
        assert backend.pool.stats()["held_bytes"] <= backend.pool.cap_bytes
    assert report.output_copies >= 2  # the second of the four on: past the share
    assert all(t.equals(pq.read_table(path)) for t in held)


def test_a_footer_pyarrow_cannot_open_fails_on_the_gpu_path_as_without_it(standin_service, tmp_path):
    # The file's Arrow schema is not base64 any more: the project's own
    # footer reader plans it, pyarrow refuses to open it. The GPU decodes
    # none of it, and pyarrow's decode of the image raises its error,
    # located, exactly as with decode="cpu" (not pyarrow's raw error).
    path = tmp_path / "bad-schema.parquet"
    pq.write_table(pa.table({"a": np.arange(50), "b": np.arange(50.0)}), path, compression="snappy")
    data = bytearray(path.read_bytes())
    stored = pq.ParquetFile(path).metadata.metadata[b"ARROW:schema"]
    data[data.find(stored) + 5] = ord("!")
    path.write_bytes(bytes(data))
    with pytest.raises(pa.ArrowInvalid, match="base64"):
        pq.read_table(path)
    raised = {}
    for decode in ("cpu", "gpu"):
        with pytest.raises(CorruptDataError) as info:
            read_table(str(path), backend="auto", decode=decode)
        raised[decode] = str(info.value)
    assert raised["gpu"] == raised["cpu"] and "base64" in raised["cpu"], raised


def _scribbled_images(monkeypatch):
    """Image buffers lent full of noise: a byte the host never received reads as noise."""
    from dask_hwdecomp.readpath import batch

    real = batch.allocate_images

    def allocate(*args, **kwargs):
        buf = real(*args, **kwargs)
        view = np.frombuffer(buf.view, dtype=np.uint8)
        view[:] = np.random.default_rng(len(view)).integers(0, 256, len(view), dtype=np.uint8)
        return buf

    monkeypatch.setattr(batch, "allocate_images", allocate)


def _copied_back(opened) -> int:
    (backend,) = opened.values()
    return backend.stats()["device_only_bytes"]


def test_pages_the_gpu_decodes_stay_on_the_device(standin_service, tmp_path, monkeypatch):
    """The decode plan is made before decompressing; its chunks' pages are kept and not copied back."""
    path = _write(tmp_path) + "/part0.parquet"
    read_table(path, backend="auto", decode="gpu")  # the service and its decoder started
    _scribbled_images(monkeypatch)
    before = _copied_back(standin_service)
    report = ReadReport()
    got = read_table(path, backend="auto", decode="gpu", report=report)
    assert got.equals(pq.read_table(path))
    assert {w for (_, w, _) in report.columns} == {"gpu"}
    # every output byte of the file's data and dictionary pages stayed on the device
    outputs = sum(cc.total_uncompressed_size for rg in range(pq.ParquetFile(path).metadata.num_row_groups)
                  for cc in (pq.ParquetFile(path).metadata.row_group(rg).column(c) for c in range(5)))
    held = _copied_back(standin_service) - before
    assert 0.5 * outputs < held <= outputs


@pytest.mark.parametrize("decode", ["auto", "gpu"])
def test_a_batch_whose_service_was_lost_is_decoded_by_pyarrow_without_waiting_for_a_fresh_one(
        standin_service, tmp_path, monkeypatch, decode):
    """The router kept the CPU's output of a group (the service was lost under it): no GPU decode is asked for."""
    from dask_hwdecomp.routing.router import Router
    from dask_hwdecomp.service import decoding

    path = _write(tmp_path) + "/part1.parquet"
    read_table(path, backend="auto", decode=decode)
    _scribbled_images(monkeypatch)
    real_run = Router.run

    def run_then_lost(self, *args, **kwargs):
        assert real_run(self, *args, **kwargs) == []
        return ["died (for the test)"]  # after the pages were kept on the device, as another group's would be

    def no_decode(*args, **kwargs):
        raise AssertionError("a decode was sent for a batch whose service was lost")

    monkeypatch.setattr(Router, "run", run_then_lost)
    monkeypatch.setattr(decoding, "_decode_once", no_decode)
    before = _copied_back(standin_service)
    report = ReadReport()
    got = read_table(path, backend="auto", decode=decode, report=report)
    assert _copied_back(standin_service) > before  # pages were left on the device ...
    assert got.equals(pq.read_table(path))  # ... and restored on the host for pyarrow
    assert {w for (_, w, _) in report.columns} == {"pyarrow"}
    assert all("lost under this batch" in why and "for the test" in why for (_, _, why) in report.columns)


@pytest.mark.parametrize("decode", ["auto", "gpu"])
def test_where_the_gpu_decode_fails_the_pages_left_on_the_device_are_decompressed_on_the_host(
        standin_service, tmp_path, monkeypatch, decode):
    """A lost decode (maybe another reader's page took the service down) is pyarrow's, with decode="gpu" too."""
    from dask_hwdecomp.service import decoding

    path = _write(tmp_path) + "/part1.parquet"
    read_table(path, backend="auto", decode=decode)
    _scribbled_images(monkeypatch)

    def lost(*args, **kwargs):
        raise decoding.DecoderLost("lost for the test")

    monkeypatch.setattr(decoding, "_decode_once", lost)
    before = _copied_back(standin_service)
    report = ReadReport()
    got = read_table(path, backend="auto", decode=decode, report=report)
    assert _copied_back(standin_service) > before  # the pages were left on the device ...
    assert got.equals(pq.read_table(path))  # ... and pyarrow read them decompressed on the host
    assert {w for (_, w, _) in report.columns} == {"pyarrow"}
