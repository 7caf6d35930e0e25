"""Which way ``backend="auto"`` reads a piece, where a GPU backend can run.

A read with a GPU has three ways to turn a piece's pages into Arrow:

- ``GPU_DECODE``: the page path, the GPU decompressing and decoding the
  column chunks its decoder supports (pyarrow decodes the rest from the
  uncompressed image);
- ``GPU_DECOMPRESSION``: the page path, the GPU decompressing and pyarrow
  decoding every column from the uncompressed image;
- ``PYARROW``: pyarrow's own read, decompressing and decoding on the CPU.

``decode="gpu"`` and every named backend take the page path as asked.
``backend="auto"`` takes the faster way by the rule of :func:`choose`,
which rests on the codec x cluster-shape sweep at scale (3 GB of Arrow in
32 files per table, lineitem-like and high-entropy, every cluster shape;
``benchmarks/run-h200-sweep.sh``): the GPU's decode was at least as fast as
pyarrow's own read on every codec and shape measured, while GPU
decompression with pyarrow decoding was slower than pyarrow's own read on
the codecs in :data:`PYARROW_FASTER` on some table or shape. Options only
the page path honours (``verify_checksums``, ``max_page_bytes`` or
``max_batch_bytes`` other than their defaults) keep the page path.
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
# UNCOMPRESSED: the page path would only copy the pages. Codecs no GPU
# decompresses (BROTLI, LZ4 with Hadoop framing, LZO) gain nothing either.
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
    slower = sorted({Codec(c).name if c in Codec._value2member_map_ else str(c) for c in codecs
                     if c not in Codec._value2member_map_ or Codec(c) in PYARROW_FASTER})
    if slower:
        return WayChoice(Way.PYARROW, f"decode='cpu': pyarrow's own read is faster than GPU decompression "
                                      f"with pyarrow decoding on {', '.join(slower)}")
    return WayChoice(Way.GPU_DECOMPRESSION, "decode='cpu': GPU decompression with pyarrow decoding is faster "
                                            "than pyarrow's own read on these codecs")
