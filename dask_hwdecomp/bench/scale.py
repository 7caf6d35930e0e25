"""Small reads: datasets too small for their figures to decide anything.

A read of a few hundred MB in a few files takes a fraction of a second, so
dask's per-task cost (scheduling, the result's transfer, pandas
conversion of small frames) is most of what it measures: figures from
400 MB in 16 files once led to wrong conclusions. Figures that decide a
design come from at least 3 GB per dataset in 32 or more files of about
100 MB; figures under :data:`SMALL_READ_BYTES` of Arrow data per dataset
are labelled small-read results (report, console, ``results.json``) and
the targets are not judged on them.
"""

from __future__ import annotations

__all__ = ["SMALL_READ_BYTES", "SMALL_READ_NOTE", "is_small", "small_reads", "add_scale_arguments"]

SMALL_READ_BYTES = 10**9
SMALL_READ_NOTE = ("SMALL READ: figures under 1 GB per dataset are dominated by per-task costs; "
                   "do not use them for decisions")


def is_small(arrow_bytes: int) -> bool:
    """Whether a dataset of ``arrow_bytes`` of Arrow data is a small read."""
    return arrow_bytes < SMALL_READ_BYTES


def small_reads(results: dict) -> dict[str, int]:
    """``{dataset: Arrow bytes}`` of the run's small-read datasets (empty at scale)."""
    return {name: int(d["arrow_bytes"]) for name, d in results.get("datasets", {}).items()
            if "arrow_bytes" in d and is_small(int(d["arrow_bytes"]))}


def add_scale_arguments(parser) -> None:
    """The arguments of the benchmark scripts that read the bench's tables at scale.

    ``out`` (a directory), ``--data`` (the datasets' root, default
    ``OUT/data``, reused when present), ``--size`` (Arrow bytes per
    dataset, default 3GB) and ``--files`` (files per dataset, default 32).
    """
    from pathlib import Path

    parser.add_argument("out", type=Path)
    parser.add_argument("--data", type=Path, default=None, help="dataset root (default OUT/data)")
    parser.add_argument("--size", default="3GB")
    parser.add_argument("--files", type=int, default=32)
