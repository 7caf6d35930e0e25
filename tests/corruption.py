"""Corrupting generated pages in ways that pass the host checks (GPU tests, probes)."""

from __future__ import annotations

import numpy as np

from dask_hwdecomp.jobs import Algo

__all__ = ["corrupt", "corrupt_file", "data_pages", "lz4_reach_back", "snappy_reach_back", "MODES"]

MODES = ("noise", "bitflip", "truncate")


def varint(v: int) -> bytes:
    """``v`` as an unsigned LEB128 varint (Thrift compact, Snappy's length preamble)."""
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def lz4_reach_back(src: bytearray, start: int, size: int) -> int:
    """Point the first match of the LZ4 block ``src[start:start + size]`` one byte before the block's start.

    The damage nvCOMP 6.0 decodes with status 0 (measured on an H100) and
    the LZ4 library refuses. Returns the match's input position; raises
    ``ValueError`` for a block of literals only.
    """
    ip, end, produced = start, start + size, 0
    while ip < end:
        token = src[ip]
        ip += 1
        lit = token >> 4
        if lit == 15:
            while True:
                lit += src[ip]
                ip += 1
                if src[ip - 1] != 255:
                    break
        ip += lit
        produced += lit
        if ip >= end:
            break
        if produced + 1 < 1 << 16:
            src[ip : ip + 2] = (produced + 1).to_bytes(2, "little")
            return ip
        raise ValueError("the first match comes too late for a 16-bit offset")
    raise ValueError("a block of literals only")


def snappy_reach_back(src: bytearray, start: int, size: int) -> int:
    """Point the first copy of the raw Snappy block ``src[start:start + size]`` one byte before its start.

    The block keeps its length; Google's Snappy refuses it. Returns the
    copy's tag position; raises ``ValueError`` for a block of literals only.
    """
    ip, end, produced = start, start + size, 0
    while src[ip] & 0x80:  # the length varint
        ip += 1
    ip += 1
    while ip < end:
        tag, kind = src[ip], src[ip] & 3
        if kind == 0:
            n = (tag >> 2) + 1
            extra = n - 60 if n > 60 else 0
            if extra:
                n = int.from_bytes(src[ip + 1 : ip + 1 + extra], "little") + 1
            ip += 1 + extra + n
            produced += n
            continue
        far = produced + 1
        if kind == 1 and far < 1 << 11:
            src[ip] = (tag & 0x1F) | ((far >> 8) << 5)
            src[ip + 1] = far & 0xFF
        elif kind == 2 and far < 1 << 16:
            src[ip + 1 : ip + 3] = far.to_bytes(2, "little")
        elif kind == 3:
            src[ip + 1 : ip + 5] = far.to_bytes(4, "little")
        else:
            raise ValueError("the first copy comes too late for its offset's width")
        return ip
    raise ValueError("a block of literals only")


def corrupt(algo: Algo, mode: str, job, src: bytearray, rng: np.random.Generator) -> None:
    """Damage ``job``'s input in ``src`` in place (``job.src_size`` may shrink).

    ``noise``: valid framing (snappy preamble, zstd frame and block header)
    around random bytes; ``bitflip``: a few flipped bits past the framing;
    ``truncate``: the stream cut to two thirds.
    """
    start, n = job.src_offset, job.src_size
    if mode == "truncate":
        job.src_size = max(16, n * 2 // 3)
        return
    if mode == "bitflip":
        for k in rng.integers(min(24, n - 1), n, size=8):
            src[start + int(k)] ^= 1 << int(rng.integers(0, 8))
        return
    noise = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
    if algo is Algo.SNAPPY:
        pre = varint(job.dst_size)
        body = pre + noise[len(pre):]
    elif algo is Algo.ZSTD:
        bsize = min(n - 12, 100_000)
        head = (0xFD2FB528).to_bytes(4, "little") + bytes([0xA0]) + job.dst_size.to_bytes(4, "little")
        body = (head + (bsize << 3 | 2 << 1 | 1).to_bytes(3, "little") + noise)[: 12 + bsize]
        job.src_size = len(body)
    else:
        body = noise
    src[start : start + len(body)] = body


def data_pages(path) -> list[tuple[int, int, int, int, int]]:
    """(row group, page ordinal, body start, body size, uncompressed size) of column 0's pages of a file."""
    from pathlib import Path

    from dask_hwdecomp.errors import PageLocation
    from dask_hwdecomp.format.footer import parse_footer
    from dask_hwdecomp.format.pages import chunk_range, scan_chunk

    data = Path(path).read_bytes()
    footer = parse_footer(data, len(data), str(path))
    out = []
    for rg in range(footer.num_row_groups):
        rng = chunk_range(footer.column_chunks(rg)[0], footer.footer_offset, PageLocation())
        view = memoryview(data)[rng.start : rng.start + rng.length]
        for p in scan_chunk(view, rng, PageLocation(), max_page_bytes=1 << 30):
            out.append((rg, p.ordinal, rng.start + p.body_start, p.body_size, p.uncompressed_size))
    return out


def corrupt_file(good, out, algo: Algo, mode: str, seed: int, page: int = 3):
    """Write ``good`` to ``out`` with :func:`corrupt` applied to data page ``page`` of column 0; ``out``."""
    import types
    from pathlib import Path

    data = bytearray(Path(good).read_bytes())
    _, _, start, size, usize = data_pages(good)[page]
    corrupt(algo, mode, types.SimpleNamespace(src_offset=start, src_size=size, dst_size=usize), data,
            np.random.default_rng(seed))
    Path(out).write_bytes(bytes(data))
    return out
