"""Where a merged GPU decode's time goes in the GPU service's decoder: per stage, per kernel, Python.

Usage (on a GPU machine; about a minute at 1GB once the data exists)::

    python benchmarks/decode_service_profile.py --size 1GB [--data DIR] [--files N] [--merge 5]
        [--passes 5] [--datasets lineitem,entropy]

    python benchmarks/decode_service_profile.py --size 2MB --simulate   # no GPU: numba's CUDA simulator

Generates (or reuses, under ``--data``) the bench's lineitem-like and
high-entropy tables uncompressed (:func:`dask_hwdecomp.bench.data.generate`,
about 100 MB a file, as ``hwdecomp bench`` writes them at scale), loads each
file into pinned host memory (the service pins a client's shared memory)
and plans it as the read path plans a batch's images
(:func:`~dask_hwdecomp.gpudecode.plan.plan_file`; one image a batch). Each
file's decompressed pages are also put on the device, as the service keeps
them when it decompressed them (one block a file, its page bodies the
outputs), so the decoder copies page bodies on the device and uploads the
headers from the host, as in a GPU read.

Then a :class:`~dask_hwdecomp.gpudecode.hosted.HostedDecoder` (one runner, as
the service runs it, on a context that waits by sleeping, as the service's
:class:`~dask_hwdecomp.gpu.device.Device` makes it) decodes the files in
merged runs of ``--merge`` files, the way the runner takes queued plans,
``--passes`` times over all the files, in variants:

- ``kept``: page bodies from the device, the rest from the host (a GPU read);
- ``host``: every byte uploaded from the host (pages the service did not keep);
- ``pyarrow``: the CPU baseline, ``pyarrow.parquet.read_table`` of the same
  columns from the same memory, on all cores.

Printed per dataset and variant:

- *run*: the merged run as the service runs it (``decode_together`` on this
  thread, nothing added): wall ms and Python ms (``time.thread_time`` of the
  thread running it; waits for the GPU sleep and do not count), GB/s of
  Arrow output (the buffers' bytes without alignment gaps);
- *stages* (a second pass, each stage synchronised after it so that they do
  not overlap): upload, measure, place, write, the rest; wall, Python and
  GPU (CUDA events) ms, and GB/s of Arrow output over wall and GPU time;
- *kernels* (a third pass, a CUDA event pair around every launch): launches
  a run, GPU ms a run and GB/s of Arrow output per kernel, and the GPU time
  of the run outside kernels (copies, idle waiting for Python);
- *copy out*: every decode of a run copied into pinned host memory on the
  decoder's copy threads, four at once, as the service's write requests
  do: GB/s.

The first run of every group is checked against pyarrow (the oracle).
Under ``--simulate`` the datasets are generated and planned at ``--size``,
but only the first rows of each file of one dataset (``entropy`` where
asked for) are decoded, in the ``kept`` variant: the simulator runs every
GPU thread in Python, and its timings time that, not a GPU.

This script reaches into the decoder's private steps (``_upload``,
``_runner``, ``hosted.place_members``) to time them; a rename there breaks
it loudly.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

FILE_BYTES = 100 * 10**6  # about the bench's files at scale
TINY_ROWS = 8  # rows a file the simulator decodes


def _args(argv):
    from dask_hwdecomp.cli.bench import parse_size

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=parse_size, default=parse_size("1GB"), help="Arrow bytes per dataset")
    p.add_argument("--data", type=Path, default=Path("/tmp/hwdecomp-profile-data"), help="dataset root")
    p.add_argument("--files", type=int, default=None, help="files per dataset (default: about 100 MB each)")
    p.add_argument("--merge", type=int, default=5, help="files a merged run decodes together")
    p.add_argument("--passes", type=int, default=5, help="timed passes over every file")
    p.add_argument("--datasets", default="lineitem,entropy")
    p.add_argument("--simulate", action="store_true", help="numba's CUDA simulator (no GPU)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _args(argv)
    if args.simulate:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before numba.cuda is imported
    from dask_hwdecomp.bench.system import format_system, system_info

    print(format_system(system_info()), flush=True)
    files = args.files or max(2, round(args.size / FILE_BYTES))
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    began = time.perf_counter()
    found = _generate(args.data, datasets, args.size, files)
    print(f"data: {time.perf_counter() - began:.1f} s ({files} files a dataset under {args.data})", flush=True)

    cuda, device = _device(args.simulate)
    from dask_hwdecomp.bench.tables import KINDS
    from dask_hwdecomp.gpudecode.hosted import HostedDecoder

    decoder = HostedDecoder(runners=1)
    passes = 1 if args.simulate else args.passes
    # the simulator runs every GPU thread in Python: one dataset decoded, the quickest
    simulated = "entropy" if "entropy" in datasets else datasets[0]
    try:
        if not args.simulate:  # nothing to compile in the simulator, and its warm-up decodes take minutes
            t = time.perf_counter()
            decoder.warm_up()
            print(f"decoder warm-up (kernels compiled or loaded from numba's cache): {time.perf_counter() - t:.1f} s")
        for name in datasets:
            paths = found[name]
            print(f"\n== {name}", flush=True)
            t = time.perf_counter()
            tiny = KINDS[name][1] if args.simulate else None
            loaded = [_load(p, cuda, decoder, tiny) for p in paths]
            print(f"  {len(loaded)} files, {sum(f.nbytes for f in loaded) / 1e6:.1f} MB loaded and planned in "
                  f"{time.perf_counter() - t:.2f} s (plan_file {sum(f.plan_s for f in loaded):.2f} s)", flush=True)
            groups = [loaded[i : i + args.merge] for i in range(0, len(loaded), args.merge)]
            _pyarrow(groups, passes)
            if args.simulate and name != simulated:
                print("  (not decoded under the simulator)")
                continue
            for variant in ("kept",) if args.simulate else ("kept", "host"):
                _profile(decoder, cuda, groups, variant, passes)
    finally:
        decoder.close()
        if device is not None:
            device.close()
    print(f"\ntotal {time.perf_counter() - began:.1f} s")
    return 0


# -- data ---------------------------------------------------------------------


def _generate(root: Path, datasets: list[str], size: int, files: int) -> dict[str, list[Path]]:
    from dask_hwdecomp.bench.data import generate, writer_pool

    out = {}
    with writer_pool(min(os.cpu_count() or 1, files)) as pool:
        for name in datasets:
            ds = generate(root, name, size, files, codecs=("uncompressed",), pool=pool)
            out[name] = sorted(Path(ds.dirs["uncompressed"]).glob("*.parquet"))
    return out


class _File:
    """One uncompressed file in pinned memory, its plan, its pages on the device, and pyarrow's columns."""

    def __init__(self, path, host, plan, plan_s, kept):
        self.path, self.host, self.plan, self.plan_s, self.kept = path, host, plan, plan_s, kept
        self.nbytes = len(host)

    def request(self, variant: str):
        from dask_hwdecomp.gpudecode.hosted import DecodeRequest
        from dask_hwdecomp.gpudecode.merge import PlanRecords

        p = self.plan
        records = PlanRecords(p.ranges, p.chunks, p.pages, p.data_bytes)
        return DecodeRequest(memoryview(self.host), records, (self.kept,) if variant == "kept" else ())

    def expected(self):
        import pyarrow as pa
        import pyarrow.parquet as pq

        names = list(self.plan.gpu_columns[0])
        return pq.read_table(pa.BufferReader(pa.py_buffer(self.host)), columns=names)


def _load(path: Path, cuda, decoder, tiny: bool | None) -> _File:
    """``path`` loaded and planned; ``tiny`` (the simulator): only its first rows, written with that ``use_dictionary``."""
    from dask_hwdecomp.gpudecode.plan import plan_file

    data = path.read_bytes()
    if tiny is not None:  # the plan of the whole file is timed, the simulator decodes a few rows
        import io

        import pyarrow.parquet as pq

        t = time.perf_counter()
        plan_file(data)
        print(f"  {path.name}: {len(data) / 1e6:.1f} MB planned in {time.perf_counter() - t:.3f} s; "
              f"the simulator decodes its first {TINY_ROWS} rows", flush=True)
        sink = io.BytesIO()
        pq.write_table(pq.read_table(io.BytesIO(data)).slice(0, TINY_ROWS), sink, compression="none",
                       use_dictionary=tiny, data_page_size=1024)
        data = sink.getvalue()
    host = cuda.pinned_array(len(data), np.uint8)
    host[:] = np.frombuffer(data, np.uint8)
    t = time.perf_counter()
    plan = plan_file(host)
    plan_s = time.perf_counter() - t
    return _File(path, host, plan, plan_s, _kept_pages(plan, host, decoder))


def _kept_pages(plan, host, decoder):
    """The file on the device as the service keeps a decompression's outputs: one span, the page bodies its outputs."""
    from dask_hwdecomp.gpudecode.uploads import KeptPages

    block = decoder.device_block(len(host))
    block.copy_to_device(host)
    ranges = plan.ranges[np.argsort(plan.ranges[:, 2])]
    pages = plan.pages
    at = np.searchsorted(ranges[:, 2], pages["offset"], side="right") - 1
    src = ranges[at, 0] + pages["offset"] - ranges[at, 2]
    outputs = np.stack([src, pages["size"]], axis=1).astype(np.int64)
    outputs = outputs[np.argsort(outputs[:, 0])]
    return KeptPages(block, np.array([[0, len(host), 0]], np.int64), outputs)


def _device(simulate: bool):
    """numba.cuda, and the device whose context the service would make (None under the simulator)."""
    from dask_hwdecomp.gpu.cuda_jit import cuda

    if simulate:
        return cuda, None
    from dask_hwdecomp.gpu.device import Device

    device = Device(0)  # the service's context: it waits by sleeping, so waits are not thread CPU time
    device.activate()
    return cuda, device


# -- the variants ---------------------------------------------------------------


def _pyarrow(groups, passes: int) -> None:
    """The CPU baseline: pyarrow decoding the same columns of the same files, from memory, all cores."""
    walls = []
    for _ in range(max(1, passes // 2)):
        t = time.perf_counter()
        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            total = sum(tab.nbytes for tab in pool.map(lambda f: f.expected(), [f for g in groups for f in g]))
        walls.append(time.perf_counter() - t)
    print(f"  pyarrow (CPU baseline, {os.cpu_count()} threads): {total / 1e9 / statistics.median(walls):.2f} GB/s "
          f"of Arrow output ({statistics.median(walls) * 1e3:.0f} ms for every file)")


def _profile(decoder, cuda, groups, variant: str, passes: int) -> None:
    stream = cuda.stream()
    from dask_hwdecomp.bench.gpudecode import arrow_output_bytes

    requests = [[f.request(variant) for f in g] for g in groups]
    arrow = [0] * len(groups)  # Arrow output bytes of a group's run, without alignment gaps
    runs = []  # (wall s, python s, group)
    copies = []  # bytes a second
    for k in range(passes):
        for i, (files, reqs) in enumerate(zip(groups, requests)):
            t, c = time.perf_counter(), time.thread_time()
            pendings = decoder.decode_together(reqs, stream)
            runs.append((time.perf_counter() - t, time.thread_time() - c, i))
            try:
                if k == 0:  # correctness first: every group's first run against pyarrow
                    _check(files, pendings)
                    arrow[i] = sum(arrow_output_bytes(p.chunks) for p in pendings)
                if k == min(1, passes - 1) and i < 2:
                    copies.append(_copy_out(cuda, pendings))
            finally:
                for p in pendings:
                    p.close()
    wall = statistics.median(r[0] for r in runs)
    py = statistics.median(r[1] for r in runs)
    per_run = statistics.median(arrow[r[2]] for r in runs)
    print(f"\n  [{variant}] run of {len(groups[0])} files (median of {len(runs)}): wall {wall * 1e3:.1f} ms, "
          f"Python {py * 1e3:.1f} ms, {per_run / 1e9 / wall:.1f} GB/s of Arrow output "
          f"({per_run / 1e6:.0f} MB a run)")
    print(f"    decodes equal pyarrow's; copy out to pinned host memory (4 at once, as the service's write "
          f"requests): {statistics.median(copies) / 1e9:.1f} GB/s")
    _stages(decoder, stream, requests, arrow, passes)
    _kernels(decoder, stream, requests, arrow, passes)


def _check(files, pendings) -> None:
    from dask_hwdecomp.gpudecode.assemble import assemble

    for f, p in zip(files, pendings):
        if p.failed:
            raise AssertionError(f"{f.path}: a page failed on the GPU: {np.unique(p.pages['error'])}")
        out = np.empty(p.nbytes, np.uint8)
        p.copy_to(memoryview(out))
        cols = assemble(out, out, p.chunks, f.plan)[0]
        want = f.expected()
        for name in want.column_names:
            if not cols[name].equals(want.column(name)):
                raise AssertionError(f"{f.path}: column {name} differs from pyarrow's")


class _Timed:
    """Wraps the decoder's steps: per step, wall, thread CPU and GPU (events) seconds, synchronised after."""

    def __init__(self, decoder, stream, cuda):
        import dask_hwdecomp.gpudecode.hosted as hosted

        self.decoder, self.stream, self.cuda, self.hosted = decoder, stream, cuda, hosted
        self.rows = defaultdict(list)
        self._saved = (decoder._upload, decoder._runner, hosted.place_members)
        runner = decoder._runner

        class Runner:  # the runner module's two steps, timed
            measure = staticmethod(self._wrap("measure", runner.measure))
            write = staticmethod(self._wrap("write", runner.write))

        decoder._upload = self._wrap("upload", decoder._upload)
        decoder._runner = Runner
        hosted.place_members = self._wrap("place", hosted.place_members, gpu=False)

    def _wrap(self, name, fn, gpu=True):
        def call(*a, **k):
            e0, e1 = self.cuda.event(), self.cuda.event()
            t, c = time.perf_counter(), time.thread_time()
            if gpu:
                e0.record(self.stream)
            out = fn(*a, **k)
            if gpu:
                e1.record(self.stream)
                self.stream.synchronize()
            self.rows[name].append((time.perf_counter() - t, time.thread_time() - c, (e0, e1) if gpu else None))
            return out

        return call

    def restore(self):
        del self.decoder._upload  # the method again
        _, self.decoder._runner, self.hosted.place_members = self._saved


def _gpu_s(pair) -> float | None:
    if pair is None:
        return None
    ms = pair[0].elapsed_time(pair[1])
    return None if ms < 0 else ms / 1e3  # the simulator answers -1


def _stages(decoder, stream, requests, arrow, passes: int) -> None:
    from dask_hwdecomp.gpu.cuda_jit import cuda

    timed = _Timed(decoder, stream, cuda)
    runs = []
    try:
        for _ in range(passes):
            for reqs in requests:
                t, c = time.perf_counter(), time.thread_time()
                for p in decoder.decode_together(reqs, stream):
                    p.close()
                runs.append((time.perf_counter() - t, time.thread_time() - c))
    finally:
        timed.restore()
    n = len(runs)
    per_run = sum(arrow) * passes / n
    print(f"    {'stage (synchronised)':24} {'wall ms':>8} {'Python ms':>10} {'GPU ms':>8} {'GB/s wall':>10} "
          f"{'GB/s GPU':>9}")
    rest_wall, rest_py = sum(r[0] for r in runs) / n, sum(r[1] for r in runs) / n
    for name in ("upload", "measure", "place", "write"):
        rows = timed.rows[name]
        wall = sum(r[0] for r in rows) / n
        py = sum(r[1] for r in rows) / n
        gpus = [_gpu_s(r[2]) for r in rows]
        gpu = sum(gpus) / n if rows and all(g is not None for g in gpus) else None
        rest_wall -= wall
        rest_py -= py
        print(f"    {name:24} {wall * 1e3:8.2f} {py * 1e3:10.2f} {_ms(gpu):>8} {_rate(per_run, wall):>10} "
              f"{_rate(per_run, gpu):>9}")
    print(f"    {'rest (merge, records)':24} {rest_wall * 1e3:8.2f} {rest_py * 1e3:10.2f}")


def _kernels(decoder, stream, requests, arrow, passes: int) -> None:
    from numba import config

    if config.ENABLE_CUDASIM:  # type: ignore[attr-defined]
        print("    kernels: not timed under the simulator")
        return
    from numba.cuda.dispatcher import CUDADispatcher

    from dask_hwdecomp.gpu.cuda_jit import cuda

    launches = []
    real = CUDADispatcher.__getitem__

    def getitem(self, cfg):
        launch = real(self, cfg)
        st = cfg[2] if len(cfg) > 2 else 0

        def run(*a):
            e0, e1 = cuda.event(), cuda.event()
            e0.record(st)
            out = launch(*a)
            e1.record(st)
            launches.append((self.py_func.__name__, e0, e1))
            return out

        return run

    runs = 0
    whole = []
    CUDADispatcher.__getitem__ = getitem
    try:
        for _ in range(passes):
            for reqs in requests:
                e0, e1 = cuda.event(), cuda.event()
                e0.record(stream)
                for p in decoder.decode_together(reqs, stream):
                    p.close()
                e1.record(stream)
                e1.synchronize()
                whole.append(e0.elapsed_time(e1) / 1e3)
                runs += 1
    finally:
        CUDADispatcher.__getitem__ = real
    by = defaultdict(lambda: [0, 0.0])
    for name, e0, e1 in launches:
        by[name][0] += 1
        by[name][1] += e0.elapsed_time(e1) / 1e3
    per_run = sum(arrow) * passes / runs
    in_kernels = sum(v[1] for v in by.values()) / runs
    gpu_run = sum(whole) / runs
    print(f"    {'kernel':24} {'a run':>8} {'GPU ms':>10} {'GB/s':>8}   (GPU run {gpu_run * 1e3:.2f} ms; in kernels "
          f"{in_kernels * 1e3:.2f} ms = {_rate(per_run, in_kernels)} GB/s; outside: copies and idle)")
    for name, (count, secs) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"    {name:24} {count / runs:8.1f} {secs / runs * 1e3:10.3f} {_rate(per_run, secs / runs):>8}")


def _copy_out(cuda, pendings) -> float:
    """Bytes a second of copying every decode of a run into pinned host memory, four at once."""
    dsts = [cuda.pinned_array(max(1, p.nbytes), np.uint8) for p in pendings]
    t = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda pd: pd[0].copy_to(memoryview(pd[1])[: pd[0].nbytes]), zip(pendings, dsts)))
    return sum(p.nbytes for p in pendings) / (time.perf_counter() - t)


def _ms(s) -> str:
    return "n/a" if s is None else f"{s * 1e3:.2f}"


def _rate(nbytes, s) -> str:
    return "n/a" if not s else f"{nbytes / 1e9 / s:.1f}"


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
