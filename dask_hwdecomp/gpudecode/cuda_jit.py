"""numba-cuda, imported once for every kernel module of the decoder.

numba-cuda 0.30 registers an overload of ``numpy.row_stack``, which NumPy
2.4 removed (it was an alias of ``numpy.vstack``); without the alias the
import fails on NumPy >= 2.4. Kernel modules import ``cuda`` from here.
"""

from __future__ import annotations

import numpy as np

if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

import sys  # noqa: E402

from numba import config, cuda  # noqa: E402

# Seconds a thread holds the GIL under the simulator (see the docstring).
SIMULATOR_SWITCH_INTERVAL_S = 1e-4

if config.ENABLE_CUDASIM:  # type: ignore[attr-defined]
    sys.setswitchinterval(SIMULATOR_SWITCH_INTERVAL_S)

__all__ = ["cuda"]
