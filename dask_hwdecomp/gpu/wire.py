"""The messages between a process and its GPU sidecar.

Every message is a small pickled tuple whose first item is its kind; bulky
data never travels: page bytes live in shared segments
(:mod:`dask_hwdecomp.gpu.shm`) and jobs travel as one int64 array.

Parent to sidecar::

    ("run", rid, segments, src, dst, protect, jobs)
        segments: ((seg_id, fd, nbytes), ...) the request touches
        src, dst: (seg_id, offset, nbytes) of the caller's views
        protect: bytes of an (n, 2) int64 array, jobs: bytes of :func:`pack_jobs`
    ("stats", rid)
    ("forget", seg_id)                      the parent freed that segment
    ("close",)

Sidecar to parent::

    ("hello", name, algorithms, max_job_bytes, overwrites_gaps)
    ("unavailable", error_type, message)    the backend cannot be created
    ("ok", rid, redone)                    pages the backend redid on the CPU
    ("corrupt", rid, index, error_type, message)  job ``index`` of the request
    ("error", rid, error_type, message, code, name)  the batch failed as a whole
    ("stats", rid, {name: int})
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import PageLocation
from ..format.codecs import Algo
from ..format.layout import Job, PageCrc

__all__ = ["pack_jobs", "unpack_jobs", "ALGOS", "FIELDS"]

ALGOS = list(Algo)
_CODE = {a: i for i, a in enumerate(ALGOS)}
FIELDS = ("algo", "src_offset", "src_size", "dst_offset", "dst_size", "crc32", "preamble",
          "page_crc_offset", "page_crc_size", "page_crc")


def pack_jobs(jobs: Sequence[Job]) -> bytes:
    """Jobs as an (n, 10) int64 array: :data:`FIELDS`; a CRC absent is -1."""
    arr = np.empty((len(jobs), len(FIELDS)), dtype=np.int64)
    for i, j in enumerate(jobs):
        pc = j.page_crc
        arr[i] = (_CODE[j.algo], j.src_offset, j.src_size, j.dst_offset, j.dst_size,
                  -1 if j.crc32 is None else j.crc32, j.preamble,
                  0 if pc is None else pc.offset, 0 if pc is None else pc.size,
                  -1 if pc is None else pc.value)
    return arr.tobytes()


def unpack_jobs(data: bytes) -> list[Job]:
    """The jobs of :func:`pack_jobs`; each one's location is its index (``page``).

    The sidecar knows pages only by their position in the caller's list: an
    error it raises carries that index back, and the parent names the page.
    """
    arr = np.frombuffer(data, dtype=np.int64).reshape(-1, len(FIELDS))
    return [
        Job(ALGOS[a], so, ss, do, ds, 0, PageLocation(page=i), None if crc < 0 else crc, pre,
            None if pcrc < 0 else PageCrc(po, ps, pcrc))
        for i, (a, so, ss, do, ds, crc, pre, po, ps, pcrc) in enumerate(arr.tolist())
    ]
