"""The decompression job record and the bitstreams backends decompress.

The format layer plans :class:`Job` records of an :class:`Algo`; the
decompression backends and the GPU layer run them. Both sides import them
from here, so that the GPU layer does not depend on the Parquet format layer.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .errors import PageLocation

__all__ = ["Algo", "Job", "PageCrc"]


class Algo(enum.Enum):
    """A plain bitstream a backend decompresses."""

    SNAPPY = "snappy"  # raw Snappy block: length varint, then the elements
    DEFLATE = "deflate"  # raw RFC 1951 stream (one gzip member's body)
    GZIP = "gzip"  # one or more whole RFC 1952 members (CPU only)
    LZ4 = "lz4"  # LZ4 block
    ZSTD = "zstd"  # RFC 8878 frame(s)
    BROTLI = "brotli"  # RFC 7932 stream


@dataclass(frozen=True)
class PageCrc:
    """A page's stored bytes ``src[offset:+size]`` and the CRC-32 its header gives them."""

    offset: int
    size: int
    value: int


@dataclass
class Job:
    """One decompression: ``src[src_offset:+src_size]`` to ``dst[dst_offset:+dst_size]``.

    Offsets are into the batch's source and destination buffers.

    Attributes
    ----------
    algo : Algo
        The bitstream to decompress.
    src_offset, src_size : int
        The compressed input in the batch source buffer.
    dst_offset, dst_size : int
        The output in the batch destination buffer; ``dst_size`` is the size
        the output must have.
    codec : int
        The Parquet codec the job came from (for reports).
    location : PageLocation
        The page the job decompresses (for errors).
    crc32 : int or None
        The CRC-32 the output must have, where the stream carries one (gzip).
    preamble : int
        Leading input bytes that frame the bitstream rather than belong to
        it: a Snappy block's length varint (see
        :class:`~dask_hwdecomp.format.codecs.Span`).
    page_crc : PageCrc or None
        The Parquet page CRC-32 to check over the page's stored bytes
        (``verify_checksums``; on the first job of the page only).
    """

    algo: Algo
    src_offset: int
    src_size: int
    dst_offset: int
    dst_size: int
    codec: int
    location: PageLocation
    crc32: int | None = None
    preamble: int = 0
    page_crc: PageCrc | None = None
