"""GPU decoding through the GPU service: plan, measure, place, write, assemble.

The service hosts the real CPU backend (``service_backends:cpu``) for the
connection, and its GPU decoder runs the real kernels: on a machine without
a CUDA device under numba's CUDA simulator (the service inherits
``NUMBA_ENABLE_CUDASIM``), on the GPU machine on the GPU.
"""

from __future__ import annotations

import gc
import io
import pickle
import subprocess
import sys
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dask_hwdecomp.errors import CorruptPageError
from dask_hwdecomp.gpudecode.assemble import assemble
from dask_hwdecomp.gpudecode.plan import plan_file
from dask_hwdecomp.gpudecode.tables import place_outputs
from dask_hwdecomp.options import Options

from helpers import gpu_available, uploaded_in_file
from service_backends import open_backend, service_directory


@pytest.fixture(scope="module")
def backend():
    with service_directory() as directory:
        with pytest.MonkeyPatch.context() as mp:
            if not gpu_available():
                mp.setenv("NUMBA_ENABLE_CUDASIM", "1")
            b = open_backend("cpu", Options(), directory, cap_bytes=16 << 20)
        yield b
        b.close()


def _table(n=300):
    rng = np.random.default_rng(5)
    ints = pa.array(rng.integers(-1000, 1000, n), mask=rng.random(n) < 0.3)
    return pa.table({
        "i64": ints,
        "f64": pa.array(rng.random(n)),
        "i32_dict": pa.array(rng.integers(0, 7, n).astype(np.int32)),
        "flag": pa.array(rng.random(n) < 0.5, mask=rng.random(n) < 0.1),
        "i8": pa.array(rng.integers(-100, 100, n).astype(np.int8)),
    })


def _file(table, **kw) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="none", data_page_size=512, row_group_size=120,
                   use_dictionary=["i32_dict"], **kw)
    return sink.getvalue()


def _in_shared(backend, data: bytes):
    buf = backend.host_buffer(len(data))
    buf.view[: len(data)] = data
    return buf


def _decode(backend, data: bytes):
    buf = _in_shared(backend, data)
    plan = plan_file(buf.view[: len(data)])
    out = backend.decode(plan, buf.view[: len(data)])
    return plan, out, buf


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_service_decodes_columns_equal_to_pyarrow(backend, version):
    table = _table()
    data = _file(table, data_page_version=version)
    plan, out, buf = _decode(backend, data)
    assert len(plan.chunks) == 5 * 3 and not plan.fallbacks[0]
    (columns,) = assemble(out.buffer, out.owner, out.chunks, plan)
    expected = pq.read_table(io.BytesIO(data))
    for name in table.column_names:
        assert columns[name].equals(expected.column(name)), name
    buf.close()


def test_a_corrupt_page_is_named_and_the_service_goes_on(backend):
    table = _table()
    data = bytearray(_file(table))
    plan = plan_file(bytes(data))
    # The dictionary-encoded column's first data page: its bit width byte set to 200.
    chunk = int(np.flatnonzero(plan.chunks["dict_page"] >= 0)[0])
    page = int(plan.chunks["first_page"][chunk])
    at = uploaded_in_file(plan, int(plan.pages["offset"][page]))
    data[at + 4 + int.from_bytes(data[at : at + 4], "little")] = 200
    buf = _in_shared(backend, bytes(data))
    with pytest.raises(CorruptPageError) as info:
        backend.decode(plan_file(buf.view[: len(data)]), buf.view[: len(data)])
    where = info.value.location
    assert where.column == "i32_dict" and where.row_group == 0 and where.page == 1
    buf.close()
    # The same connection decodes the next batch.
    plan2, out, buf2 = _decode(backend, _file(table))
    assert out.chunks["null_count"].sum() > 0
    buf2.close()


def test_outputs_live_in_shared_memory_until_their_arrays_die(backend):
    data = _file(_table())
    plan, out, buf = _decode(backend, data)
    buf.close()
    assert not out.copied
    held = backend.pool.stats()["held_bytes"]
    (columns,) = assemble(out.buffer, out.owner, out.chunks, plan)
    del out
    gc.collect()
    arrays = columns["f64"]
    del columns
    gc.collect()
    # One array keeps the whole output alive; once it dies, the next decode gives it back.
    _, out2, buf2 = _decode(backend, data)
    assert backend.pool.stats()["held_bytes"] >= held
    del arrays
    gc.collect()
    buf2.close()
    del out2
    gc.collect()
    from dask_hwdecomp.service.decoding import _returns_of
    returns = _returns_of(backend)
    returns.drain()
    assert returns.live_bytes == 0


def test_outputs_are_copied_out_when_live_outputs_press_the_pool(monkeypatch, service_dir):
    if not gpu_available():
        monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    # Outputs kept alive past 32 KiB of the pool (two of 16 KB) are copied
    # into ordinary memory.
    from dask_hwdecomp.service.decoding import ZERO_COPY_SHARE

    b = open_backend("cpu", Options(), service_dir, cap_bytes=ZERO_COPY_SHARE * (32 << 10))
    try:
        table = pa.table({"x": pa.array(np.arange(2000, dtype=np.int64))})
        sink = io.BytesIO()
        pq.write_table(table, sink, compression="none", use_dictionary=False)
        data = sink.getvalue()
        kept = []
        copied = []
        for _ in range(3):
            plan, out, buf = _decode(b, data)
            buf.close()
            kept.append(assemble(out.buffer, out.owner, out.chunks, plan))
            copied.append(out.copied)
        assert copied == [False, False, True]
        for (cols,) in kept:
            assert cols["x"].equals(table.column("x"))
    finally:
        b.close()


def test_the_service_refuses_a_plan_past_its_buffer(backend):
    data = _file(_table())
    buf = _in_shared(backend, data)
    plan = plan_file(buf.view[: len(data)])
    plan.pages["size"][0] = len(data) * 2
    with pytest.raises(Exception, match="refused a decode"):
        backend.decode(plan, buf.view[: len(data)])
    buf.close()


def test_concurrent_decodes_of_one_connection_each_get_their_own_columns(backend):
    # The service merges the plans queued together into one decode; each
    # client still gets its own buffers.
    files = [_file(_table(n)) for n in (40, 300, 123, 7)]
    got: dict = {}

    def read(i):
        plan, out, buf = _decode(backend, files[i])
        got[i] = assemble(out.buffer, out.owner, out.chunks, plan)[0]
        buf.close()

    threads = [threading.Thread(target=read, args=(i,)) for i in range(len(files))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert sorted(got) == list(range(len(files)))
    for i, data in enumerate(files):
        want = pq.read_table(io.BytesIO(data))
        assert all(got[i][name].equals(want.column(name)) for name in want.column_names), i


def test_the_service_refuses_a_write_placed_otherwise_than_place_outputs(backend, monkeypatch):
    from dask_hwdecomp.service import decoding

    def shifted(chunks):
        end = place_outputs(chunks)
        for name in ("out_valid", "out_values", "out_data"):
            col = chunks[name]
            col[col >= 0] += 64
        return end + 64

    monkeypatch.setattr(decoding, "place_outputs", shifted)
    data = _file(_table())
    buf = _in_shared(backend, data)
    with pytest.raises(Exception, match="refused a decode write"):
        backend.decode(plan_file(buf.view[: len(data)]), buf.view[: len(data)])
    buf.close()
    monkeypatch.undo()
    # The connection goes on.
    _, out, buf2 = _decode(backend, data)
    assert not out.copied
    buf2.close()


_ROUND_TRIP = """
import pickle, sys
table = pickle.loads(sys.stdin.buffer.read())
sys.stdout.buffer.write(pickle.dumps(table))
"""


def test_outputs_pickled_to_another_process_and_back_come_back_equal_and_the_block_returns(backend):
    from dask_hwdecomp.service.decoding import _returns_of

    table = _table()
    data = _file(table)
    plan, out, buf = _decode(backend, data)
    buf.close()
    assert not out.copied
    (columns,) = assemble(out.buffer, out.owner, out.chunks, plan)
    del out
    decoded = pa.table({name: columns[name] for name in table.column_names})
    del columns
    returns = _returns_of(backend)
    returns.drain()
    assert returns.live_bytes > 0  # the decoded table's buffers are the shared output
    # As dask moves a result between workers: pickled, read in another process, sent back.
    done = subprocess.run([sys.executable, "-c", _ROUND_TRIP], input=pickle.dumps(decoded), capture_output=True,
                          timeout=120, check=True)
    back = pickle.loads(done.stdout)
    assert back.equals(pq.read_table(io.BytesIO(data))) and back.equals(decoded)
    del decoded
    gc.collect()
    returns.drain()
    # The copies own their bytes: the shared output went back once the decoded table died.
    assert returns.live_bytes == 0
    assert back.equals(pq.read_table(io.BytesIO(data)))


def test_the_pool_stays_within_its_cap_over_a_loop_of_reads_held_then_released(monkeypatch, service_dir):
    if not gpu_available():
        monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    from dask_hwdecomp.service.decoding import ZERO_COPY_SHARE, _returns_of

    cap = ZERO_COPY_SHARE * (32 << 10)
    b = open_backend("cpu", Options(), service_dir, cap_bytes=cap)
    try:
        table = pa.table({"x": pa.array(np.arange(1000, dtype=np.int64)), "y": pa.array(np.arange(1000) * 0.5)})
        sink = io.BytesIO()
        pq.write_table(table, sink, compression="none", use_dictionary=False)
        data = sink.getvalue()
        returns = _returns_of(b)
        copied = 0
        for round_ in range(2):  # as a persist, then del, does: several reads held, then all released
            held = []
            for _ in range(3):
                plan, out, buf = _decode(b, data)
                buf.close()
                copied += out.copied
                held.append(assemble(out.buffer, out.owner, out.chunks, plan))
                del out
                assert b.pool.stats()["held_bytes"] <= cap, (round_, b.pool.stats())
            for (cols,) in held:
                assert cols["x"].equals(table.column("x")) and cols["y"].equals(table.column("y"))
            del held, cols
            gc.collect()
            returns.drain()
            assert returns.live_bytes == 0, round_
        # 16 KB of outputs a read against 32 KiB for zero-copy outputs: each round copied its third past the share
        assert copied >= 2
        # the second round's copies went into the memory of the first's, released
        stats = b.stats()
        assert stats["spare_reused"] >= 1 and stats["spare_kept_bytes"] <= cap // ZERO_COPY_SHARE
        assert stats["all_host_pinned_bytes"] <= cap
    finally:
        b.close()
