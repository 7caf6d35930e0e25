"""numba-cuda, imported once for every kernel of the package.

numba-cuda 0.30 registers an overload of ``numpy.row_stack``, which NumPy
2.4 removed (it was an alias of ``numpy.vstack``); without the alias the
import fails on NumPy >= 2.4. Kernel modules import ``cuda`` from here.

On a GPU the import also makes numba allocate device memory from
:class:`~.device_pool.PooledDeviceMemory`, before numba creates its
context: a context takes its memory manager when it is created, so
whichever kernel of the process runs first must find the pool already
set.
Under numba's CUDA simulator the import fits the simulator for the kernels
instead (:mod:`.simulator`).
"""

from __future__ import annotations

import numpy as np

if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack

from numba import cuda  # noqa: E402

from .simulator import fit, simulated  # noqa: E402

if simulated():
    fit()  # a short switch interval, atomic block-shared arrays (see .simulator)
else:
    from .device_pool import PooledDeviceMemory

    cuda.set_memory_manager(PooledDeviceMemory)

__all__ = ["cuda"]
