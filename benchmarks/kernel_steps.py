"""Each GPU decode kernel's own time on merged batches of the bench's tables (one GPU, no cluster).

The decoder's runner merges the plans of the reads that reach it together
and measures, places and writes them as one batch. This script does the
same with ``--merge`` uncompressed files at a time (a run at scale merges 3
to 5), their bytes gathered into the run's buffer from a device copy in
pieces of ``--piece-bytes`` (as the runner copies the pages the service
kept on the device), and times every kernel launch with CUDA events on the stream, so the
output says which kernel a run's GPU time goes to, and how much of a run is
the host's (its wall time less the kernels').

    python benchmarks/kernel_steps.py OUT --size 3GB --files 32 --merge 4

Every number is one GPU; the end-to-end figures are the bench's and
``profile_timeline.py``'s.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import time
from pathlib import Path

import numpy as np


class _Timed:
    """A numba CUDA kernel whose launches record CUDA events around them, on the launch's stream."""

    def __init__(self, name, kernel, cuda, log):
        self._name, self._kernel, self._cuda, self._log = name, kernel, cuda, log

    def __getitem__(self, config):
        launch = self._kernel[config]
        stream = config[2] if len(config) > 2 else 0

        def run(*args):
            before = self._cuda.event()
            after = self._cuda.event()
            before.record(stream)
            launch(*args)
            after.record(stream)
            self._log.append((self._name, before, after))

        return run


_MODULES = ("runner", "gather", "kernels_bytes_measure", "kernels_bytes_write", "kernels_bytes_pages",
            "kernels_bytes_flba", "kernels_delta")


def _instrument(cuda, log) -> None:
    """Wrap every kernel the decode modules launch (module globals ending in ``_kernel``)."""
    for short in _MODULES:
        mod = importlib.import_module(f"dask_hwdecomp.gpudecode.{short}")
        for attr in dir(mod):
            value = getattr(mod, attr)
            if attr.endswith("_kernel") and hasattr(value, "overloads"):
                setattr(mod, attr, _Timed(attr.lstrip("_"), value, cuda, log))


def _pieces(address: int, nbytes: int, piece: int) -> np.ndarray:
    """``nbytes`` from ``address`` as gather rows (source address, offset, bytes) of ``piece`` bytes each."""
    at = np.arange(0, nbytes, piece, dtype=np.int64)
    return np.stack([address + at, at, np.minimum(piece, nbytes - at)], axis=1)


def main(argv=None) -> int:
    from dask_hwdecomp.bench.scale import add_scale_arguments

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_scale_arguments(p)
    p.add_argument("--datasets", default="lineitem,entropy")
    p.add_argument("--codecs", default="snappy", help="written beside the uncompressed copy (the profile's data, reused)")
    p.add_argument("--merge", default="1,4,16", help="files per merged batch, comma-separated")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--piece-bytes", type=int, default=70 << 10,
                   help="the kept pieces the gather copies (a page of the bench's tables is about 70 KiB)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    from dask.utils import parse_bytes

    from dask_hwdecomp.bench.data import generate
    from dask_hwdecomp.bench.gpudecode import arrow_output_bytes
    from dask_hwdecomp.gpu.cuda_jit import cuda
    from dask_hwdecomp.gpudecode.gather import copy_pieces
    from dask_hwdecomp.gpudecode.merge import PlanRecords, merge_plans, place_members
    from dask_hwdecomp.gpudecode.plan import plan_file
    from dask_hwdecomp.gpudecode.runner import measure, write
    from dask_hwdecomp.gpudecode.uploads import device_address

    log: list = []
    _instrument(cuda, log)
    root = args.data or args.out / "data"
    results = []
    for kind in [k for k in args.datasets.split(",") if k]:
        ds = generate(root, kind, parse_bytes(args.size), args.files, codecs=[c for c in args.codecs.split(",") if c])
        paths = sorted(Path(ds.dirs["uncompressed"]).glob("*.parquet"))
        planned = []
        for path in paths:
            buf = np.fromfile(path, np.uint8)
            plan = plan_file(buf, path=str(path))
            planned.append((plan, plan.gather(buf)))
        for merge in [int(m) for m in args.merge.split(",") if m]:
            groups = [planned[i : i + merge] for i in range(0, len(planned) - merge + 1, merge)]
            per_kernel: dict[str, float] = collections.defaultdict(float)
            launches: dict[str, int] = collections.defaultdict(int)
            wall = kernels = 0.0
            out_bytes = in_bytes = 0
            runs = 0
            for repeat in range(args.repeats + 1):  # the first: compiles and allocates, not counted
                for group in groups:
                    merged = merge_plans([PlanRecords(np.zeros((0, 3), np.int64), pl.chunks, pl.pages,
                                                      len(g)) for pl, g in group])
                    host = np.zeros(max(1, merged.data_bytes), np.uint8)
                    for (_, g), base in zip(group, merged.data_base.tolist()):
                        host[base : base + len(g)] = g
                    kept = cuda.to_device(host)  # as the pages the service keeps on the device
                    pieces = _pieces(device_address(kept), len(host), args.piece_bytes)
                    cuda.synchronize()
                    log.clear()
                    t0 = time.perf_counter()
                    data = cuda.device_array(len(host), np.uint8)
                    copy_pieces(data, pieces, [], 0)  # the runner's upload of kept pages: one gather launch
                    m = measure(data, merged.chunks, merged.pages, stream=0)
                    with m.state as state:
                        placed = m.chunks.copy()
                        out = cuda.device_array(max(1, int(place_members(merged, placed)[-1])), np.uint8)
                        errors = write(state, placed, out, stream=0)
                    cuda.synchronize()
                    t1 = time.perf_counter()
                    if np.count_nonzero(errors) or np.count_nonzero(m.pages["error"]):
                        raise RuntimeError(f"{kind}: page errors in a merged batch of {merge}")
                    if repeat == 0:
                        continue
                    runs += 1
                    wall += t1 - t0
                    out_bytes += arrow_output_bytes(placed)
                    in_bytes += merged.data_bytes
                    for name, before, after in log:
                        ms = before.elapsed_time(after)
                        per_kernel[name] += ms / 1e3
                        kernels += ms / 1e3
                        launches[name] += 1
                    del data, out, kept
            row = {"dataset": kind, "merge": merge, "runs": runs, "input_gb": in_bytes / 1e9,
                   "output_gb": out_bytes / 1e9, "wall_s": wall, "kernels_s": kernels,
                   "output_gbps_wall": out_bytes / 1e9 / wall, "output_gbps_kernels": out_bytes / 1e9 / kernels,
                   "per_run_ms": {"wall": 1e3 * wall / runs, "kernels": 1e3 * kernels / runs},
                   "kernels": {k: {"s": v, "launches": launches[k], "share": v / kernels,
                                   "output_gbps": out_bytes / 1e9 / v}
                               for k, v in sorted(per_kernel.items(), key=lambda kv: -kv[1])}}
            results.append(row)
            print(f"{kind} merge {merge}: {runs} runs, {row['output_gb']:.2f} GB out; "
                  f"{row['per_run_ms']['wall']:.2f} ms a run wall, {row['per_run_ms']['kernels']:.2f} ms kernels; "
                  f"{row['output_gbps_wall']:.1f} GB/s wall, {row['output_gbps_kernels']:.1f} GB/s kernels", flush=True)
            for k, v in row["kernels"].items():
                print(f"    {k:28s} {1e3 * v['s'] / runs:8.3f} ms a run  {100 * v['share']:5.1f} %  "
                      f"{v['launches'] / runs:4.1f} launches  {v['output_gbps']:7.1f} GB/s", flush=True)
    (args.out / "kernel_steps.json").write_text(json.dumps({"config": vars(args) | {"out": str(args.out),
                                                                                   "data": str(root)},
                                                            "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
