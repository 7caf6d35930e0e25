"""The decompression job record and the bitstreams backends decompress.

The format layer plans :class:`Job` records of an :class:`Algo`; the
decompression backends and the GPU layer run them. Both sides import them
from here, so that the GPU layer does not depend on the Parquet format layer.

A batch of thousands of pages is also a :class:`JobTable`: the same fields
as numpy columns (the GPU service's wire format, viewed without a copy), so
the GPU path validates, cuts, places and launches a call in array
operations and makes a :class:`Job` only for a page it reports on.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import PageLocation

__all__ = ["Algo", "ALGOS", "Job", "PageCrc", "JOB_FIELDS", "JOB_DTYPE", "JobTable", "as_table"]


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


# Every bitstream, in the order of its code in a :class:`JobTable`.
ALGOS: tuple[Algo, ...] = tuple(Algo)
_CODE = {a: i for i, a in enumerate(ALGOS)}

# One job as ten int64s (the GPU service's wire layout): a CRC absent is -1,
# a page CRC range absent is (0, 0).
JOB_FIELDS = ("algo", "src_offset", "src_size", "dst_offset", "dst_size", "crc32", "preamble",
              "page_crc_offset", "page_crc_size", "page_crc")
JOB_DTYPE = np.dtype([(name, np.int64) for name in JOB_FIELDS])


class JobTable:
    """Jobs as numpy columns (:data:`JOB_DTYPE`), with where each came from.

    Parameters
    ----------
    rows : numpy.ndarray of JOB_DTYPE
    index : numpy.ndarray of int64, optional
        Each row's position in the table the caller made (kept by
        :meth:`take`, so a failure deep in a GPU call names the caller's
        job); default ``0 .. n-1``.
    codecs : numpy.ndarray of int64, optional
        Each row's Parquet codec (reports only); default 0.
    locations : indexable of PageLocation, optional
        Indexed by ``index`` (a list, or an object that makes each when asked); default ``PageLocation(page=index)`` (the
        service's jobs: the client names the page).
    pages : numpy.ndarray of int64, optional
        A page number per row, the same for the jobs of one page (reports
        count pages by it); default: a page a job.
    """

    __slots__ = ("rows", "index", "codecs", "locations", "pages")

    def __init__(self, rows: np.ndarray, index: np.ndarray | None = None, codecs: np.ndarray | None = None,
                 locations: Any = None, pages: np.ndarray | None = None):
        if rows.dtype != JOB_DTYPE:
            raise TypeError(f"a job table's rows are {JOB_DTYPE}, not {rows.dtype}")
        self.rows = rows
        self.index = np.arange(len(rows), dtype=np.int64) if index is None else index
        self.codecs = codecs
        self.locations = locations
        self.pages = self.index if pages is None else pages

    @classmethod
    def from_jobs(cls, jobs: Sequence[Job]) -> JobTable:
        """The table of ``jobs`` (their codecs and locations kept)."""
        n = len(jobs)
        rows = np.empty(n, dtype=JOB_DTYPE)
        flat = rows.view(np.int64).reshape(n, len(JOB_FIELDS))
        for i, j in enumerate(jobs):
            pc = j.page_crc
            flat[i] = (_CODE[j.algo], j.src_offset, j.src_size, j.dst_offset, j.dst_size,
                       -1 if j.crc32 is None else j.crc32, j.preamble,
                       0 if pc is None else pc.offset, 0 if pc is None else pc.size,
                       -1 if pc is None else pc.value)
        codecs = np.fromiter((j.codec for j in jobs), dtype=np.int64, count=n)
        locations = [j.location for j in jobs]
        numbers: dict = {}
        pages = np.fromiter((numbers.setdefault(loc, len(numbers)) for loc in locations), dtype=np.int64, count=n)
        return cls(rows, None, codecs, locations, pages)

    @classmethod
    def from_bytes(cls, blob, count: int) -> JobTable:
        """A read-only view of ``count`` jobs packed by :meth:`to_bytes` (no copy)."""
        return cls(np.frombuffer(blob, dtype=JOB_DTYPE, count=count))

    def to_bytes(self) -> bytes:
        """The rows as the wire carries them."""
        return np.ascontiguousarray(self.rows).tobytes()

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, k: int) -> Job:
        return self.job(k)

    def __iter__(self) -> Iterator[Job]:
        return (self.job(k) for k in range(len(self.rows)))

    def take(self, which) -> JobTable:
        """The rows ``which`` selects (a slice, an index array or a mask), their origins kept."""
        codecs = None if self.codecs is None else self.codecs[which]
        return JobTable(self.rows[which], self.index[which], codecs, self.locations, self.pages[which])

    def column(self, name: str) -> np.ndarray:
        """One field of every row."""
        return self.rows[name]

    def algo_codes(self) -> np.ndarray:
        """Each row's bitstream as its position in :data:`ALGOS`."""
        return self.rows["algo"]

    def location(self, k: int) -> PageLocation:
        """Where row ``k``'s page lies (for errors)."""
        i = int(self.index[k])
        if self.locations is None:
            return _index_location(i)
        return self.locations[i]

    def job(self, k: int) -> Job:
        """Row ``k`` as a :class:`Job` record (for reports and errors)."""
        if k < 0:
            k += len(self.rows)
        a, so, ss, do, ds, crc, pre, po, ps, pcrc = (int(v) for v in self.rows[k].tolist())
        codec = 0 if self.codecs is None else int(self.codecs[k])
        return Job(algo=ALGOS[a], src_offset=so, src_size=ss, dst_offset=do, dst_size=ds, codec=codec,
                   location=self.location(k), crc32=None if crc < 0 else crc, preamble=pre,
                   page_crc=None if pcrc < 0 else PageCrc(offset=po, size=ps, value=pcrc))

    def jobs(self) -> list[Job]:
        """Every row as a :class:`Job`."""
        return [self.job(k) for k in range(len(self.rows))]


def as_table(jobs: Sequence[Job] | JobTable) -> JobTable:
    """``jobs`` as a :class:`JobTable` (itself if it is one)."""
    return jobs if isinstance(jobs, JobTable) else JobTable.from_jobs(jobs)


_LOCATIONS: dict[int, PageLocation] = {}


def _index_location(i: int) -> PageLocation:
    """``PageLocation(page=i)``, shared (locations are frozen)."""
    loc = _LOCATIONS.get(i)
    if loc is None:
        loc = _LOCATIONS.setdefault(i, PageLocation(page=i))
    return loc
