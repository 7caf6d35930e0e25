"""dask_hwdecomp: Parquet for Dask with page decompression on the GPU.

>>> import dask.dataframe as dd  # doctest: +SKIP
>>> from dask_hwdecomp import hwdecomp  # doctest: +SKIP
>>> df = dd.read_parquet("data/*.parquet", engine=hwdecomp)  # doctest: +SKIP
"""

from . import errors
from .errors import *  # noqa: F403 - the exceptions and PageLocation, listed in errors.__all__
from .options import Options, UnknownOptionWarning, current_options, options
from .report import NotGatheredWarning, ReadReport, collect_reports

__version__ = "0.1.0"


def __getattr__(name):
    # On demand: the Dask engine imports dask.dataframe, and the read path
    # pandas and pyarrow's datasets (about 1 s together). A process that uses
    # neither, the GPU service or a CLI command, starts without them.
    if name in ("hwdecomp", "HwdecompEngine"):
        from .engine.arrow import HwdecompEngine

        return HwdecompEngine
    if name in ("read_table", "HwdecompFallbackWarning"):
        from .readpath import reader

        return getattr(reader, name)
    raise AttributeError(f"module 'dask_hwdecomp' has no attribute {name!r}")


__all__ = [
    "hwdecomp",  # noqa: F405 - a lazy attribute (__getattr__)
    "HwdecompEngine",  # noqa: F405
    "read_table",  # noqa: F405 - lazy
    "Options",
    "options",
    "current_options",
    "ReadReport",
    "collect_reports",
    *errors.__all__,
    "HwdecompFallbackWarning",  # noqa: F405 - lazy
    "UnknownOptionWarning",
    "NotGatheredWarning",
]
