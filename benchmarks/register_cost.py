"""What page-locking a shared segment costs the GPU service, and what it stalls.

The GPU service registers (``cuMemHostRegister``) every shared segment a
reader hands it, once. This measures, for memfd segments like the readers'
(:class:`dask_hwdecomp.service.shm.SharedSegment`):

* ``fresh``: the registration of a segment no one has touched (the kernel
  allocates and zeroes every page inside the call);
* ``touched``: the same after the owner wrote one byte a page (as a reader
  can, in its own thread, before sharing);
* ``populated``: after :func:`dask_hwdecomp.service.shm.populate` (what a
  reader does to each new segment: ``madvise(MADV_POPULATE_WRITE)``);
* ``unregister``: ``cuMemHostUnregister``;
* ``copy_alone`` / ``copy_during``: device-to-host throughput of a stream
  copying into pinned memory, alone and while another thread registers
  segments (whether registration stalls the service's copies).

Run on a GPU machine, with the package importable (installed, or
``PYTHONPATH=.`` in a checkout): ``python benchmarks/register_cost.py [--mib 256] [--repeats 4]``.
Prints one line per figure; seconds are medians.
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import threading
import time

import numpy as np

from dask_hwdecomp.service.shm import populate


def _check(result):
    from cuda.bindings import driver

    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err}")
    return rest[0] if len(rest) == 1 else rest


def _segment(nbytes: int):
    fd = os.memfd_create("regcost", os.MFD_CLOEXEC)
    os.ftruncate(fd, nbytes)
    mm = mmap.mmap(fd, nbytes)
    os.close(fd)
    return mm, int(np.frombuffer(mm, np.uint8).ctypes.data)


def _register(addr: int, nbytes: int) -> float:
    from cuda.bindings import driver

    t = time.perf_counter()
    _check(driver.cuMemHostRegister(addr, nbytes, driver.CU_MEMHOSTREGISTER_PORTABLE))
    return time.perf_counter() - t


def _unregister(addr: int) -> float:
    from cuda.bindings import driver

    t = time.perf_counter()
    _check(driver.cuMemHostUnregister(addr))
    return time.perf_counter() - t


def _prepare(kind: str, mm: mmap.mmap) -> float:
    t = time.perf_counter()
    if kind == "touched":
        np.frombuffer(mm, np.uint8)[:: mmap.PAGESIZE] = 0
    elif kind == "populated":
        populate(mm)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=4)
    args = ap.parse_args()
    from cuda.bindings import driver

    _check(driver.cuInit(0))
    dev = _check(driver.cuDeviceGet(0))
    ctx = _check(driver.cuDevicePrimaryCtxRetain(dev))
    _check(driver.cuCtxSetCurrent(ctx))
    nbytes = args.mib << 20
    try:
        thp = open("/sys/kernel/mm/transparent_hugepage/shmem_enabled").read().strip()
    except OSError:
        thp = "?"
    print(f"segment {args.mib} MiB, repeats {args.repeats}; shmem THP: {thp}")
    for kind in ("fresh", "touched", "populated"):
        prep, reg, unreg = [], [], []
        for _ in range(args.repeats):
            mm, addr = _segment(nbytes)
            try:
                prep.append(_prepare(kind, mm))
            except OSError as exc:
                print(f"{kind}: prepare failed ({exc})")
                mm.close()
                break
            reg.append(_register(addr, nbytes))
            unreg.append(_unregister(addr))
            mm.close()
        if reg:
            r = statistics.median(reg)
            print(f"{kind}: prepare {statistics.median(prep) * 1e3:.1f} ms, register {r * 1e3:.1f} ms "
                  f"({nbytes / r / 1e9:.2f} GB/s), unregister {statistics.median(unreg) * 1e3:.1f} ms")

    # Does registering stall another thread's copies?
    chunk = 256 << 20
    dptr = _check(driver.cuMemAlloc(chunk))
    hptr = _check(driver.cuMemHostAlloc(chunk, driver.CU_MEMHOSTALLOC_PORTABLE))
    stream = _check(driver.cuStreamCreate(1))

    def copies(seconds: float) -> float:
        n, end = 0, time.perf_counter() + seconds
        began = time.perf_counter()
        while time.perf_counter() < end:
            _check(driver.cuMemcpyDtoHAsync(hptr, dptr, chunk, stream))
            _check(driver.cuStreamSynchronize(stream))
            n += chunk
        return n / (time.perf_counter() - began) / 1e9

    print(f"copy_alone: {copies(1.0):.1f} GB/s device to pinned host")
    stop = threading.Event()
    count = [0]

    def registrar():
        _check(driver.cuCtxSetCurrent(ctx))
        while not stop.is_set():
            mm, addr = _segment(nbytes)
            _register(addr, nbytes)
            _unregister(addr)
            mm.close()
            count[0] += 1

    th = threading.Thread(target=registrar)
    th.start()
    rate = copies(1.5)
    stop.set()
    th.join()
    print(f"copy_during: {rate:.1f} GB/s while {count[0]} fresh segments were registered")


if __name__ == "__main__":
    main()
