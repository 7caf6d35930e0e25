"""The GPU service's decoder: warm-up and decodes at once, every stream taken, nothing waits forever.

Runs the real kernels (numba's CUDA simulator without a GPU).
"""

from __future__ import annotations

import io
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dask_hwdecomp.gpudecode.assemble import assemble
from dask_hwdecomp.gpudecode.hosted import HostedDecoder
from dask_hwdecomp.gpudecode.plan import plan_file
from dask_hwdecomp.gpudecode.tables import place_outputs


def _tiny(seed: int) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"x": pa.array(np.arange(seed, seed + 20), mask=np.arange(20) % 3 == 0)}), sink,
                   compression="none")
    return sink.getvalue()


def _decode(decoder: HostedDecoder, data: bytes):
    plan = plan_file(data)
    pending = decoder.measure(memoryview(data), plan.ranges, plan.chunks, plan.pages, plan.data_bytes)
    try:
        chunks = pending.chunks.copy()
        out = np.zeros(max(place_outputs(chunks), 1), np.uint8)
        errors = decoder.write(pending, chunks, out.data)
    finally:
        pending.close()
    assert not errors.any()
    return assemble(out, out, chunks, plan)[0]


def test_warm_up_and_decodes_at_once_with_every_stream_taken_all_finish(monkeypatch):
    from numba import config

    from dask_hwdecomp.gpudecode import warmup

    files = [_tiny(i) for i in range(3)]
    # Tiny files keep the simulated warm-up short; the order of locks and streams is the same.
    monkeypatch.setattr(warmup, "warmup_files", lambda: files)
    decoder = HostedDecoder(streams=1)
    data = files[0]
    # A decode measured before the warm-up holds the decoder's only stream
    # until its write: the warm-up (a stream of its own) must still finish,
    # and clients that wait for the stream get it after that write.
    plan = plan_file(data)
    pending = decoder.measure(memoryview(data), plan.ranges, plan.chunks, plan.pages, plan.data_bytes)
    results: dict = {}

    def client(i):
        results[i] = _decode(decoder, files[i])

    warm = threading.Thread(target=decoder.warm_up, daemon=True)
    clients = [threading.Thread(target=client, args=(i,), daemon=True) for i in (1, 2)]
    warm.start()
    for t in clients:
        t.start()
    warm.join(timeout=120)
    assert not warm.is_alive(), "the warm-up waited for a stream a pending decode held"
    chunks = pending.chunks.copy()
    out = np.zeros(max(place_outputs(chunks), 1), np.uint8)
    decoder.write(pending, chunks, out.data)
    pending.close()
    for t in clients:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in clients) and sorted(results) == [1, 2]
    expected = pq.read_table(io.BytesIO(data))
    got = assemble(out, out, chunks, plan)[0]
    assert all(got[name].equals(expected.column(name)) for name in expected.column_names)
    for i in (1, 2):
        want = pq.read_table(io.BytesIO(files[i]))
        assert all(results[i][name].equals(want.column(name)) for name in want.column_names)
    # Warm on a GPU; under the simulator (one process-wide module) decodes stay one at a time.
    assert decoder._warm is not bool(config.ENABLE_CUDASIM)
