"""Compressed pages for decompression-only measurements.

Pages are 1 MiB (or 64 KiB) slices of the uncompressed Parquet files of a benchmark
dataset (real encoded page data: dictionary indices, plain values, levels),
each compressed the way its Parquet codec stores it, as the bitstream a
backend receives: raw Snappy, raw deflate (what a GZIP page becomes after
its header and trailer are stripped), LZ4 block, zstd frame.
"""

from __future__ import annotations

import dataclasses
import os
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..decompress.samples import COMPRESSORS, compress_page, sample_payload
from ..errors import PageLocation
from ..format.codecs import preamble_of
from ..format.structs import Codec
from ..jobs import Algo, Job, PageCrc

__all__ = ["COMPRESSORS", "compress_page", "sample_payload", "PAGE_CODECS", "PageSet", "read_plain_pages", "compress_pages",
           "PAGE_BYTES", "SMALL_PAGE_BYTES"]

# The page sizes measured: large pages (the sweep's unit), and the tens of
# KiB that real files' pages have.
PAGE_BYTES = 1 << 20
SMALL_PAGE_BYTES = 64 << 10

# codec name -> (bitstream, Parquet codec id, compressor)
PAGE_CODECS: dict[str, tuple[Algo, Codec, Callable[[bytes], Any]]] = {
    "snappy": (Algo.SNAPPY, Codec.SNAPPY, COMPRESSORS[Algo.SNAPPY]),
    "gzip": (Algo.DEFLATE, Codec.GZIP, COMPRESSORS[Algo.DEFLATE]),
    "lz4_raw": (Algo.LZ4, Codec.LZ4_RAW, COMPRESSORS[Algo.LZ4]),
    "zstd": (Algo.ZSTD, Codec.ZSTD, COMPRESSORS[Algo.ZSTD]),
}


@dataclass
class PageSet:
    """Compressed pages laid end to end, and the jobs that decompress them.

    Attributes
    ----------
    codec : str
    src : bytes
        All compressed pages, each at its job's ``src_offset``.
    jobs : list of Job
    out_bytes : int
        Total output (destination buffer size).
    """

    codec: str
    src: bytes
    jobs: list
    out_bytes: int

    @property
    def ratio(self) -> float:
        return self.out_bytes / max(1, len(self.src))

    def with_checks(self, checks: str) -> PageSet:
        """The same pages with the checksums of ``checks`` on the jobs.

        ``"none"``: no checksum; ``"default"``: what a read checks by
        default (a GZIP page's CRC-32); ``"verify"``: also the page CRC-32
        over each page's stored bytes (``verify_checksums``).
        """
        jobs = []
        for job in self.jobs:
            gzip_crc = job.crc32 if checks != "none" else None
            page_crc = None
            if checks == "verify":
                data = self.src[job.src_offset : job.src_offset + job.src_size]
                page_crc = PageCrc(job.src_offset, job.src_size, zlib.crc32(data))
            jobs.append(dataclasses.replace(job, crc32=gzip_crc, page_crc=page_crc))
        return PageSet(self.codec, self.src, jobs, self.out_bytes)

    def head(self, n: int) -> PageSet:
        """The first ``n`` pages (their offsets are unchanged)."""
        jobs = self.jobs[:n]
        end_src = max(j.src_offset + j.src_size for j in jobs)
        end_dst = max(j.dst_offset + j.dst_size for j in jobs)
        return PageSet(self.codec, self.src[:end_src], jobs, end_dst)


def read_plain_pages(files, total_bytes: int, page_bytes: int = PAGE_BYTES) -> list[bytes]:
    """Cut up to ``total_bytes`` of ``files`` into pages of ``page_bytes``.

    The files are read in turn, wrapping around when they hold less.

    Raises
    ------
    FileNotFoundError
        ``files`` is empty.
    """
    files = [Path(f) for f in files]
    if not files:
        raise FileNotFoundError("no files to cut pages from")
    pages: list[bytes] = []
    want = max(1, total_bytes // page_bytes)
    while len(pages) < want:
        before = len(pages)
        for f in files:
            data = f.read_bytes()
            for off in range(0, len(data) - page_bytes + 1, page_bytes):
                pages.append(data[off : off + page_bytes])
                if len(pages) == want:
                    return pages
        if len(pages) == before:  # files smaller than one page: take them whole
            pages.extend(f.read_bytes() for f in files)
    return pages[:want]


def compress_pages(codec: str, pages: list[bytes], threads: int | None = None) -> PageSet:
    """Compress every page with ``codec`` (a key of :data:`PAGE_CODECS`).

    Raises
    ------
    KeyError
        An unknown codec.
    """
    algo, parquet_codec, compress = PAGE_CODECS[codec]
    with ThreadPoolExecutor(threads or os.cpu_count() or 1) as pool:
        blobs = list(pool.map(lambda p: bytes(compress(p)), pages))
    jobs = []
    src_off = dst_off = 0
    for i, (page, blob) in enumerate(zip(pages, blobs)):
        # 4-byte aligned starts: nvCOMP's deflate requires it.
        pad = -src_off % 4
        src_off += pad
        blobs[i] = b"\0" * pad + blob
        # A GZIP page's deflate job carries its trailer's CRC-32, as in a real read.
        crc = zlib.crc32(page) if parquet_codec == Codec.GZIP else None
        jobs.append(
            Job(algo=algo, src_offset=src_off, src_size=len(blob), dst_offset=dst_off, dst_size=len(page),
                codec=int(parquet_codec), location=PageLocation(file="bench", page=i), crc32=crc,
                preamble=preamble_of(algo, blob))
        )
        src_off += len(blob)
        dst_off += len(page)
    return PageSet(codec, b"".join(blobs), jobs, dst_off)
