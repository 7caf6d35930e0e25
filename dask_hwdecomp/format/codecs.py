"""From a compressed page body to the decompression jobs it needs.

Parquet codecs are not all one bitstream each: a GZIP page holds one or more
RFC 1952 members, an LZ4 page holds Hadoop-framed blocks (or, from some
writers, one bare block). Here each page body becomes one or more jobs of a
plain bitstream kind (:class:`Algo`) that a backend can run, and the checks
that the host can make before anything is submitted (declared sizes, frame
magic) are made, so that hostile bytes never reach a GPU decoder unchecked.
"""

from __future__ import annotations

import struct as _struct
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import CorruptPageError, PageLocation, UnsupportedFeatureError
from ..jobs import Algo
from .structs import CODEC_NAMES, Codec

__all__ = ["Algo", "Span", "plan_body", "snappy_length", "snappy_preamble", "preamble_of",
           "ZSTD_MAGIC", "ZstdDescriptor", "zstd_descriptor", "zstd_content_size"]


@dataclass(frozen=True)
class Span:
    """One job, relative to the page body and to the page's output.

    ``crc32``, when set, is the CRC-32 the output must have (gzip trailer).
    ``preamble`` is how many leading input bytes frame the bitstream rather
    than belong to it: a Snappy block's length varint. The CPU decoders and
    nvCOMP take the block with it; the decompression engine takes only the
    elements after it.
    """

    algo: Algo
    src_offset: int
    src_size: int
    dst_offset: int
    dst_size: int
    crc32: int | None = None
    preamble: int = 0


def snappy_preamble(body, where: PageLocation | None) -> tuple[int, int]:
    """(declared uncompressed length, bytes of the varint) of a raw Snappy block."""
    n = shift = 0
    for i in range(min(5, len(body))):
        b = body[i]
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return n, i + 1
        shift += 7
    raise CorruptPageError("snappy preamble is not a valid varint", where)


def snappy_length(body, where: PageLocation) -> int:
    """The uncompressed length a raw Snappy block declares in its preamble."""
    return snappy_preamble(body, where)[0]


def preamble_of(algo: Algo, body) -> int:
    """The ``preamble`` of a job of ``algo`` over ``body`` (0 but for Snappy).

    Raises
    ------
    CorruptPageError
        A Snappy block without a valid length varint.
    """
    return snappy_preamble(body, None)[1] if algo is Algo.SNAPPY else 0


def _gzip_header_len(body, where: PageLocation) -> int:
    n = len(body)
    if n < 18 or body[0] != 0x1F or body[1] != 0x8B:
        raise CorruptPageError("gzip member does not start with the magic 1f 8b", where)
    if body[2] != 8:
        raise CorruptPageError(f"gzip compression method {body[2]} is not deflate (8)", where)
    flags = body[3]
    if flags & 0xE0:
        raise CorruptPageError(f"gzip reserved flag bits set (flags {flags:#x})", where)
    pos = 10
    if flags & 0x04:  # FEXTRA
        if pos + 2 > n:
            raise CorruptPageError("gzip FEXTRA runs past the page", where)
        (xlen,) = _struct.unpack_from("<H", body, pos)
        pos += 2 + xlen
    for flag in (0x08, 0x10):  # FNAME, FCOMMENT: zero-terminated
        if flags & flag:
            while pos < n and body[pos] != 0:
                pos += 1
            pos += 1
    if flags & 0x02:  # FHCRC
        pos += 2
    if pos + 8 > n:
        raise CorruptPageError("gzip header runs past the page", where)
    return pos


_NEXT_AFTER_EMPTY = b"\x00" * 8 + b"\x1f\x8b\x08"


def _plan_gzip(body, expected: int, where: PageLocation) -> list[Span]:
    header = _gzip_header_len(body, where)
    crc, isize = _struct.unpack_from("<II", body, len(body) - 8)
    # An empty member is a header, a deflate stream of a few bytes, and a
    # zero CRC and size: the next member's magic follows within a few bytes.
    leading_empty = _NEXT_AFTER_EMPTY in bytes(body[header : header + 24])
    if isize == expected & 0xFFFFFFFF and not leading_empty:
        # One member: the trailer's size is the page's.
        return [Span(Algo.DEFLATE, header, len(body) - 8 - header, 0, expected, crc)]
    # Several members: their boundaries are only known by inflating, which
    # only the CPU pool does; the report counts these pages separately.
    return [Span(Algo.GZIP, 0, len(body), 0, expected)]


def _plan_lz4_hadoop(body, expected: int) -> list[Span] | None:
    """Hadoop framing: [BE u32 raw size][BE u32 block size][block]..., or None."""
    spans = []
    pos = out = 0
    n = len(body)
    while n - pos >= 8:
        raw, comp = _struct.unpack_from(">II", body, pos)
        pos += 8
        if comp > n - pos or out + raw > expected:
            return None
        spans.append(Span(Algo.LZ4, pos, comp, out, raw))
        pos += comp
        out += raw
    if pos != n or out != expected or not spans:
        return None
    return spans


ZSTD_MAGIC = 0xFD2FB528


class ZstdDescriptor(NamedTuple):
    """A Zstd frame header descriptor byte (RFC 8878, 3.1.1.1.1), decoded.

    ``header_bytes`` counts the magic, the descriptor, the window descriptor
    (absent in a single-segment frame) and the dictionary id: the offset of
    the content size field from the frame's start.
    """

    single_segment: bool
    checksum: bool
    reserved: bool
    header_bytes: int
    content_size_bytes: int


def zstd_descriptor(fhd: int) -> ZstdDescriptor:
    """Decode the descriptor byte ``fhd`` (byte 4 of a frame)."""
    single = bool((fhd >> 5) & 1)
    did_len = (0, 1, 2, 4)[fhd & 3]
    return ZstdDescriptor(
        single_segment=single,
        checksum=bool((fhd >> 2) & 1),
        reserved=bool(fhd & 0x08),
        header_bytes=5 + (0 if single else 1) + did_len,
        content_size_bytes=((1 if single else 0), 2, 4, 8)[fhd >> 6],
    )


def zstd_content_size(data, at: int, nbytes: int) -> int:
    """The content size field of ``nbytes`` at ``data[at:]``; -1 when the frame has none."""
    if not nbytes:
        return -1
    size = int.from_bytes(bytes(data[at : at + nbytes]), "little")
    return size + 256 if nbytes == 2 else size


def _check_zstd(body, expected: int, where: PageLocation) -> None:
    if len(body) < 5:
        raise CorruptPageError(f"zstd frame of {len(body)} bytes is shorter than a header", where)
    (magic,) = _struct.unpack_from("<I", body, 0)
    if magic != ZSTD_MAGIC:
        raise CorruptPageError(f"zstd frame magic {magic:#010x} is not {ZSTD_MAGIC:#010x}", where)
    desc = zstd_descriptor(body[4])
    if desc.reserved:
        raise CorruptPageError("zstd frame header reserved bit set", where)
    pos, fcs_len = desc.header_bytes, desc.content_size_bytes
    if fcs_len == 0:
        return
    if pos + fcs_len > len(body):
        raise CorruptPageError("zstd frame header runs past the page", where)
    raw = zstd_content_size(body, pos, fcs_len)
    # A page may hold several frames: the first frame can only be smaller.
    if raw > expected:
        raise CorruptPageError(
            f"zstd frame declares {raw} bytes, more than the page's {expected}", where
        )


def plan_body(codec: int, body, expected: int, where: PageLocation) -> list[Span]:
    """Split one compressed page body into decompression jobs.

    Parameters
    ----------
    codec : int
        The column chunk's Parquet ``CompressionCodec``.
    body : memoryview
        The compressed bytes (for v2 pages, after the levels).
    expected : int
        The uncompressed size the page header declares for ``body``.
    where : PageLocation
        Named in errors.

    Returns
    -------
    list of Span
        Empty when nothing is to be decompressed (``expected == 0``).

    Raises
    ------
    CorruptPageError
        The body cannot be what its header says.
    UnsupportedFeatureError
        A codec this reader does not decode (LZO).
    """
    if expected == 0:
        # Arrow decodes such pages without touching the body (some writers
        # put an empty compressed frame there); so do we.
        return []
    if len(body) == 0:
        raise CorruptPageError(
            f"compressed body is empty but the header declares {expected} bytes", where
        )
    if codec == Codec.SNAPPY:
        declared, preamble = snappy_preamble(body, where)
        if declared != expected:
            raise CorruptPageError(
                f"snappy block declares {declared} bytes, the page header {expected}", where
            )
        if preamble >= len(body):
            raise CorruptPageError("snappy block holds only its length preamble", where)
        return [Span(Algo.SNAPPY, 0, len(body), 0, expected, preamble=preamble)]
    if codec == Codec.GZIP:
        return _plan_gzip(body, expected, where)
    if codec == Codec.LZ4:
        spans = _plan_lz4_hadoop(body, expected)
        # Arrow's fallback: some writers put a bare LZ4 block under this id.
        return spans or [Span(Algo.LZ4, 0, len(body), 0, expected)]
    if codec == Codec.LZ4_RAW:
        return [Span(Algo.LZ4, 0, len(body), 0, expected)]
    if codec == Codec.ZSTD:
        _check_zstd(body, expected, where)
        return [Span(Algo.ZSTD, 0, len(body), 0, expected)]
    if codec == Codec.BROTLI:
        return [Span(Algo.BROTLI, 0, len(body), 0, expected)]
    name = CODEC_NAMES.get(codec, str(codec))
    raise UnsupportedFeatureError(f"compression codec {name} is not supported", where)
