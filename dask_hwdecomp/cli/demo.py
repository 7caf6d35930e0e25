"""``hwdecomp demo``: read a dataset through ``dd.read_parquet(engine=hwdecomp)``
on a distributed ``LocalCluster`` and say what happened.

With no path it first writes a sample dataset (a TPC-H lineitem-like table,
snappy, several files) and removes it afterwards. It checks every partition
against ``engine="pyarrow"`` on the workers, and prints rows, bytes, the
pages each backend decompressed (gathered from every worker) and throughput.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path

from ..options import BACKENDS, DECODES, Options
from ..report import PYARROW_NO_GPU, ReadReport
from .demo_checks import check_path, check_sample_options, resolve_options
from .errors import InputError
from .helpformat import add_command

__all__ = ["add_parser", "run", "make_sample", "same_partition", "DemoResult"]

# The sample dataset written when no PATH is given.
SAMPLE_ROWS = 2_000_000
SAMPLE_FILES = 8
SAMPLE_CODEC = "snappy"


def _positive(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "demo", "read a (generated) dataset with engine=hwdecomp on a LocalCluster", __doc__)
    p.add_argument("path", nargs="?", help="Parquet file, directory or glob (default: make a sample)")
    # The sample's options default to None so that one given with PATH is seen (and refused).
    p.add_argument("--rows", type=_positive, default=None,
                   help=f"rows of the sample dataset (default: {SAMPLE_ROWS}; not with PATH)")
    p.add_argument("--files", type=_positive, default=None,
                   help=f"files of the sample dataset (default: {SAMPLE_FILES}; not with PATH)")
    p.add_argument(
        "--codec", default=None, choices=("snappy", "gzip", "lz4", "zstd", "brotli", "none"),
        help=f"codec of the sample dataset (default: {SAMPLE_CODEC}; not with PATH)",
    )
    p.add_argument("--workers", type=_positive, default=2, help="worker processes of the LocalCluster")
    p.add_argument("--threads", type=_positive, default=1, help="threads per worker")
    # None: the option in force, as a read of the user's own would take it.
    p.add_argument("--backend", default=None, choices=BACKENDS,
                   help=f"where pages are decompressed (default: $HWDECOMP_BACKEND, else {_library_default('backend')})")
    p.add_argument("--decode", default=None, choices=DECODES,
                   help="where pages are decoded into Arrow columns "
                   f"(default: $HWDECOMP_DECODE, else {_library_default('decode')})")
    p.add_argument("--no-check", action="store_true", help="skip the comparison with engine='pyarrow'")
    p.set_defaults(func=run)


def _library_default(name: str):
    """The default of option ``name`` (the demo's follows the library's)."""
    return next(f.default for f in fields(Options) if f.name == name)


def make_sample(root: Path, rows: int, files: int, codec: str, progress: bool = True) -> Path:
    """Write ``files`` Parquet files of a lineitem-like table under ``root``."""
    import pyarrow.parquet as pq
    from tqdm import tqdm

    from ..bench.tables import lineitem

    out = Path(root) / f"lineitem-{codec}"
    out.mkdir(parents=True, exist_ok=True)
    per = max(1, rows // files)
    for i in tqdm(range(files), desc="writing sample", unit="file", disable=not progress):
        table = lineitem(per, seed=i, first_row=i * per)
        pq.write_table(table, out / f"part-{i:04d}.parquet", compression=codec, row_group_size=per // 4 or 1)
    return out


@contextmanager
def _step(text: str):
    """Say what is starting, then how long it took: no silent step."""
    print(f"{text} ...", end="", flush=True, file=sys.stderr)
    t0 = time.perf_counter()
    yield
    print(f" {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)


def _progress(futures, desc: str, dataset: str) -> None:
    """A bar that advances as each future finishes (errors raise here)."""
    from distributed import as_completed
    from tqdm import tqdm

    with tqdm(total=len(futures), desc=desc, unit="partition", file=sys.stderr) as bar:
        for future in as_completed(futures):
            if future.status == "error":
                _raise_task_error(future, dataset)
            bar.update()


def _raise_task_error(future, dataset: str) -> None:
    """Raise a failed read task's exception, naming ``dataset`` where the exception does not.

    The project's errors name file, row group, column and page; pyarrow's own
    reader (``backend="auto"`` without a GPU) says only what broke.

    Raises
    ------
    InputError
        A pyarrow or operating-system error that does not name ``dataset``.
    Exception
        Any other: the task's own exception.
    """
    import pyarrow as pa

    from ..errors import HwdecompError

    exc = future.exception()
    if isinstance(exc, (pa.ArrowInvalid, OSError)) and not isinstance(exc, HwdecompError) and dataset not in str(exc):
        raise InputError(dataset, exc) from exc
    future.result()  # raises the task's exception, with its traceback


def same_partition(ours, ref) -> bool:
    """Whether two pandas partitions are equal: dtypes, index and values (NaN == NaN)."""
    return bool(
        list(ours.columns) == list(ref.columns)
        and ours.dtypes.equals(ref.dtypes)
        and ours.index.equals(ref.index)
        and ours.equals(ref)
    )


def run(args) -> int:
    """Run the demo; returns the exit status.

    Raises
    ------
    UsageError
        A path naming nothing, a sample's option with a path, or options
        that cannot run here.
    """
    check_sample_options(args.path, {"--rows": args.rows, "--files": args.files, "--codec": args.codec})
    options = resolve_options(args.backend, args.decode)
    if args.path is not None:
        check_path(args.path)
    codec = args.codec or SAMPLE_CODEC
    # One scratch directory for the sample and the workers' spill space,
    # removed at the end: the demo leaves nothing behind.
    with tempfile.TemporaryDirectory(prefix="hwdecomp-demo-") as tmp:
        path = args.path or str(make_sample(Path(tmp), args.rows or SAMPLE_ROWS, args.files or SAMPLE_FILES, codec))
        result = _demo(path, options, args, Path(tmp) / "workers")
    _print(result, path if args.path else f"sample lineitem ({codec}), removed after the run", args)
    return 0 if result.same in (None, True) else 1


@dataclass(frozen=True)
class DemoResult:
    """What the demo read and measured."""

    rows: int
    nbytes: int
    report: ReadReport  # summed over every worker
    routes: dict
    seconds: float
    same: bool | None  # None: not checked


def _close(client, cluster) -> None:
    # A worker slow to stop (a loaded machine) is killed by its nanny after a
    # few seconds, which distributed logs as a warning: the demo's own step
    # says the cluster is stopping, and how long it took.
    nanny = logging.getLogger("distributed.nanny")
    level = nanny.level
    nanny.setLevel(logging.ERROR)
    try:
        with _step("stopping the cluster"):
            if client is not None:
                _quiet_workers(client)
                client.close()
            cluster.close()
    finally:
        nanny.setLevel(level)


def _quiet_workers(client) -> None:
    """Keep the workers' failed heartbeats as the scheduler goes out of the output (best effort)."""
    from .workerlog import quiet_heartbeat_failures

    try:
        client.run(quiet_heartbeat_failures)
    except Exception:  # a worker already gone has nothing left to log
        pass


def _demo(path: str, options: dict, args, scratch: Path) -> DemoResult:
    with _step(f"starting LocalCluster: {args.workers} workers x {args.threads} threads each"):
        # dask.dataframe and distributed take a second to import: inside the step that says so.
        import dask
        import dask.dataframe as dd
        from distributed import Client, LocalCluster, futures_of

        from .. import hwdecomp
        from ..engine.metrics import cluster_report
        from ..engine.plugin import HwdecompPlugin
        from .workerlog import QuietTaskFailures

        # The scheduler's scratch space too (distributed's default is the system's temporary directory).
        dask.config.set({"temporary-directory": str(scratch)})
        cluster = LocalCluster(
            n_workers=args.workers,
            threads_per_worker=args.threads,
            processes=True,
            dashboard_address=None,
            # No dashboard, but the scheduler's HTTP server still binds 8787 and
            # warns when another cluster holds it: any free port of this host.
            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
            local_directory=str(scratch),
        )
        client = None
        try:
            client = Client(cluster)
            # A failed task is reported once, by the demo's own line.
            client.register_plugin(QuietTaskFailures())
            client.register_plugin(HwdecompPlugin(**options))
        except BaseException:
            _close(client, cluster)
            raise
    try:
        routes = client.run(lambda dask_worker: dask_worker.extensions["hwdecomp"].backends)
        df = dd.read_parquet(path, engine=hwdecomp, hwdecomp_options=options)
        t0 = time.perf_counter()
        df = df.persist()
        _progress(futures_of(df), "reading", path)
        seconds = time.perf_counter() - t0
        report = cluster_report(client)
        rows, nbytes = dask.compute(df.shape[0], df.memory_usage(deep=True).sum())
        same = None
        if not args.no_check:
            ref = dd.read_parquet(path, engine="pyarrow")
            verdicts = dd.map_partitions(
                same_partition, df, ref, align_dataframes=False, meta=(None, bool), enforce_metadata=False
            ).to_delayed()
            futures = client.compute(verdicts)
            _progress(futures, "checking against engine='pyarrow'", path)
            same = all(f.result() for f in futures)
    finally:
        _close(client, cluster)
    return DemoResult(int(rows), int(nbytes), report, routes, seconds, same)


def _print(result: DemoResult, dataset: str, args) -> None:
    report = result.report
    compressed = sum(s.compressed_bytes for s in report.by_backend.values())
    uncompressed = sum(s.uncompressed_bytes for s in report.by_backend.values())
    print()
    print(f"dataset            {dataset}")
    print(f"cluster            LocalCluster {args.workers} workers x {args.threads} threads each")
    print(f"rows               {result.rows:,}")
    print(f"pandas bytes       {result.nbytes / 1e6:,.1f} MB")
    print(f"files              {report.files}")
    print(f"pages              {compressed / 1e6:,.1f} MB compressed -> {uncompressed / 1e6:,.1f} MB")
    for codec, backends in report.backends.items():
        counts = ", ".join(
            f"{b} (pages not counted)" if b == PYARROW_NO_GPU else f"{b} ({report.by_backend[(b, codec)].pages} pages)"
            for b in backends
        )
        print(f"backend            {codec}: {counts}")
    if not report.by_backend:
        print("backend            (no compressed pages)")
    for file, why in report.fallbacks:
        print(f"read by pyarrow    {file}: {why}")
    decoded = report.decoded_on()
    if decoded:
        print("decoded on         " + "; ".join(
            f"{where}: {t['columns']} columns, {t['chunks']} chunks, {t['arrow_bytes'] / 1e6:,.1f} MB Arrow"
            for where, t in decoded.items()
        ))
    for line in report.decode_lines():
        print(f"  {line}")
    print("stages             " + ", ".join(f"{k} {v:.2f}s" for k, v in report.stages.items() if v))
    first = next(iter(result.routes.values()))
    print("routing            " + ", ".join(f"{k}->{v[0]}" for k, v in first.items()))
    print(f"time               {result.seconds:.2f} s")
    print(f"throughput         {result.nbytes / result.seconds / 1e9:.2f} GB/s of pandas data")
    if result.same is not None:
        print(f"equals pyarrow     {'yes' if result.same else 'NO'}")
