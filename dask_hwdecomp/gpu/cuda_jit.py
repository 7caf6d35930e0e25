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

:func:`held_context` runs a function with numba-cuda's context looked up
once for all the numba calls inside it.
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

__all__ = ["cuda", "held_context"]


def held_context(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with numba-cuda's context looked up once, for every numba call inside.

    Each numba-cuda call made outside it (a device array, a view of one, a
    copy, each array argument of a launch) looks the current context up
    with two driver calls, and each driver call releases the GIL. In the
    GPU service a thread that lets the GIL go waits to take it back while
    the service's other threads run Python: at scale the decoder's runner
    and the decompression dispatchers spent 40 to 45 % of their busy time
    taking it back. Inside, numba reads the context from its thread-local
    cache instead (``numba.cuda.require_context``).
    """
    return cuda.require_context(fn)(*args, **kwargs)
