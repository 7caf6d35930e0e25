"""numba-cuda, imported once for every kernel module of the decoder.

numba-cuda 0.30 registers an overload of ``numpy.row_stack``, which NumPy
2.4 removed (it was an alias of ``numpy.vstack``); without the alias the
import fails on NumPy >= 2.4. Kernel modules import ``cuda`` from here.
Under numba's CUDA simulator the import also fits the simulator for the
kernels (:mod:`.simulator`).
"""

from __future__ import annotations

import numpy as np

if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

from numba import config, cuda  # noqa: E402

if config.ENABLE_CUDASIM:  # type: ignore[attr-defined]
    from .simulator import fit

    fit()  # a short switch interval, atomic block-shared arrays (see .simulator)

__all__ = ["cuda"]
