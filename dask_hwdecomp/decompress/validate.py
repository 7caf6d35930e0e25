"""Host-side checks of what is submitted to a GPU decoder.

Corrupt input is undefined behaviour on the hardware engine (its contract
has no per-operation status, only the bytes written), and garbage given to
nvCOMP 6.0's Zstd raised an illegal memory access on an H200, which poisons
the CUDA context for the rest of the process (docs/gpu.md, "Known nvCOMP
6.0 hazards"). So every
job is checked before submission: its ranges lie inside the batch buffers,
its sizes are within the decoder's limits, and the stream's framing is
consistent (the Snappy preamble, each Zstd frame's header and block headers
walked to the end of the input). The content of compressed blocks is the
decoder's to reject, per page, with a status.
"""

from __future__ import annotations

import numpy as np

from ..errors import CorruptPageError
from ..format.codecs import ZSTD_MAGIC, snappy_preamble, zstd_content_size, zstd_descriptor
from ..format.zstd_blocks import (
    BLOCK_HEADER_PAST,
    BLOCK_LITERALS,
    BLOCK_OK,
    BLOCK_RESERVED,
    BLOCK_SEQUENCES,
    BLOCK_TOO_LARGE,
    ZstdBlocks,
    zstd_block_max,
    zstd_blocks,
)
from ..jobs import Algo, Job

__all__ = ["check_job", "zstd_frames"]

_SKIPPABLE = 0x184D2A50  # low nibble free
_WINDOW_LOG_MAX = 31


def _corrupt(job: Job, what: str) -> CorruptPageError:
    return CorruptPageError(f"{job.algo.value} stream rejected before the GPU: {what}", job.location)


def _block_fault(blocks: ZstdBlocks, block_max: int) -> str:
    if blocks.fault == BLOCK_HEADER_PAST:
        return "block header runs past the page"
    if blocks.fault == BLOCK_RESERVED:
        return f"reserved block type at byte {blocks.at}"
    if blocks.fault == BLOCK_TOO_LARGE:
        return f"block of {blocks.size} bytes exceeds the maximum {block_max}"
    if blocks.fault == BLOCK_LITERALS:
        return (f"the literals section of the compressed block at byte {blocks.at} contradicts the block"
                " or describes a Huffman tree libzstd refuses")
    if blocks.fault == BLOCK_SEQUENCES:
        return f"the sequences section header of the compressed block at byte {blocks.at} contradicts the block"
    return f"block of {blocks.size} bytes runs past the page"


def zstd_frames(data, job: Job, checksums: list | None = None) -> int:
    """Walk every frame and block header of a Zstd page; the declared content total.

    Returns the sum of the frames' declared content sizes (-1 if a frame
    declares none). ``checksums``, when given, gets one
    ``(content_size, checksum)`` per frame (size -1 if undeclared, checksum
    None if the frame carries none).

    Raises
    ------
    CorruptPageError
        A header is malformed, a size runs past the input, or the window is
        beyond Zstd's limit.
    """
    n = len(data)
    buf = np.frombuffer(data, dtype=np.uint8)
    pos = 0
    total = 0
    while pos < n:
        if n - pos < 4:
            raise _corrupt(job, f"{n - pos} trailing bytes after the last zstd frame")
        magic = int.from_bytes(data[pos : pos + 4], "little")
        if magic & 0xFFFFFFF0 == _SKIPPABLE:
            if n - pos < 8:
                raise _corrupt(job, "skippable frame header runs past the page")
            size = int.from_bytes(data[pos + 4 : pos + 8], "little")
            pos += 8 + size
            if pos > n:
                raise _corrupt(job, f"skippable frame of {size} bytes runs past the page")
            continue
        if magic != ZSTD_MAGIC:
            raise _corrupt(job, f"frame magic {magic:#010x} at byte {pos} is not {ZSTD_MAGIC:#010x}")
        if pos + 5 > n:
            raise _corrupt(job, "frame header runs past the page")
        desc = zstd_descriptor(data[pos + 4])
        if desc.reserved:
            raise _corrupt(job, "frame header reserved bit set")
        checksum = desc.checksum
        fcs_len = desc.content_size_bytes
        hdr = desc.header_bytes
        window = None
        if not desc.single_segment:
            if pos + 6 > n:
                raise _corrupt(job, "frame header runs past the page")
            wd = data[pos + 5]
            exp = (wd >> 3) + 10
            if exp > _WINDOW_LOG_MAX:
                raise _corrupt(job, f"window log {exp} exceeds {_WINDOW_LOG_MAX}")
            base = 1 << exp
            window = base + (base // 8) * (wd & 7)
        if pos + hdr + fcs_len > n:
            raise _corrupt(job, "frame header runs past the page")
        fcs = zstd_content_size(data, pos + hdr, fcs_len)
        if window is None:
            window = fcs
        if fcs > job.dst_size:
            raise _corrupt(job, f"frame declares {fcs} bytes, more than the page's {job.dst_size}")
        total = -1 if fcs < 0 or total < 0 else total + fcs
        block_max = int(zstd_block_max(window))
        blocks = zstd_blocks(buf, pos + hdr + fcs_len, n, block_max)
        if blocks.fault != BLOCK_OK:
            raise _corrupt(job, _block_fault(blocks, block_max))
        pos = blocks.at
        if fcs >= 0 and blocks.produced > fcs:
            raise _corrupt(job, f"raw/RLE blocks produce {blocks.produced} bytes, the frame declares {fcs}")
        content_checksum = None
        if checksum:
            pos += 4
            if pos > n:
                raise _corrupt(job, "frame checksum runs past the page")
            content_checksum = int.from_bytes(data[pos - 4 : pos], "little")
        if checksums is not None:
            checksums.append((fcs, content_checksum))
    if total > job.dst_size:
        raise _corrupt(job, f"frames declare {total} bytes, the page {job.dst_size}")
    return total


def check_job(job: Job, src_len: int, dst_len: int, src, max_bytes: int, zstd_checksums: list | None = None) -> None:
    """Reject a job that could make a GPU decoder read or write out of bounds.

    Parameters
    ----------
    job : Job
    src_len, dst_len : int
        Sizes of the batch's host buffers.
    src : memoryview
        The batch source (the job's input is read from it).
    max_bytes : int
        Largest input or output the decoder accepts.
    zstd_checksums : list, optional
        Gets each Zstd frame's ``(content_size, checksum)`` (see :func:`zstd_frames`).

    Raises
    ------
    CorruptPageError
    """
    if job.src_offset < 0 or job.src_size < 1 or job.src_offset + job.src_size > src_len:
        raise _corrupt(job, f"input [{job.src_offset}, +{job.src_size}) is outside the {src_len}-byte source")
    if job.dst_offset < 0 or job.dst_size < 1 or job.dst_offset + job.dst_size > dst_len:
        raise _corrupt(job, f"output [{job.dst_offset}, +{job.dst_size}) is outside the {dst_len}-byte destination")
    if job.src_size > max_bytes or job.dst_size > max_bytes:
        raise _corrupt(job, f"sizes {job.src_size} -> {job.dst_size} exceed the decoder's {max_bytes}")
    data = src[job.src_offset : job.src_offset + job.src_size]
    if job.algo is Algo.SNAPPY:
        declared, preamble = snappy_preamble(data, job.location)
        if declared != job.dst_size:
            raise _corrupt(job, f"snappy block declares {declared} bytes, the page {job.dst_size}")
        # The engine is given the block after its preamble: a wrong count
        # would hand it a shifted or empty stream.
        if job.preamble != preamble:
            raise _corrupt(job, f"snappy preamble is {preamble} bytes, the job says {job.preamble}")
        if preamble >= job.src_size:
            raise _corrupt(job, "snappy block holds only its length preamble")
    elif job.preamble:
        raise _corrupt(job, f"a {job.algo.value} stream has no preamble, the job says {job.preamble}")
    if job.algo is Algo.ZSTD:
        zstd_frames(data, job, zstd_checksums)
