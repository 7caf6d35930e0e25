"""Every decompression backend is what the protocol says: its methods' signatures and its declared capabilities.

The backends: the CPU pool, the GPU backend (nvCOMP's and the hardware
engine's, here over the engine's stand-in, the GPU's one stand-in of this
suite) and the GPU service's client. Callers read the capabilities as
attributes; none probes for them.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import numpy as np
import pytest

from dask_hwdecomp.decompress.cpu import CpuBackend
from dask_hwdecomp.decompress.gpu_backend import GpuBackend
from dask_hwdecomp.decompress.hardware import create_with
from dask_hwdecomp.decompress.protocol import Backend
from dask_hwdecomp.jobs import Algo
from dask_hwdecomp.options import Options
from dask_hwdecomp.service.client import ServiceClient

from pagegen import assert_outputs, make_batch
from service_backends import open_backend
from standin_hwengine import StandinHwEngine

OPTS = Options(streams=1, batch_latency_ms=1.0, batch_bytes=8 << 20, cpu_threads=2)
METHODS = ("decompress", "host_buffer", "register_host", "stats", "close")
CAPABILITIES = {"name": str, "algorithms": frozenset, "max_job_bytes": (int, type(None)), "overwrites_gaps": bool,
                "keeps_outputs": bool, "lz4_checked": bool, "deadline_bytes_per_s": (int, type(None))}


def _parameters(func) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(func).parameters.values()]


@pytest.mark.parametrize("cls", [CpuBackend, GpuBackend, ServiceClient])
@pytest.mark.parametrize("method", METHODS)
def test_each_backend_method_has_the_protocols_parameters(cls, method):
    assert _parameters(getattr(cls, method)) == _parameters(getattr(Backend, method)), (cls, method)


def _open(kind: str, service_dir: str):
    if kind == "cpu":
        return CpuBackend(2)
    if kind == "service client":
        return open_backend("standin", OPTS, service_dir)
    return create_with(StandinHwEngine(), OPTS)


@pytest.fixture(params=["cpu", "gpu over the engine stand-in", "service client"])
def backend(request, service_dir):
    opened = _open(request.param, service_dir)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture(params=["cpu", "service client"])
def keeps_nothing(request, service_dir):
    """The backends that declare ``keeps_outputs = False`` (the GPU backend's keep= is the GPU suite's)."""
    opened = _open(request.param, service_dir)
    try:
        yield opened
    finally:
        opened.close()


def test_each_backend_declares_every_capability_and_decompresses_as_declared(backend):
    assert isinstance(backend, Backend)
    for name, kind in CAPABILITIES.items():
        assert isinstance(getattr(backend, name), kind), (name, getattr(backend, name))
    assert backend.algorithms and all(isinstance(a, Algo) for a in backend.algorithms)
    algos = sorted(backend.algorithms & {Algo.SNAPPY, Algo.LZ4, Algo.ZSTD}, key=lambda a: a.value)
    jobs, src, dst_len, expected = make_batch(algos, [2000] * 6, seed=3)
    s, d = backend.host_buffer(len(src)), backend.host_buffer(dst_len)
    try:
        s.view[:len(src)] = src
        redone = backend.decompress(jobs, s.view, d.view)
        out = bytes(d.view[:dst_len])
    finally:
        s.close()
        d.close()
    assert isinstance(redone, int) and redone == 0
    assert_outputs(out, jobs, expected)
    assert isinstance(backend.stats(), dict)


def test_a_backend_that_keeps_no_outputs_refuses_keep(keeps_nothing):
    assert keeps_nothing.keeps_outputs is False
    jobs, src, dst_len, _ = make_batch([Algo.SNAPPY], [100], seed=4)
    with pytest.raises(ValueError, match="keep"):
        keeps_nothing.decompress(jobs, memoryview(src), memoryview(bytearray(dst_len)), keep=object())


def test_the_cpu_backend_needs_no_page_locked_memory():
    with CpuBackend(1) as cpu:
        data = np.zeros(4096, np.uint8)
        assert cpu.register_host(int(data.ctypes.data), data.nbytes) is None


def test_no_caller_probes_a_backend_for_a_capability():
    declared = [n for n in CAPABILITIES if n != "name"] + list(METHODS) + ["verifies_zstd_checksum"]
    probe = re.compile(r"getattr\([^,]+,\s*[\"'](" + "|".join(declared) + r")[\"']")
    root = Path(__file__).resolve().parents[1] / "dask_hwdecomp"
    found = [f"{p.relative_to(root)}:{i}" for p in root.rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if probe.search(line)]
    assert not found, found
