"""A GPU call's own seconds, timed by CUDA events while a timeline is recorded (GPU machine).

The nvCOMP backend runs in this process here (not through the service), so
its batcher's ``gpu_call`` spans land in this process's timeline.
"""

from __future__ import annotations

import pytest

from dask_hwdecomp.bench import timeline as tl
from dask_hwdecomp.jobs import Algo
from dask_hwdecomp.options import Options

from pagegen import assert_outputs, make_batch, run_batch

pytestmark = pytest.mark.gpu


def test_each_gpu_call_has_the_gpus_own_seconds_within_its_wall_time(nvcomp_available, monkeypatch, tmp_path):
    from dask_hwdecomp import timeline
    from dask_hwdecomp.decompress.nvcomp import create

    monkeypatch.setenv(timeline.ENV, str(tmp_path))
    backend = create(Options(backend="nvcomp", streams=2, batch_latency_ms=2.0, gpu_timeout_s=10.0))
    try:
        for seed in range(3):
            jobs, src, dst_len, expected = make_batch([Algo.SNAPPY], [65_536] * 200, seed=seed)
            assert_outputs(run_batch(backend, jobs, src, dst_len), jobs, expected)
    finally:
        backend.close()
    timeline.flush()
    spans = tl.load(tmp_path)
    window = tl.Window("all", min(s["t0"] for s in spans), max(s["t1"] for s in spans))
    calls = tl.batcher_calls(spans, window)
    assert sum(c.pages for c in calls) == 600 and sum(c.out_bytes for c in calls) == 600 * 65_536
    for c in calls:
        # the GPU worked for part of the call's wall time, never longer than it
        assert c.gpu_s is not None and 0 < c.gpu_s <= c.seconds, c
        assert c.gpu_share is not None and 0 < c.gpu_share <= 1
    assert "GPU -" not in tl.render(window, {}, calls=calls)


def test_an_event_pair_times_the_work_between_its_events(cuda_device):
    import numpy as np

    from dask_hwdecomp.gpu.device import Device
    from dask_hwdecomp.gpu.ops import CudaOps

    with Device(0) as device:
        ops = CudaOps(device, checksummer=None)
        stream = ops.new_stream()
        host = ops.alloc_host(64 << 20)
        dev = ops.alloc_device(64 << 20, stream)
        try:
            with ops.event_pair() as events:
                timings = []
                for copies in (1, 8):  # the same pair reused, as a stream runner does
                    events.start(stream)
                    for _ in range(copies):
                        ops.htod(dev.ptr, host.ptr, 64 << 20, stream)
                    events.stop(stream)
                    ops.synchronize(stream)
                    timings.append(events.seconds())
            assert 0 < timings[0] < timings[1]
            assert np.isfinite(timings).all()
        finally:
            dev.close()
            host.close()
            stream.close()
