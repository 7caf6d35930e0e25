"""GPU resources with explicit lifetimes: device, streams, memory pools.

Everything here that touches CUDA is imported only when a GPU backend is
probed or created (see :mod:`dask_hwdecomp.routing.registry`), never at
package import. Raw pointers, ctypes and the CUDA bindings stay inside this
package: a GPU backend of :mod:`dask_hwdecomp.decompress` plugs a launcher
from here (``nvcomp_launcher``, ``hwengine_launcher``) into its stream runners.

Modules
-------
errors    one place turning CUresult / nvcompStatus_t into exceptions
device    the device and its primary context
stream    explicit non-blocking streams (never the default stream)
memory    pinned host buffers and their capped pool; device arenas
ops       copies, allocation and synchronisation behind one small object
staging   laying a call's parts out on the device and copying them back
batcher   merging concurrent ``decompress`` calls into one call per stream
stream_runner  one stream with its arena and scratch running one call; the Launcher protocol
nvcomp_lib  ctypes bindings of nvCOMP's batched C API
nvcomp_launcher  one GPU call through nvCOMP: metadata block, one call per bitstream
cuda_jit  numba-cuda, imported once for every kernel (the decoder's)
simulator numba's CUDA simulator made fit for the kernels (no GPU: CI, the tests' services)
device_pool  numba's device allocations from a pool by size class (set by cuda_jit), device_hold which decode holds them
numba_streams  streams owned here, lent to numba's launches as external streams
hwengine  the CUDA hardware decompression engine (``cuMemBatchDecompressAsync``)
hwengine_launcher  one GPU call through the engine: params records, zeroed size slots
hwengine_canaries  the engine selfcheck's call: outputs amid canaries, size slots to watch
checksums the CRC-32 checks of a call, on its stream
"""
