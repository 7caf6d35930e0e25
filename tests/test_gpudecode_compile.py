"""The decoding kernels compile for a real GPU (PTX for sm_90), with or without a device.

numba's CUDA simulator runs the kernels as Python, so it accepts code that
numba cannot type for the device; this compiles each kernel with the
argument types the runner passes, in a fresh interpreter without the
simulator. It needs NVVM (the ``gpu`` extra), not a GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

_SCRIPT = textwrap.dedent(
    """
    import sys
    from dask_hwdecomp.gpudecode.cuda_jit import cuda
    from numba.cuda.cudadrv import nvvm
    if not nvvm.is_available():
        print("NO-NVVM")
        sys.exit(0)
    import numba.cuda.dispatcher as dispatcher
    from numba import types
    from numba.np import numpy_support
    from dask_hwdecomp.gpudecode import kernels_fixed as kf, kernels_levels as kl
    from dask_hwdecomp.gpudecode.tables import CHUNK, PAGE

    class _Device:  # device functions are compiled for the current device: name one
        compute_capability = (9, 0)

    dispatcher.get_current_device = lambda: _Device()
    A = lambda t: types.Array(t, 1, "C")
    u8, i32, i64 = A(types.uint8), A(types.int32), A(types.int64)
    C, P = A(numpy_support.from_dtype(CHUNK)), A(numpy_support.from_dtype(PAGE))
    signatures = {
        kl.levels_kernel: (u8, C, P, u8, i32, i32, i32, i64, i64),
        kf.check_kernel: (types.int64, C, P, i64, i64),
        kf.dict_kernel: (u8, C, P, i64, i64, i32, i32),
        kf.totals_kernel: (C, P),
        kf.zero_kernel: (u8,),
        kf.validity_kernel: (C, i64, u8, u8),
        kf.bool_kernel: (u8, C, P, i64, u8, i32, i32, i32, i64, i64, u8),
        kf.fixed_kernel: (u8, C, P, u8, i32, i32, i32, i64, i64, u8, i32, i64),
    }
    for kernel, sig in signatures.items():
        ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
        assert ".entry" in ptx, kernel
        print("compiled", kernel.py_func.__name__)
    """
)


def test_kernels_compile_for_the_device():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    if "NO-NVVM" in done.stdout:
        pytest.skip("NVVM is not installed (the gpu extra)")
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.count("compiled") == 8, done.stdout
