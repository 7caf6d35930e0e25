"""Which way ``backend="auto"`` reads a piece, where a GPU backend can run.

A read with a GPU has three ways to turn a piece's pages into Arrow:

- ``GPU_DECODE``: the page path, the GPU decompressing and decoding the
  column chunks its decoder supports (pyarrow decodes the rest from the
  uncompressed image);
- ``GPU_DECOMPRESSION``: the page path, the GPU decompressing and pyarrow
  decoding every column from the uncompressed image;
- ``PYARROW``: pyarrow's own read, decompressing and decoding on the CPU.

``decode="gpu"`` and every named backend take the page path as asked, and
so do options only the page path honours (``verify_checksums``,
``max_page_bytes`` or ``max_batch_bytes`` other than their defaults).
Otherwise ``backend="auto"`` takes the faster way by the rule of
:func:`choose`, from the codec x cluster-shape sweep at scale on an H100
(3 GB of Arrow in 32 files per table, lineitem-like and high-entropy; 4x4,
16x1 and 1x16 LocalClusters; ``benchmarks/run-h200-sweep.sh``, results in
``benchmarks/results/2026-12-06-h100-sweep``):

- ``decode="auto"`` (the default): the GPU's decode, 1.00 to 2.42 times
  pyarrow's own read at 4x4 and 16x1 and 0.95 to 1.95 times at 1x16, on
  every codec;
- ``decode="cpu"``: GPU decompression with pyarrow decoding for SNAPPY and
  GZIP (1.01 to 2.88 times pyarrow, 0.96 once), pyarrow's own read for the
  codecs of :data:`PYARROW_FASTER` (GPU decompression read LZ4_RAW at 0.87,
  ZSTD at 0.91 and UNCOMPRESSED files at 0.89 times pyarrow in some cell).

A piece is one file (or its row groups of a dask partition): a piece with
one chunk of a codec of :data:`PYARROW_FASTER` goes to pyarrow whole.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable

from ..format.structs import Codec
from ..options import Options

__all__ = ["Way", "WayChoice", "choose", "page_path_only", "PYARROW_FASTER"]


class Way(enum.Enum):
    """How a piece's pages become Arrow."""

    GPU_DECODE = "GPU decompression and decoding"
    GPU_DECOMPRESSION = "GPU decompression, pyarrow decoding"
    PYARROW = "pyarrow's own read"


@dataclasses.dataclass(frozen=True)
class WayChoice:
    """The way a piece takes, and why (the read's report gives the reason)."""

    way: Way
    reason: str


# Codecs on which, in the sweep, GPU decompression with pyarrow decoding
# read slower than pyarrow's own read of the same files on some table or
# cluster shape: with decode="cpu", auto reads them through pyarrow.
# UNCOMPRESSED: the page path only copies the pages. BROTLI and LZO no GPU
# decompresses (the page path would decompress them on the CPU pool, then
# copy); Hadoop-framed LZ4 holds LZ4_RAW's blocks.
PYARROW_FASTER: frozenset[Codec] = frozenset({
    Codec.UNCOMPRESSED, Codec.LZ4_RAW, Codec.ZSTD, Codec.BROTLI, Codec.LZ4, Codec.LZO,
})

_LIMITS = ("max_page_bytes", "max_batch_bytes")
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Options) if f.name in _LIMITS}


def page_path_only(options: Options) -> str | None:
    """Why ``options`` must read on the page path whatever is faster, or None.

    The page path checks CRCs and names the failing page
    (``verify_checksums``), enforces ``max_page_bytes`` and
    ``max_batch_bytes`` (pyarrow's read enforces neither), and
    ``decode="gpu"`` asks for the GPU's decode; a named backend asks for
    itself.
    """
    if options.backend != "auto":
        return f"backend={options.backend!r}"
    if options.decode == "gpu":
        return "decode='gpu'"
    if options.verify_checksums:
        return "verify_checksums=True"
    for name, default in _DEFAULTS.items():
        if getattr(options, name) != default:
            return f"{name} set"
    return None


def choose(options: Options, codecs: Iterable[int]) -> WayChoice:
    """The way a piece whose column chunks have ``codecs`` is read, where a GPU backend runs.

    Parameters
    ----------
    options : Options
    codecs : iterable of int
        The ``CompressionCodec`` of each column chunk the read takes from
        the piece (repeats allowed).

    Returns
    -------
    WayChoice
    """
    asked = page_path_only(options)
    gpu = options.decode != "cpu"
    if asked is not None:
        way = Way.GPU_DECODE if gpu else Way.GPU_DECOMPRESSION
        return WayChoice(way, f"asked for by {asked}")
    if gpu:
        return WayChoice(Way.GPU_DECODE, "decode on the GPU: faster than pyarrow's own read on every codec measured")
    slower = sorted({_name(c) for c in codecs if _pyarrow_faster(c)})
    if slower:
        return WayChoice(Way.PYARROW, f"decode='cpu': pyarrow's own read is faster than GPU decompression "
                                      f"with pyarrow decoding on {', '.join(slower)}")
    return WayChoice(Way.GPU_DECOMPRESSION, "decode='cpu': GPU decompression with pyarrow decoding is faster "
                                            "than pyarrow's own read on these codecs")


def _pyarrow_faster(codec: int) -> bool:
    """Whether pyarrow's own read was measured faster on ``codec`` (one this reader does not know: yes)."""
    try:
        return Codec(codec) in PYARROW_FASTER
    except ValueError:
        return True


def _name(codec: int) -> str:
    """``parquet.thrift``'s name of ``codec``, or its number."""
    try:
        return Codec(codec).name
    except ValueError:
        return f"codec {codec}"
