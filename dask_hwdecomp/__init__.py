"""dask_hwdecomp: Parquet for Dask with page decompression on the GPU.

>>> import dask.dataframe as dd  # doctest: +SKIP
>>> from dask_hwdecomp import hwdecomp  # doctest: +SKIP
>>> df = dd.read_parquet("data/*.parquet", engine=hwdecomp)  # doctest: +SKIP
"""

from .errors import (
    BackendUnavailableError,
    ChecksumError,
    CorruptDataError,
    CorruptFileError,
    CorruptMetadataError,
    CorruptPageError,
    HwdecompError,
    LimitExceededError,
    PageLocation,
    UnsupportedFeatureError,
)
from .io.reader import HwdecompFallbackWarning, read_table
from .options import Options, UnknownOptionWarning, current_options, options
from .report import ReadReport, collect_reports

__version__ = "0.1.0"


def __getattr__(name):
    # The Dask engine imports dask.dataframe, which is slow: only on demand.
    if name in ("hwdecomp", "HwdecompEngine"):
        from .engine.arrow import HwdecompEngine

        return HwdecompEngine
    raise AttributeError(f"module 'dask_hwdecomp' has no attribute {name!r}")


__all__ = [
    "hwdecomp",
    "HwdecompEngine",
    "read_table",
    "Options",
    "options",
    "current_options",
    "ReadReport",
    "collect_reports",
    "HwdecompError",
    "CorruptFileError",
    "CorruptMetadataError",
    "CorruptPageError",
    "CorruptDataError",
    "ChecksumError",
    "UnsupportedFeatureError",
    "BackendUnavailableError",
    "LimitExceededError",
    "PageLocation",
    "HwdecompFallbackWarning",
    "UnknownOptionWarning",
]
