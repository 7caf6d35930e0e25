"""The GPU service's decoder: warm-up and concurrent decodes at once, nothing waits forever.

Runs the real kernels (numba's CUDA simulator without a GPU).
"""

from __future__ import annotations

import io
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dask_hwdecomp.gpudecode.assemble import assemble
from dask_hwdecomp.gpudecode.hosted import DecodeRequest, HostedDecoder
from dask_hwdecomp.gpudecode.merge import PlanRecords
from dask_hwdecomp.gpudecode.plan import plan_file


def _tiny(seed: int) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"x": pa.array(np.arange(seed, seed + 20), mask=np.arange(20) % 3 == 0)}), sink,
                   compression="none")
    return sink.getvalue()


def _request(data: bytes) -> DecodeRequest:
    plan = plan_file(data)
    return DecodeRequest(memoryview(data), PlanRecords(plan.ranges, plan.chunks, plan.pages, plan.data_bytes))


def _columns(pending, data: bytes):
    out = np.zeros(pending.nbytes, np.uint8)
    pending.copy_to(memoryview(out))
    return assemble(out, out, pending.chunks, plan_file(data))[0]


def _decode(decoder: HostedDecoder, data: bytes):
    pending = decoder.decode(_request(data))
    try:
        assert not pending.failed
        return _columns(pending, data)
    finally:
        pending.close()


def test_warm_up_and_decodes_at_once_all_finish_while_a_decode_waits_for_its_copy(monkeypatch):
    from numba import config

    from dask_hwdecomp.gpudecode import warmup

    files = [_tiny(i) for i in range(4)]
    # Tiny files keep the simulated warm-up short; the order of locks is the same.
    monkeypatch.setattr(warmup, "warmup_files", lambda: files[:2])
    decoder = HostedDecoder(runners=1, copy_streams=1)
    try:
        # A decode written before the warm-up and not yet copied (its client
        # between its two requests) holds device memory, not the runner: the
        # warm-up and the other clients still finish.
        pending = decoder.decode(_request(files[0]))
        results: dict = {}

        def client(i):
            results[i] = _decode(decoder, files[i])

        warm = threading.Thread(target=decoder.warm_up, daemon=True)
        clients = [threading.Thread(target=client, args=(i,), daemon=True) for i in (1, 2, 3)]
        warm.start()
        for t in clients:
            t.start()
        warm.join(timeout=180)
        for t in clients:
            t.join(timeout=180)
        assert not warm.is_alive() and not any(t.is_alive() for t in clients)
        assert sorted(results) == [1, 2, 3]
        got = _columns(pending, files[0])
        pending.close()
        for i, data in enumerate(files):
            want = pq.read_table(io.BytesIO(data))
            cols = got if i == 0 else results[i]
            assert all(cols[name].equals(want.column(name)) for name in want.column_names)
        # Warm on a GPU; under the simulator (one process-wide module) decodes stay one at a time.
        assert decoder._warm is not bool(config.ENABLE_CUDASIM)
        stats = decoder.stats()
        assert 1 <= stats["decode_runs"] <= stats["decodes"] == 4
    finally:
        decoder.close()


def test_a_closed_decoder_refuses_new_decodes():
    decoder = HostedDecoder(runners=1, copy_streams=1)
    decoder.close()
    with pytest.raises(RuntimeError, match="closed"):
        decoder.decode(_request(_tiny(0)))


def test_a_run_that_fails_as_a_whole_fails_its_callers_and_the_runner_goes_on():
    decoder = HostedDecoder(runners=1, copy_streams=1)
    try:
        data = _tiny(0)
        good = _request(data)
        # Upload ranges of the wrong shape: the run fails before the kernels
        # (the service's checks refuse such a plan before it gets here).
        plan = good.plan
        broken = DecodeRequest(good.src, PlanRecords(plan.ranges[:, :2], plan.chunks, plan.pages, plan.data_bytes))
        with pytest.raises(ValueError):
            decoder.decode(broken)
        cols = _decode(decoder, data)
        want = pq.read_table(io.BytesIO(data))
        assert all(cols[name].equals(want.column(name)) for name in want.column_names)
    finally:
        decoder.close()


@pytest.mark.parametrize(("value", "runners"), [(None, 1), ("", 1), ("2", 2), (" 16 ", 16)])
def test_the_runner_count_comes_from_the_environment(monkeypatch, value, runners):
    from dask_hwdecomp.gpudecode.hosted import RUNNERS_ENV, runners_from_env

    if value is None:
        monkeypatch.delenv(RUNNERS_ENV, raising=False)
    else:
        monkeypatch.setenv(RUNNERS_ENV, value)
    assert runners_from_env() == runners


@pytest.mark.parametrize("value", ["0", "17", "two", "-1", "1.5"])
def test_a_runner_count_that_is_no_count_is_refused_by_name(monkeypatch, value):
    from dask_hwdecomp.gpudecode.hosted import RUNNERS_ENV, runners_from_env

    monkeypatch.setenv(RUNNERS_ENV, value)
    with pytest.raises(ValueError, match=RUNNERS_ENV):
        runners_from_env()


def test_a_decode_under_a_timeline_records_its_spans(monkeypatch, tmp_path):
    from dask_hwdecomp import timeline
    from dask_hwdecomp.bench import timeline as tl

    monkeypatch.setenv(timeline.ENV, str(tmp_path))
    decoder = HostedDecoder(runners=1, copy_streams=1)
    try:
        table = _decode(decoder, _tiny(3))
    finally:
        decoder.close()
    timeline.flush()
    assert table["x"].to_pylist() == pq.read_table(io.BytesIO(_tiny(3)))["x"].to_pylist()
    kinds = {s["k"] for s in tl.load(tmp_path)}
    # the simulator has no CUDA events: the GPU's own seconds (decode_gpu) are recorded on a device only
    assert {"decode_queue", "decode_run", "decode_upload", "decode_measure", "decode_write"} <= kinds


def _compiled_signatures() -> dict:
    """Every numba host function of the package loaded now, with the argument types it was compiled for."""
    import sys

    from numba.core.registry import CPUDispatcher

    out = {}
    for name, module in list(sys.modules.items()):
        if name.startswith("dask_hwdecomp") and module is not None:
            for attr, value in vars(module).items():
                if isinstance(value, CPUDispatcher):
                    out[f"{name}.{attr}"] = {str(s) for s in value.signatures}
    return out


def test_after_the_warm_up_a_request_from_shared_memory_compiles_nothing(monkeypatch, tmp_path):
    # The service's deadline starts once the decoder is warm: a host function
    # compiled afresh for a real request (a writable shared segment, where the
    # warm-up had read-only bytes) took seconds on a cold cache, and the
    # service was killed as hung on the first read.
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    from helpers import matrix_table, write_matrix

    # Dictionary pages in v1 and plain ones in v2 (the other two uncompressed
    # files add simulated minutes and no other argument type).
    files = [f.path for f in write_matrix(tmp_path, matrix_table().slice(0, 64), codecs=("none",))
             if (f.data_page_version, f.dictionary) in (("1.0", True), ("2.0", False))]
    assert len(files) == 2
    decoder = HostedDecoder(runners=1, copy_streams=1)
    try:
        decoder.warm_up()
        warm = _compiled_signatures()
        for path in files:
            data = bytearray(path.read_bytes())  # writable, as a shared segment is
            plan = plan_file(bytes(data))
            pending = decoder.decode(DecodeRequest(memoryview(data),
                                                   PlanRecords(plan.ranges, plan.chunks, plan.pages, plan.data_bytes)))
            try:
                assert not pending.failed
                out = np.zeros(max(pending.nbytes, 1), np.uint8)
                pending.copy_to(memoryview(out))
            finally:
                pending.close()
        now = _compiled_signatures()
        new = {k: sorted(v - warm.get(k, set())) for k, v in now.items() if v - warm.get(k, set())}
        assert not new, new
    finally:
        decoder.close()
