"""What one kernel launch costs the GPU service's Python, three ways, alone and beside busy threads.

The decoder's runner launches about twenty numba-cuda kernels a run, each
with up to a dozen device arrays, and at scale it waits most of its busy
time for the service's one GIL (``benchmarks/results/2026-12-07-h100-zstd-sequences/``).
This probe times, on one device, a kernel of ``--arrays`` device-array
arguments launched ``--launches`` times on one stream:

- ``dispatch``: ``kernel[grid, block, stream](*args)``, as the runner does;
- ``overload``: the compiled overload's own ``launch`` (no typing of the
  arguments, no overload lookup);
- ``prepared``: the arguments packed once (numba's own packing), then only
  cuda-core's ``launch`` each time;
- ``dispatch-held``: numba's dispatch with the launches inside
  :func:`~dask_hwdecomp.gpu.cuda_jit.held_context` (numba's context looked
  up once, not at each array argument);
- ``launch-held``: :func:`dask_hwdecomp.gpu.launch.launch` inside the held
  context, as the decoder's runner launches: the arguments packed by the
  package and ``cuLaunchKernel`` called with the GIL kept.

Each is timed alone and with ``--busy`` threads running pure Python beside
it (as the dispatchers and the request threads do in the service), and
checked to give the same output. Device only; prints one line per way:

    python benchmarks/launch_cost_gpu.py --launches 2000 --arrays 10 --busy 4
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np

from dask_hwdecomp.gpu import launch as launching
from dask_hwdecomp.gpu.cuda_jit import cuda, held_context  # numba-cuda with the NumPy 2.4 alias it needs


def _kernel(arrays: int):
    """A kernel that adds its ``arrays`` int32 inputs element by element into the first."""
    names = [f"a{i}" for i in range(arrays)]
    body = " + ".join(f"{n}[i]" for n in names[1:]) or "0"
    src = (f"def k({', '.join(names)}):\n"
           f"    i = cuda.grid(1)\n"
           f"    if i < a0.shape[0]:\n"
           f"        a0[i] = a0[i] + {body}\n")
    scope: dict = {"cuda": cuda}
    exec(src, scope)  # a kernel of any arity, as the runner's have up to a dozen
    return cuda.jit(scope["k"])


def _prepared(dispatcher, args, griddim, blockdim, stream):
    """A closure that launches the compiled overload with its arguments packed once (numba-cuda's private steps).

    numba-cuda on cuda-core launches through ``cuda.core.launch``; an older
    one through its driver's ``launch_kernel``. Raises what a numba-cuda of
    neither kind raises (the probe then says the way is not available).
    """
    from numba.cuda import dispatcher as numba_dispatcher

    kernel = next(iter(dispatcher.overloads.values()))
    retr: list = []
    packed: list = []
    for ty, value in zip(kernel.argument_types, args):
        kernel._prepare_args(ty, value, stream, retr, packed)
    cufunc = kernel._codelibrary.get_cufunc()
    if hasattr(numba_dispatcher, "LaunchConfig") and hasattr(cufunc, "kernel"):
        config = numba_dispatcher.LaunchConfig(grid=griddim, block=blockdim, shmem_size=0)
        launch = numba_dispatcher.launch
        return lambda: launch(stream, config, cufunc.kernel, *packed)
    from numba.cuda.cudadrv.driver import launch_kernel

    handle = stream.handle.value if hasattr(stream.handle, "value") else stream.handle
    return lambda: launch_kernel(cufunc.handle, *griddim, *blockdim, 0, handle, packed)


def _busy(stop: threading.Event) -> None:
    x = 0
    while not stop.is_set():
        for i in range(1000):
            x += i * i


def _time(way, launches: int, busy: int, stream, held: bool = False) -> float:
    stop = threading.Event()
    threads = [threading.Thread(target=_busy, args=(stop,), daemon=True) for _ in range(busy)]
    for t in threads:
        t.start()
    try:
        stream.synchronize()
        def loop() -> float:
            t0 = time.perf_counter()
            for _ in range(launches):
                way()
            return time.perf_counter() - t0

        host = held_context(loop) if held else loop()
        stream.synchronize()
    finally:
        stop.set()
        for t in threads:
            t.join()
    return host / launches * 1e6


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=2000)
    ap.add_argument("--arrays", type=int, default=10)
    ap.add_argument("--busy", type=int, default=4)
    ap.add_argument("--elements", type=int, default=1 << 12)
    ap.add_argument("--ways", default="dispatch,overload,dispatch-held,launch-held,prepared",
                    help="which ways to time, in order")
    a = ap.parse_args(argv)
    stream = cuda.stream()
    kernel = _kernel(a.arrays)
    threads = 128
    grid = (a.elements + threads - 1) // threads
    inputs = [cuda.to_device(np.full(a.elements, 1 if i else 0, np.int32), stream=stream) for i in range(a.arrays)]
    kernel[grid, threads, stream](*inputs)  # compile
    overload = next(iter(kernel.overloads.values()))
    ways = {
        "dispatch": lambda: kernel[grid, threads, stream](*inputs),
        "overload": lambda: overload.launch(inputs, (grid, 1, 1), (threads, 1, 1), stream, 0),
        "dispatch-held": lambda: kernel[grid, threads, stream](*inputs),
        "launch-held": lambda: launching.launch(kernel, grid, threads, stream, *inputs),
    }
    try:
        ways["prepared"] = _prepared(kernel, inputs, (grid, 1, 1), (threads, 1, 1), stream)
    except Exception as exc:  # a numba-cuda whose private steps differ: say so, time the others
        print(f"prepared: not available here ({type(exc).__name__}: {exc})", flush=True)
    for name in a.ways.split(","):
        way = ways.get(name)
        if way is None:
            continue
        inputs[0].copy_to_device(np.zeros(a.elements, np.int32), stream=stream)
        held = name.endswith("-held")
        try:
            alone = _time(way, a.launches, 0, stream, held)
            beside = _time(way, a.launches, a.busy, stream, held)
        except Exception as exc:  # a way numba-cuda does not allow here: say so, time the others
            print(f"{name}: failed ({type(exc).__name__}: {exc})", flush=True)
            continue
        got = inputs[0].copy_to_host(stream=stream)
        stream.synchronize()
        expected = 2 * a.launches * (a.arrays - 1)
        ok = bool((got == expected).all())
        print(f"{name}: {alone:.1f} us a launch alone, {beside:.1f} us beside {a.busy} busy threads "
              f"({a.arrays} arrays, {a.launches} launches each); output {'right' if ok else 'WRONG'}", flush=True)


if __name__ == "__main__":
    main()
