"""``hwdecomp bench``: dd.read_parquet with engine="pyarrow" against hwdecomp
(GPU decoding and decode='cpu') and the decode-free ceiling (memory-mapped
Arrow IPC), CPU seconds per GB, the GPU decode kernels alone,
decompression alone (1 MiB and 64 KiB pages) against the pinned copy
bandwidth, and a batch-size sweep; checks the targets and writes
results.json and report.md with plots.

By default it measures at scale: 3 GB of Arrow data per dataset in 32 files
per codec, on every cluster shape of --cluster (one LocalCluster each, the
variants interleaved within it, each pair warmed up before timing).
Figures under 1 GB per dataset are labelled small-read results and the
targets are not judged on them. To fit a lease of a few minutes, narrow
what is measured, not the size: e.g. --parts e2e --codecs snappy,zstd
--backends auto,cpu --schedulers distributed (benchmarks/README.md)."""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

from .helpformat import add_command

__all__ = ["add_parser", "run", "parse_size", "config_from_args"]

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_size(text: str) -> int:
    """Bytes of ``"3GB"``, ``"512MiB"``, ``"1e9"``.

    Raises
    ------
    argparse.ArgumentTypeError
        Not a size.
    """
    m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 3GB or 512MiB")
    try:
        return int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 3GB or 512MiB") from None


def _names(text: str) -> tuple:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _ints(text: str) -> tuple:
    try:
        return tuple(int(x) for x in _names(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


def _shapes(text: str) -> tuple:
    from ..bench.shapes import parse_shapes

    try:
        return parse_shapes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _default_shapes_text() -> str:
    from ..bench.shapes import default_shapes

    here = ",".join(str(s) for s in default_shapes())
    return f"4x(C/4),Cx1,1xC on C cores: here {here}"


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "bench", "benchmark dd.read_parquet, CPU time and decompression; write a report",
                    __doc__)
    p.add_argument("--out", default="bench-out", help="directory for results.json, report.md and plots")
    p.add_argument("--data-dir", default=None, help="where datasets are written (default: OUT/data)")
    p.add_argument("--keep-data", action="store_true", help="keep the generated datasets after the run (reused by a later run with the same settings)")
    p.add_argument("--size", type=parse_size, default="3GB", help="Arrow size of each generated dataset")
    p.add_argument("--datasets", type=_names, default="lineitem,entropy", help="generated tables (empty: none)")
    p.add_argument("--dataset", default=None, help="also measure this directory of Parquet files (default: none)")
    p.add_argument("--codecs", type=_names, default="snappy,gzip,lz4_raw,zstd", help="codecs written (uncompressed always)")
    p.add_argument("--files", type=int, default=32, help="files per codec (a partition each; about 100 MB each at 3GB)")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats of each figure")
    p.add_argument("--parts", type=_names, default="e2e,decompress,copy,sweep,checksums,gpudecode",
                   help="what to measure (gpudecode: the GPU decode kernels alone)")
    p.add_argument("--schedulers", type=_names, default="distributed,threads", help="end-to-end schedulers")
    p.add_argument("--cluster", type=_shapes, default=None,
                   help="LocalCluster shapes, comma-separated WORKERSxTHREADS, each measured in the same run "
                   f"(one LocalCluster each; the threaded scheduler once per total of threads) (default: "
                   f"{_default_shapes_text()})")
    p.add_argument("--backends", type=_names, default="auto,cpu,nvcomp,hardware", help="hwdecomp backends compared")
    p.add_argument("--decodes", type=_names, default="auto,cpu",
                   help="decode options crossed with the GPU-capable backends (auto: hwdecomp-auto; cpu: "
                   "hwdecomp-auto-decode-cpu, pyarrow decodes)")
    p.add_argument("--decompress-size", type=parse_size, default="1GiB", help="output bytes of the decompression-only pages")
    p.add_argument("--pages-per-call", type=_ints, default="16,64,256,1024,4096", help="sweep points")
    p.add_argument("--streams", type=_ints, default="1,2,4", help="streams swept (GPU backends)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--rerender", action="store_true", help="only rewrite report.md and plots from OUT/results.json")
    p.set_defaults(func=run)


def config_from_args(args):
    """The :class:`~dask_hwdecomp.bench.BenchConfig` of parsed ``args``."""
    from ..bench.data import CODECS
    from ..bench.runner import BenchConfig

    def listed(value):
        return _names(value) if isinstance(value, str) else tuple(value)

    size = parse_size(args.size) if isinstance(args.size, str) else args.size
    dsize = parse_size(args.decompress_size) if isinstance(args.decompress_size, str) else args.decompress_size
    kw = {}
    if args.cluster:
        kw["shapes"] = _shapes(args.cluster) if isinstance(args.cluster, str) else tuple(args.cluster)
    ints = lambda v: _ints(v) if isinstance(v, str) else tuple(v)  # noqa: E731
    codecs = ("uncompressed",) + tuple(c for c in listed(args.codecs) if c != "uncompressed")
    unknown = set(codecs) - set(CODECS)
    if unknown:
        raise ValueError(f"unknown codec(s) {sorted(unknown)}; choose from {', '.join(CODECS)}")
    if args.dataset is not None and not Path(args.dataset).is_dir():
        raise ValueError(f"--dataset {args.dataset!r} is not a directory of Parquet files")
    paged = {"decompress", "sweep", "checksums"} & set(listed(args.parts))
    if paged and not listed(args.datasets):
        raise ValueError(
            f"parts {', '.join(sorted(paged))} cut their pages from a generated table: "
            "name one with --datasets (e.g. lineitem)"
        )
    return BenchConfig(
        out_dir=args.out,
        data_dir=args.data_dir,
        size_bytes=size,
        datasets=listed(args.datasets),
        user_dataset=args.dataset,
        codecs=codecs,
        files=args.files,
        repeats=args.repeats,
        parts=listed(args.parts),
        schedulers=listed(args.schedulers),
        backends=listed(args.backends),
        decodes=listed(getattr(args, "decodes", "auto,cpu")),
        decompress_bytes=dsize,
        pages_per_call=ints(args.pages_per_call),
        streams=ints(args.streams),
        progress=not args.no_progress,
        keep_data=args.keep_data,
        command="hwdecomp " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv else "",
        **kw,
    )


def run(args) -> int:
    """Run the benchmark; 0 on success, 2 on a bad configuration."""
    from ..bench.runner import rerender, run_bench
    from ..bench.scale import SMALL_READ_NOTE

    if args.rerender:
        rerender(args.out)
        print(f"rewrote {args.out}/report.md")
        return 0
    try:
        cfg = config_from_args(args)
    except ValueError as exc:
        print(f"hwdecomp bench: {exc}", file=sys.stderr)
        return 2
    results = run_bench(cfg)
    print(f"wrote {cfg.out_dir / 'report.md'} and {cfg.out_dir / 'results.json'}")
    small = (results.get("small_read") or {}).get("datasets") or []
    if small:
        print(f"{SMALL_READ_NOTE} ({', '.join(small)}; the targets below are not judged on them)")
    for check in results.get("targets", []):
        status = "ref" if check.get("reference") else {True: "met", False: "MISSED", None: "n/a"}[check.get("met")]
        # Not measured: report.md's reason, which a bare "-" left out.
        shown = check.get("measured") or check.get("limit") or "-"
        if check.get("small_read") and check.get("measured") and check.get("met") is None and not check.get("reference"):
            shown += f"; {check['limit']}"
        print(f"  [{status:>6}] {check['what']}: {shown} (target {check['target']})")
    return 0
