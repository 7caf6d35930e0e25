"""Every kernel the decoder launches compiles for a real GPU, without one.

numba's CUDA simulator runs kernels as Python, so it accepts code that
numba-cuda's compiler refuses (``int()`` of an enum, a Python object in a
kernel, ...). This test records every kernel launch, with its argument
types, of decodes that cover every output kind and encoding under the
simulator (the files the GPU service warms its decoder up with), then compiles each kernel for those types to PTX (sm_90) in a
process without the simulator: that needs NVVM (the ``nvidia-nvvm`` wheel of
the test extra), not a GPU.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import pytest

RECORD = textwrap.dedent('''
    import io, pickle, sys
    import numpy as np, pyarrow as pa, pyarrow.parquet as pq
    from numba.cuda.simulator import kernel as simkernel

    launches = set()
    real_call = simkernel.FakeCUDAKernel.__call__

    def describe(a):
        a = getattr(a, "_ary", a)
        if isinstance(a, np.ndarray):
            return ("array", a.dtype, a.ndim)
        return ("scalar", type(a).__name__)

    def call(self, *args):
        if not self._device:
            launches.add((self.fn.__module__, self.fn.__qualname__, tuple(describe(a) for a in args)))
        return real_call(self, *args)

    simkernel.FakeCUDAKernel.__call__ = call
    from dask_hwdecomp.gpudecode.plan import plan_file
    from dask_hwdecomp.gpudecode.runner import decode_host

    from dask_hwdecomp.gpudecode.warmup import warmup_files

    for data in warmup_files():
        plan = plan_file(data)
        decode_host(plan.gather(data), plan.chunks, plan.pages)
    # the gather kernel of uploads (pages kept on the device, packed host pieces)
    from dask_hwdecomp.gpu.cuda_jit import cuda
    from dask_hwdecomp.gpudecode.gather import copy_pieces
    from dask_hwdecomp.gpudecode.uploads import device_address

    block = cuda.to_device(np.arange(64, dtype=np.uint8))
    copy_pieces(cuda.to_device(np.zeros(64, np.uint8)), np.array([[device_address(block), 8, 16]], np.int64),
                [(np.arange(8, dtype=np.uint8), np.array([[0, 8, 40]], np.int64))], cuda.stream())
    # the Huffman stream walk of Zstd pages (beside nvCOMP), with the array types TableKernel passes
    from dask_hwdecomp.decompress.zstd_walk_kernel import LANES, walk_kernel

    one = np.ones(1, np.int64)
    walk_kernel[1, LANES](np.ones(4, np.uint8), np.zeros(1, np.int64), one, np.zeros(1, np.int64),
                      np.zeros(1, np.int64), one, np.ones(2, np.uint8), np.zeros(1, np.int64))
    with open(sys.argv[1], "wb") as f:
        pickle.dump(sorted(launches, key=repr), f)
''')

COMPILE = textwrap.dedent('''
    import importlib, pickle, sys
    import numpy as np
    import numba
    from dask_hwdecomp.gpu.cuda_jit import cuda
    from numba.cuda import dispatcher

    class Sm90:  # device functions ask the current device for its compute capability
        compute_capability = (9, 0)

    dispatcher.get_current_device = lambda: Sm90()

    with open(sys.argv[1], "rb") as f:
        launches = pickle.load(f)
    failed = []
    for module, name, args in launches:
        kernel = getattr(importlib.import_module(module), name)
        types = []
        for a in args:
            if a[0] == "array":
                types.append(numba.typeof(np.zeros((0,) * a[2], dtype=a[1])))
            else:
                plain = {"int": 0, "float": 0.0, "bool": True}
                types.append(numba.typeof(plain[a[1]] if a[1] in plain else getattr(np, a[1])(0)))
        try:
            cuda.compile_ptx(kernel.py_func, tuple(types), cc=(9, 0))
        except Exception as exc:
            text = str(exc)
            failed.append(f"{module}.{name}: {type(exc).__name__}: {text[:600]} ... {text[-600:]}")
    print(len(launches), "kernels")
    if failed:
        print("\\n".join(failed))
        sys.exit(1)
''')


def _run(script: str, arg: str, sim: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1" if sim else "0"}
    return subprocess.run([sys.executable, "-c", script, arg], env=env, capture_output=True, text=True,
                          timeout=600)


def test_every_launched_kernel_compiles_for_sm90(tmp_path):
    pytest.importorskip("numba.cuda")
    rec = tmp_path / "launches.pkl"
    out = _run(RECORD, str(rec), sim=True)
    assert out.returncode == 0, out.stderr[-3000:]
    launches = pickle.loads(rec.read_bytes())
    assert len({(m, n) for m, n, _ in launches}) >= 5, launches
    out = _run(COMPILE, str(rec), sim=False)
    if "NVVM" in out.stdout + out.stderr and "not found" in (out.stdout + out.stderr).lower():
        pytest.fail("NVVM is missing: install the test extra (nvidia-nvvm)\n" + out.stderr[-2000:])
    assert out.returncode == 0, (out.stdout[-6000:], out.stderr[-3000:])
