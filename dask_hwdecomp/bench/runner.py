"""One benchmark run: data, measurements, ``results.json``, ``report.md``.

The parts, each selectable:

``e2e``
    ``dd.read_parquet`` with every engine variant, on each scheduler: GB/s,
    worker CPU seconds per GB, stage times. The distributed scheduler runs
    once per cluster shape (one LocalCluster each, the variants interleaved
    within it); the threaded scheduler once per total of threads.
``decompress``
    Decompression alone per backend, host to host, at the default options,
    on pages of 1 MiB and of 64 KiB.
``copy``
    Pinned and pageable copy bandwidth (decompression's physical limit).
``sweep``
    Pages per batched call, and streams for GPU backends.
``checksums``
    What the checksums cost each GPU backend, decompression alone: none,
    the default ones (a GZIP page's CRC-32), and ``verify_checksums``'s
    page CRC-32 on top (all computed on the device in the batch).
``gpudecode``
    The GPU decode kernels alone on each dataset's uncompressed files, the
    files already on the device (:mod:`.gpudecode`): GB/s of Arrow output
    and of input, file by file and all files merged into one batch.
    Skipped, with the reason, without a CUDA device.

Results (``results.json``, ``report.md``) are written after every part,
so a run cut short keeps what it measured; the plots are drawn at the end
(``hwdecomp bench --rerender`` draws them for a run cut short). The generated datasets are removed at the end unless
``keep_data`` is set.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from .data import CODECS, from_user, generate, writer_pool
from .scale import SMALL_READ_BYTES, SMALL_READ_NOTE, is_small
from .shapes import default_shapes, parse_shapes, threaded_shapes
from .system import format_system, system_info

__all__ = ["BenchConfig", "run_bench", "rerender", "remove_generated", "PARTS", "SCHEDULERS"]

PARTS = ("e2e", "decompress", "copy", "sweep", "checksums", "gpudecode")
SCHEDULERS = ("distributed", "threads")


@dataclass
class BenchConfig:
    """What one run measures, and where it writes.

    Parameters
    ----------
    out_dir : path
        ``results.json``, ``report.md`` and the PNGs go here.
    data_dir : path, optional
        Where datasets are written (default ``out_dir/data``); reused when
        made with the same settings and kept (``keep_data``).
    size_bytes : int
        Arrow bytes of each generated dataset (each codec holds all of it).
        Under 1 GB the figures are small-read results (:mod:`.scale`).
    datasets : tuple of str
        Generated tables: ``"lineitem"``, ``"entropy"``.
    user_dataset : path, optional
        A directory of Parquet files measured as it is, against an
        uncompressed copy written under ``data_dir``.
    codecs : tuple of str
        Codecs of the generated datasets (uncompressed is always written).
    files : int
        Files per codec directory (a partition each): 32 by default, about
        100 MB each at the default size.
    repeats : int
        Timed repeats of every figure.
    parts : tuple of str
        Which of :data:`PARTS` to run.
    schedulers : tuple of str
        Which of :data:`SCHEDULERS` the end-to-end part uses.
    shapes : sequence
        Cluster shapes, worker processes × threads per worker
        (:class:`~.shapes.ClusterShape`, ``"4x4"`` or ``(4, 4)``); one
        LocalCluster each. Default: :func:`~.shapes.default_shapes`
        (``4x(C/4), Cx1, 1xC`` on C cores).
    backends : tuple of str
        hwdecomp backends to compare (``"auto"`` and registry names).
    decodes : tuple of str
        ``decode`` options crossed with the GPU-capable backends
        (``hwdecomp-auto`` and ``hwdecomp-auto-decode-cpu``, ...).
    decompress_bytes : int
        Output bytes of the decompression-only page set.
    pages_per_call : tuple of int
        Sweep points.
    streams : tuple of int
        Stream counts swept for GPU backends.
    progress : bool
        Show progress bars.
    command : str
        How the run was started (for the report).
    keep_data : bool
        Keep the generated datasets (and the uncompressed copy of
        ``user_dataset``) after the run; by default they are removed.
    """

    out_dir: Path = Path("bench-out")
    data_dir: Path | None = None
    size_bytes: int = 3_000_000_000
    datasets: tuple = ("lineitem", "entropy")
    user_dataset: Path | None = None
    codecs: tuple = tuple(CODECS)
    files: int = 32
    repeats: int = 3
    parts: tuple = PARTS
    schedulers: tuple = SCHEDULERS
    shapes: tuple = field(default_factory=default_shapes)
    backends: tuple = ("auto", "cpu", "nvcomp", "hardware")
    decodes: tuple = ("auto", "cpu")
    decompress_bytes: int = 1 << 30
    pages_per_call: tuple = (16, 64, 256, 1024, 4096)
    streams: tuple = (1, 2, 4)
    progress: bool = True
    command: str = ""
    keep_data: bool = False

    def __post_init__(self):
        unknown = set(self.parts) - set(PARTS)
        if unknown:
            raise ValueError(f"unknown part(s) {sorted(unknown)}; choose from {PARTS}")
        unknown = set(self.schedulers) - set(SCHEDULERS)
        if unknown:
            raise ValueError(f"unknown scheduler(s) {sorted(unknown)}; choose from {SCHEDULERS}")
        from .variants import DECODES

        unknown = set(self.decodes) - set(DECODES)
        if unknown or not self.decodes:
            raise ValueError(f"unknown or no decode(s) {sorted(unknown)}; choose from {DECODES}")
        self.shapes = parse_shapes(self.shapes)
        for name in ("size_bytes", "files", "repeats", "decompress_bytes"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        self.out_dir = Path(self.out_dir)
        self.data_dir = Path(self.data_dir) if self.data_dir else self.out_dir / "data"


def _bar(cfg: BenchConfig, total: int, desc: str):
    return tqdm(total=total, desc=desc, disable=not cfg.progress, leave=False, dynamic_ncols=True)


def _save(cfg: BenchConfig, results: dict, plots: bool = False) -> dict:
    """Write ``results.json`` and ``report.md``; the plots too when ``plots``.

    The plots are drawn once, at the end: drawing them after every part
    took most of a tiny run's time and seconds of a lease's at scale.
    """
    from .markdown import render_report
    from .targets import check_targets

    checks = check_targets(results)
    results["targets"] = checks
    if plots:
        from .plots import plot_all

        results["plots"] = plot_all(results, cfg.out_dir)
    (cfg.out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))
    (cfg.out_dir / "report.md").write_text(render_report(results, checks, results.get("plots", {})))
    return results


def _datasets(cfg: BenchConfig) -> dict:
    out = {}
    processes = min(os.cpu_count() or 1, cfg.files)
    with _bar(cfg, cfg.files * len(cfg.datasets), "writing datasets") as bar, writer_pool(processes) as pool:
        for kind in cfg.datasets:
            out[kind] = generate(cfg.data_dir, kind, cfg.size_bytes, cfg.files, cfg.codecs, progress=bar.update,
                                 pool=pool)
    if cfg.user_dataset:
        out["user"] = from_user(cfg.user_dataset, cfg.data_dir)
    return out


def _e2e(cfg: BenchConfig, datasets: dict, results: dict) -> None:
    from .endtoend import local_cluster, measure_dataset, threaded
    from .variants import CEILING, ceiling_variant, engine_variants

    variants = {**engine_variants(cfg.backends, decodes=cfg.decodes), CEILING: ceiling_variant()}
    results["variants"] = {k: {"backend": v.backend, "decode": v.decode, "unavailable": v.unavailable,
                               "codecs": v.codecs} for k, v in variants.items()}
    usable = [v for v in variants.values() if v.unavailable is None]
    results["warmup"] = "an untimed read of every variant on every codec, on each scheduler and shape"
    e2e = results.setdefault("endtoend", {})
    for sched in cfg.schedulers:
        # Threaded runs of equal totals of threads are the same run: once each.
        shapes, opener = (cfg.shapes, local_cluster) if sched == "distributed" else (threaded_shapes(cfg.shapes), threaded)
        for shape in shapes:
            with opener(shape) as scheduler:
                for name, ds in datasets.items():
                    # the warm-up read of every pair, then the timed repeats
                    total = (cfg.repeats + 1) * sum(v.applies_to(c) for c in ds.dirs for v in usable)
                    with _bar(cfg, total, f"{sched} {shape}: {name}") as bar:
                        e2e.setdefault(name, {}).setdefault(sched, {})[str(shape)] = measure_dataset(
                            scheduler, variants, ds, cfg.repeats, tick=bar.update
                        )
                    results.setdefault("ceiling", {})[name] = _ceiling_plan(ds)
                    _save(cfg, results)


def _ceiling_plan(ds) -> dict:
    """How many partitions the ceiling read made, and how they were chosen."""
    from .ceiling import ipc_parts

    try:
        plan, how = ipc_parts(ds.dirs["uncompressed"])
    except Exception as exc:  # the ceiling's own figure already says it failed
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"partitions": len(plan), "how": how}


def _page_sets(cfg: BenchConfig, datasets: dict, page_bytes: int) -> tuple[dict, dict]:
    """``({codec: PageSet}, description)`` of ``cfg.decompress_bytes`` cut into ``page_bytes`` pages."""
    from .pages import PAGE_CODECS, compress_pages, read_plain_pages

    source = next(iter(datasets.values())).dirs["uncompressed"]
    plain = read_plain_pages(sorted(Path(source).glob("*.parquet")), cfg.decompress_bytes, page_bytes)
    sets = {}
    with _bar(cfg, len(PAGE_CODECS), f"compressing {page_bytes >> 10} KiB pages") as bar:
        for codec in PAGE_CODECS:
            if codec in cfg.codecs:
                sets[codec] = compress_pages(codec, plain)
            bar.update()
    info = {"pages": {"source": str(source), "page_bytes": page_bytes, "count": len(plain)},
            "ratios": {c: s.ratio for c, s in sets.items()}}
    return sets, info


def _decompress(cfg: BenchConfig, datasets: dict, results: dict) -> None:
    from ..backend_table import GPU_BACKENDS
    from .decompression import measure_backends, open_backends, sweep
    from .pages import PAGE_BYTES, SMALL_PAGE_BYTES

    sets, info = _page_sets(cfg, datasets, PAGE_BYTES)
    dec = results.setdefault("decompression", {})
    dec.update(info)
    cores = os.cpu_count() or 1
    names = set(cfg.backends) | {"cpu"}
    if "auto" in names:  # auto takes a GPU backend where one runs: measure every one
        names |= set(GPU_BACKENDS)
    factories, missing = open_backends(names, cores)
    dec["unavailable"] = missing
    if "decompress" in cfg.parts:
        with _bar(cfg, len(factories) * len(sets), "decompression alone") as bar:
            dec["backends"] = measure_backends(factories, sets, cfg.repeats, tick=bar.update)
        _save(cfg, results)
        # The same bytes again in small pages: what a real file's pages look
        # like (tens of KiB), at the same default options.
        small, small_info = _page_sets(cfg, datasets, SMALL_PAGE_BYTES)
        with _bar(cfg, len(factories) * len(small), "decompression alone, small pages") as bar:
            small_info["backends"] = measure_backends(factories, small, cfg.repeats, tick=bar.update)
        dec["small_pages"] = small_info
        del small
        _save(cfg, results)
    if "sweep" in cfg.parts:
        n_gpu = sum(not k.startswith("cpu") for k in factories)
        total = (1 + n_gpu * len(cfg.streams)) * len(sets) * len(cfg.pages_per_call)
        with _bar(cfg, total, "batch sweep") as bar:
            # Sweep points are many: at most two timed repeats each.
            dec["sweep"] = sweep(factories, sets, cfg.pages_per_call, cfg.streams, min(cfg.repeats, 2), tick=bar.update)
        _save(cfg, results)
    if "checksums" in cfg.parts:
        from .decompression import checksum_cost

        n_gpu = sum(not k.startswith("cpu") for k in factories)
        with _bar(cfg, n_gpu * len(sets), "checksum cost") as bar:
            dec["checksums"] = checksum_cost(factories, sets, cfg.repeats, tick=bar.update)
        _save(cfg, results)


def _gpudecode(cfg: BenchConfig, datasets: dict, results: dict) -> None:
    from .gpudecode import measure_gpudecode, unavailable

    why = unavailable()
    if why is not None:
        results["gpudecode"] = {"skipped": why}
        results["skipped"]["GPU decode kernels alone"] = why
        _save(cfg, results)
        return
    out = results.setdefault("gpudecode", {})
    for name, ds in datasets.items():
        with _bar(cfg, 2 * cfg.repeats + 1, f"GPU decode kernels: {name}") as bar:
            try:
                out[name] = measure_gpudecode(sorted(Path(ds.dirs["uncompressed"]).glob("*.parquet")), cfg.repeats,
                                              tick=bar.update)
            except Exception as exc:  # reported per dataset, the run goes on
                out[name] = {"error": f"{type(exc).__name__}: {exc}"}
        _save(cfg, results)


def rerender(out_dir) -> dict:
    """Rewrite ``report.md``, the plots and the target checks from ``results.json``.

    Raises
    ------
    FileNotFoundError
        No ``results.json`` in ``out_dir``.
    """
    out_dir = Path(out_dir)
    results = json.loads((out_dir / "results.json").read_text())
    return _save(BenchConfig(out_dir=out_dir, progress=False), results, plots=True)


def run_bench(cfg: BenchConfig) -> dict:
    """Run the parts of ``cfg``; write ``results.json`` and ``report.md``.

    Returns
    -------
    dict
        The results (also in ``cfg.out_dir/results.json``).

    Raises
    ------
    ValueError
        An invalid configuration.
    """
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    try:
        return _run(cfg)
    finally:
        if not cfg.keep_data:
            remove_generated(cfg)


def remove_generated(cfg: BenchConfig) -> None:
    """Remove the datasets this run wrote under ``cfg.data_dir`` (never the user's own)."""
    import shutil

    data_dir = cfg.data_dir
    if data_dir is None:  # not resolved: nothing was written
        return
    for name in (*cfg.datasets, "user"):
        shutil.rmtree(data_dir / name, ignore_errors=True)
    with contextlib.suppress(OSError):  # not empty: something else lives there
        data_dir.rmdir()


def _run(cfg: BenchConfig) -> dict:
    info = system_info()
    if cfg.progress:
        print(format_system(info), flush=True)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()}
    config["shapes"] = [str(s) for s in cfg.shapes]  # e2eruns reads the figures' layout from this key
    results: dict = {
        "started": _dt.datetime.now().isoformat(timespec="seconds"),
        "system": info,
        "config": config,
        "skipped": {},
    }
    datasets = _datasets(cfg)
    results["datasets"] = {k: {**d.to_dict(), "small_read": is_small(d.arrow_bytes)} for k, d in datasets.items()}
    small = [k for k, d in datasets.items() if is_small(d.arrow_bytes)]
    results["small_read"] = {"datasets": small, "threshold_bytes": SMALL_READ_BYTES,
                             "note": SMALL_READ_NOTE if small else None}
    if small and cfg.progress:
        print(f"{SMALL_READ_NOTE} ({', '.join(small)})", flush=True)
    _save(cfg, results)
    # End to end first: the parts below open GPU backends in this process,
    # whose CUDA context would then count among the GPU's processes while
    # the workers read.
    if "e2e" in cfg.parts:
        _e2e(cfg, datasets, results)
    if "copy" in cfg.parts:
        from .copybw import copy_bandwidth

        results["copy_bandwidth"] = copy_bandwidth()
        if "skipped" in results["copy_bandwidth"]:
            results["skipped"]["copy bandwidth"] = results["copy_bandwidth"]["skipped"]
        _save(cfg, results)
    if "gpudecode" in cfg.parts:
        _gpudecode(cfg, datasets, results)
    if {"decompress", "sweep", "checksums"} & set(cfg.parts):
        _decompress(cfg, datasets, results)
    results["finished"] = _dt.datetime.now().isoformat(timespec="seconds")
    from ..routing import registry

    registry.close_all()
    return _save(cfg, results, plots=True)
