"""Parquet files whose pages fail a checksum but still decompress.

Used by the checksum tests on every backend (CPU and engine stand-in in CI,
nvCOMP on the GPU machine). Each case is a file pyarrow refuses, with the
page that is wrong:

* :func:`gzip_flips`: a bit flipped inside a GZIP page's deflate stream
  such that zlib still inflates it to the page's size, to other bytes (the
  trailer's CRC-32 catches it);
* :func:`zstd_checksummed` and :func:`zstd_flips`: ZSTD pages as frames of
  raw blocks with the content checksum flag, and a byte of a raw block
  flipped (any such flip decodes, to other bytes);
* :func:`page_crc_flips`: a byte flipped in a page written with
  ``write_page_checksum`` (for ``verify_checksums``).
"""

from __future__ import annotations

import random
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dask_hwdecomp.format.codecs import _gzip_header_len
from dask_hwdecomp.format.structs import Codec
from dask_hwdecomp.format.xxh64 import xxh64

from fuzzing import file_map
from rewrite import compress_values, rewrite_pages


@dataclass(frozen=True)
class FlipCase:
    """A mutated file and the page (its index in the file's page order) that is wrong."""

    data: bytes
    page: int
    offset: int


def table(n: int = 3000, seed: int = 0) -> pa.Table:
    """Columns whose pages compress (ints, floats, strings with repeats)."""
    rng = np.random.default_rng(seed)
    return pa.table({
        "i": pa.array(rng.integers(0, 1000, n)),
        "f": pa.array(rng.normal(size=n).round(2)),
        "s": pa.array([f"value-{i % 37}" for i in range(n)]),
    })


def write(path: Path, codec: str, *, checksums: bool = False, version: str = "1.0") -> Path:
    pq.write_table(table(), path, compression=codec, use_dictionary=False, data_page_size=4000,
                   data_page_version=version, write_page_checksum=checksums)
    return path


def _pages(path: Path):
    return file_map(path).pages


def gzip_flips(path: Path, limit: int = 6, seed: int = 0) -> list[FlipCase]:
    """Bit flips in GZIP pages' deflate streams that inflate to the right size, wrong bytes."""
    data = Path(path).read_bytes()
    rnd = random.Random(seed)
    out = []
    for k, page in enumerate(_pages(path)):
        at = data.find(b"\x1f\x8b\x08", page.body_start, page.body_end)  # after any v2 levels
        body = data[at : page.body_end]
        if at < 0 or len(body) < 40:
            continue
        start = _gzip_header_len(body, None)
        crc, isize = struct.unpack_from("<II", body, len(body) - 8)
        raw = body[start : len(body) - 8]
        for _ in range(200):
            pos = rnd.randrange(len(raw) // 4, len(raw))
            bit = 1 << rnd.randrange(8)
            bad = bytearray(raw)
            bad[pos] ^= bit
            d = zlib.decompressobj(-15)
            try:
                got = d.decompress(bytes(bad)) + d.flush()
            except zlib.error:
                continue
            if d.eof and not d.unused_data and len(got) == isize and zlib.crc32(got) != crc:
                mutated = bytearray(data)
                mutated[at + start + pos] ^= bit
                out.append(FlipCase(bytes(mutated), k, at + start + pos))
                break
        if len(out) >= limit:
            break
    return out


def raw_zstd_frame(content: bytes) -> bytes:
    """``content`` as one Zstd frame of raw blocks, with its content checksum."""
    parts = [struct.pack("<IBQ", 0xFD2FB528, 0xE4, len(content))]
    blocks = range(0, len(content), 1 << 16)
    for pos in blocks:
        size = min(1 << 16, len(content) - pos)
        parts.append(struct.pack("<I", (size << 3) | (pos + size >= len(content)))[:3])
        parts.append(content[pos : pos + size])
    parts.append(struct.pack("<I", xxh64(content) & 0xFFFFFFFF))
    return b"".join(parts)


def zstd_checksummed(tmp: Path, version: str = "1.0") -> Path:
    """A ZSTD file whose every page is a checksummed frame of raw blocks."""
    plain = write(tmp / f"plain-v{version[0]}.parquet", "none", version=version)
    out = tmp / f"zstd-checksummed-v{version[0]}.parquet"
    rewrite_pages(plain, out, compress_values(raw_zstd_frame), codec=Codec.ZSTD)
    return out


def zstd_flips(path: Path, limit: int = 6, seed: int = 0) -> list[FlipCase]:
    """A byte of a raw block flipped in checksummed ZSTD pages (every such frame still decodes)."""
    data = Path(path).read_bytes()
    rnd = random.Random(seed)
    out = []
    for k, page in enumerate(_pages(path)):
        body = data[page.body_start : page.body_end]
        at = body.find(struct.pack("<I", 0xFD2FB528))
        if at < 0 or len(body) - at < 40:
            continue
        content_start = at + 14 + 3  # magic, descriptor, 8-byte size, block header
        pos = page.body_start + content_start + rnd.randrange(min(1 << 16, len(body) - at - 14 - 3 - 4))
        mutated = bytearray(data)
        mutated[pos] ^= 0xFF
        out.append(FlipCase(bytes(mutated), k, pos))
        if len(out) >= limit:
            break
    return out


def page_crc_flips(path: Path, limit: int = 6, seed: int = 0) -> list[FlipCase]:
    """One byte flipped in the body of pages that carry a page CRC-32."""
    data = Path(path).read_bytes()
    rnd = random.Random(seed)
    out = []
    for k, page in enumerate(_pages(path)):
        if page.body_end - page.body_start < 8:
            continue
        pos = rnd.randrange(page.body_start, page.body_end)
        mutated = bytearray(data)
        mutated[pos] ^= 1 << rnd.randrange(8)
        out.append(FlipCase(bytes(mutated), k, pos))
        if len(out) >= limit:
            break
    return out
