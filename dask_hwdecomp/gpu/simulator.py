"""numba's CUDA simulator, made fit for the decoder's kernels (no GPU: CI, the tests' services).

Two traits of the simulator break kernels that are right on a GPU:

- It polls for its Python threads at each barrier from the launching
  thread, holding the GIL: each barrier costs a thread switch interval
  (5 ms by default), so the interval is made short.
- ``cuda.shared.array`` creates a block's array on its first use without a
  lock. With short switch intervals two threads of a block can both find
  none and each create one; they then no longer share it, and a thread
  reads another's uninitialised memory (a scan slot of about 10**9, an
  index far out of bounds). The creation is made atomic here.

:func:`fit` does both, once; :mod:`.cuda_jit` calls it where the simulator is on.
"""

from __future__ import annotations

import sys
import traceback

import numpy as np

__all__ = ["SWITCH_INTERVAL_S", "fit", "simulated"]

# Seconds a thread holds the GIL under the simulator.
SWITCH_INTERVAL_S = 1e-4

_fitted = False


def simulated() -> bool:
    """Whether numba-cuda runs under its CUDA simulator here (``NUMBA_ENABLE_CUDASIM``)."""
    from numba import config

    return bool(config.ENABLE_CUDASIM)  # type: ignore[attr-defined]


def fit() -> None:
    """Shorten the switch interval and make block-shared arrays atomic (idempotent)."""
    global _fitted
    if _fitted:
        return
    from numba.cuda.simulator import kernelapi

    original = kernelapi.FakeCUDAShared.array

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:  # dynamic shared memory, or the simulator's own refusal
            return original(self, shape, dtype, alignment)
        if isinstance(dtype, kernelapi.types.Type):
            dtype = kernelapi.numpy_support.as_dtype(dtype)
        # One array per calling source line, as the simulator keys them.
        caller = tuple(traceback.extract_stack(sys._getframe())[-2][0:2])
        found = self._allocations.get(caller)
        if found is None:
            # dict.setdefault is one step under the GIL: every thread of the block gets the first array made.
            found = self._allocations.setdefault(caller, np.empty(shape, dtype))
        return found

    setattr(kernelapi.FakeCUDAShared, "array", array)  # noqa: B010 - a method replaced on the class
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    _fitted = True
