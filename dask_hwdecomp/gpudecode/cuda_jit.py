"""numba-cuda, imported once for every kernel module of the decoder.

numba-cuda 0.30 registers an overload of ``numpy.row_stack``, which NumPy
2.4 removed (it was an alias of ``numpy.vstack``); without the alias the
import fails on NumPy >= 2.4. Kernel modules import ``cuda`` from here.

Under numba's CUDA simulator (the tests without a GPU), the interpreter
switches threads every 0.1 ms instead of 5: the simulator runs a block's
threads as Python threads and its block manager polls them in a busy loop,
so at the default interval every thread's step to a barrier waits out the
poller's 5 ms slice. Decoding the warm-up files takes a quarter of the time.
"""

from __future__ import annotations

import sys

import numpy as np

if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

from numba import config, cuda  # noqa: E402

if config.ENABLE_CUDASIM:  # type: ignore[attr-defined]
    sys.setswitchinterval(min(sys.getswitchinterval(), 1e-4))

__all__ = ["cuda"]
