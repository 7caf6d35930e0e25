"""GPU resources with explicit lifetimes: device, streams, memory pools.

Everything here that touches CUDA is imported only when a GPU backend is
probed or created (see :mod:`dask_hwdecomp.decompress.registry`), never at
package import. Raw pointers and ctypes stay inside this package and the two
GPU backend modules.

Modules
-------
check     one place turning CUresult / nvcompStatus_t into exceptions
device    the device and its primary context
stream    explicit non-blocking streams (never the default stream)
memory    pinned host buffers and their capped pool; device arenas
ops       copies, allocation and synchronisation behind one small object
staging   laying a call's parts out on the device and copying them back
batcher   merging concurrent ``decompress`` calls into one call per stream
nvcomp_lib  ctypes bindings of nvCOMP's batched C API
engine    the CUDA hardware decompression engine (``cuMemBatchDecompressAsync``)
"""
