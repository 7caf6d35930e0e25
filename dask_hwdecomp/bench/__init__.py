"""Benchmarks of the read path: ``hwdecomp bench`` and :func:`run_bench`.

One run generates (or takes) a dataset, measures ``dd.read_parquet`` with
engine="pyarrow" against the hwdecomp engine variants at every cluster
shape asked for, the decode-only bound (pyarrow on an uncompressed copy),
the decode-free ceiling (the same table as memory-mapped Arrow IPC files),
worker CPU seconds per GB, decompression
alone per backend (1 MiB and 64 KiB pages) against the pinned copy
bandwidth, and a batch-size sweep; it checks the targets and writes
``results.json`` and ``report.md`` with PNG plots.

Modules: :mod:`.system` (machine and versions), :mod:`.data` (datasets),
:mod:`.ceiling` (the IPC ceiling), :mod:`.variants` (the engines compared),
:mod:`.shapes` (cluster shapes), :mod:`.endtoend`, :mod:`.e2eruns` (the
end-to-end figures by dataset, scheduler and shape), :mod:`.scale` (small
reads), :mod:`.pages`, :mod:`.decompression`, :mod:`.copybw`,
:mod:`.targets`, :mod:`.plots`, :mod:`.markdown` (report.md), :mod:`.runner`.
"""

__all__ = ["BenchConfig", "run_bench"]


def __getattr__(name):
    # The runner imports dask and matplotlib: only on demand.
    if name in __all__:
        from . import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'dask_hwdecomp.bench' has no attribute {name!r}")

