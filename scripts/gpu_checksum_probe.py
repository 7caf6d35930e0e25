"""Does nvCOMP verify Zstd content checksums, and what do the batch's CRC-32s cost?

Run on the GPU machine (in process: a fresh interpreter per run)::

    python scripts/gpu_checksum_probe.py [--pages 1024] [--repeats 5]

1. Zstd frames with the content checksum flag go to nvCOMP with our host
   check switched off (``verifies_zstd_checksum = True`` on the launcher):
   a frame whose stored checksum is wrong, and a frame of raw blocks with a
   content byte flipped. nvCOMP's per-page status says whether it checks.
2. The checksum cost, decompression alone (``bench.decompression.checksum_cost``):
   GB/s with no checksum, the default ones (gzip CRC-32) and
   ``verify_checksums`` (page CRC-32 too), interleaved.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from dask_hwdecomp.bench.decompression import checksum_cost  # noqa: E402
from dask_hwdecomp.bench.pages import compress_pages  # noqa: E402
from dask_hwdecomp.decompress import nvcomp  # noqa: E402
from dask_hwdecomp.errors import PageLocation  # noqa: E402
from dask_hwdecomp.format.xxh64 import xxh64, zstd_with_checksum  # noqa: E402
from dask_hwdecomp.jobs import Algo, Job  # noqa: E402
from dask_hwdecomp.options import Options  # noqa: E402

import checksum_cases as cc  # noqa: E402


def _run(backend, frame: bytes, size: int) -> str:
    src = backend.host_buffer(len(frame))
    dst = backend.host_buffer(size)
    try:
        src.view[: len(frame)] = frame
        job = Job(Algo.ZSTD, 0, len(frame), 0, size, 6, PageLocation("probe", 0, "c", 0))
        backend.decompress([job], src.view, dst.view)
        return "no error (decoded; checksum not verified)"
    except Exception as exc:  # the answer we are after
        return f"{type(exc).__name__}: {exc}"
    finally:
        src.close()
        dst.close()


def zstd_probe() -> dict:
    import cramjam

    out = {}
    content = (np.arange(200_000, dtype=np.int32) % 977).tobytes()
    good = zstd_with_checksum(bytes(cramjam.zstd.compress(content)), content)
    wrong_sum = good[:-4] + struct.pack("<I", (xxh64(content) ^ 0x1) & 0xFFFFFFFF)
    raw = cc.raw_zstd_frame(content[:60_000])
    flipped = bytearray(raw)
    flipped[100] ^= 0xFF
    with nvcomp.create(Options(backend="nvcomp", streams=1)) as b:
        out["our host check, stored checksum wrong"] = _run(b, wrong_sum, len(content))
        b._launcher.verifies_zstd_checksum = True  # nvCOMP alone from here
        out["nvcomp alone, valid checksummed frame"] = _run(b, good, len(content))
        out["nvcomp alone, stored checksum wrong"] = _run(b, wrong_sum, len(content))
        out["nvcomp alone, raw-block content byte flipped"] = _run(b, bytes(flipped), 60_000)
    return out


def cost(pages: int, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    plain = [(rng.integers(0, 50, 1 << 18, dtype=np.int32)).tobytes() for _ in range(pages)]  # 1 MiB pages
    sets = {c: compress_pages(c, plain) for c in ("gzip", "snappy", "zstd")}
    return checksum_cost({"nvcomp": lambda **kw: nvcomp.create(Options(backend="nvcomp", **kw))}, sets, repeats)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(json.dumps(zstd_probe(), indent=1), flush=True)
    res = cost(args.pages, args.repeats)
    for label, per in res.items():
        for codec, fig in per.items():
            if "error" in fig:
                print(label, codec, fig["error"])
                continue
            med = {k: v["gbps"]["median"] for k, v in fig.items()}
            print(f"{label} {codec}: GB/s none {med['none']:.2f}, default {med['default']:.2f} "
                  f"({100 * (1 - med['default'] / med['none']):+.1f}% cost), verify {med['verify']:.2f} "
                  f"({100 * (1 - med['verify'] / med['none']):+.1f}% cost)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
