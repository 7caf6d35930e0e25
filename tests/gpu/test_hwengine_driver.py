"""The engine driver's pieces that a GPU without the engine can check (GPU machine).

The H200 has no decompression engine (mask 0), so the engine call itself is
tested against the stand-in in CI. Here: the installed cuda-bindings'
``mem_decompress_params_dtype`` equals the layout the params are written in,
and the driver object (HW_DECOMPRESS pool, the slot zeroing memset, a call
that fails as a whole) works on a real device. Each runs in a child process,
so this process never holds a CUDA context (``test_zz_reader_process_holds_no_cuda_context``).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

_DTYPE = """
import json
from importlib.metadata import version
from cuda.bindings._v2 import driver as v2
from dask_hwdecomp.gpu.hwengine import check_params_dtype
dt = v2.mem_decompress_params_dtype
check_params_dtype(dt, version("cuda-bindings"))
print(json.dumps({"names": list(dt.names), "itemsize": dt.itemsize}))
"""

_DRIVER = """
import ctypes, json
import numpy as np
from dask_hwdecomp.gpu.device import Device
from dask_hwdecomp.gpu.hwengine import EngineCallError, EngineDriver, PARAMS_DTYPE
out = {}
with Device(0) as dev:
    dev.activate()
    drv = EngineDriver(dev, 1 << 26)
    out["mask"] = drv.mask
    stream = drv.new_stream()
    mem = drv.alloc_device(1 << 16, stream)
    drv.memset_d32(mem.ptr, 0xA5A5A5A5, 1 << 14, stream)
    drv.memset_d32(mem.ptr + 4096, 0, 8, stream)
    host = np.zeros(1 << 16, dtype=np.uint8)
    drv.dtoh(host.ctypes.data, mem.ptr, 1 << 16, stream)
    stream.synchronize()
    words = host.view(np.uint32)
    out["memset"] = bool((words[:1024] == 0xA5A5A5A5).all() and (words[1024:1032] == 0).all()
                         and (words[1032:] == 0xA5A5A5A5).all())
    params = np.zeros(1, dtype=PARAMS_DTYPE)
    params["src_num_bytes"], params["dst_num_bytes"] = 16, 16
    params["src"], params["dst"], params["dst_act_bytes"] = mem.ptr, mem.ptr + 8192, mem.ptr + 4096
    params["algo"] = 4
    if drv.mask == 0:
        try:
            drv.batch_decompress(params, stream)
            out["call"] = "returned"
        except EngineCallError as exc:
            out["call"] = "EngineCallError"
            out["index"] = exc.index
    mem.close()
    stream.synchronize()
    stream.close()
    drv.close()
print(json.dumps(out))
"""


def _run(code: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_installed_bindings_params_dtype_matches(nvcomp_available):
    try:
        import cuda.bindings._v2.driver  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"cuda-bindings without the _v2 module here: {exc}")
    got = _run(_DTYPE)
    assert got["itemsize"] == 64, got


def test_hwengine_driver_pool_memset_and_call_error(nvcomp_available):
    got = _run(_DRIVER)
    assert got["memset"], got
    if got["mask"] == 0:
        # No engine: the call fails as a whole (the code is not one the
        # documentation lists for this call, so it is not asserted).
        assert got["call"] == "EngineCallError", got
