"""cuMemHostRegister cost on memfd segments: plain, MADV_HUGEPAGE, and per size."""
import mmap, os, time
import numpy as np
from cuda.bindings import driver as d
def ck(r):
    if isinstance(r, tuple): r, *rest = r
    else: rest = []
    assert r == d.CUresult.CUDA_SUCCESS, r
    return rest[0] if len(rest) == 1 else rest
ck(d.cuInit(0)); dev = ck(d.cuDeviceGet(0)); ctx = ck(d.cuDevicePrimaryCtxRetain(dev)); ck(d.cuCtxSetCurrent(ctx))
for p in ("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "/sys/kernel/mm/transparent_hugepage/enabled"):
    try: print(p, open(p).read().strip())
    except OSError as e: print(p, e)
for size_mb in (64, 256, 1024):
    for huge in (False, True):
        n = size_mb << 20
        fd = os.memfd_create("probe", os.MFD_CLOEXEC); os.ftruncate(fd, n)
        mm = mmap.mmap(fd, n)
        if huge and hasattr(mmap, "MADV_HUGEPAGE"):
            mm.madvise(mmap.MADV_HUGEPAGE)
        addr = np.frombuffer(mm, np.uint8).ctypes.data
        t = time.perf_counter(); ck(d.cuMemHostRegister(addr, n, d.CU_MEMHOSTREGISTER_PORTABLE)); reg = time.perf_counter() - t
        t = time.perf_counter(); ck(d.cuMemHostUnregister(addr)); unreg = time.perf_counter() - t
        t = time.perf_counter(); ck(d.cuMemHostRegister(addr, n, d.CU_MEMHOSTREGISTER_PORTABLE)); reg2 = time.perf_counter() - t
        ck(d.cuMemHostUnregister(addr))
        print(f"{size_mb:5d} MiB huge={huge}: register {reg*1e3:7.1f} ms ({n/reg/1e9:5.1f} GB/s), unregister {unreg*1e3:6.1f} ms, again {reg2*1e3:7.1f} ms")
        del addr; mm.close(); os.close(fd)
