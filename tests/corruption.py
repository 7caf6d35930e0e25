"""Corrupting generated pages in ways that pass the host checks (GPU tests, probes)."""

from __future__ import annotations

import numpy as np

from dask_hwdecomp.jobs import Algo

__all__ = ["corrupt", "corrupt_file", "data_pages", "MODES"]

MODES = ("noise", "bitflip", "truncate")


def varint(v: int) -> bytes:
    """``v`` as an unsigned LEB128 varint (Thrift compact, Snappy's length preamble)."""
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


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
