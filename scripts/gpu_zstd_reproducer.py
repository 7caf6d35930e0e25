"""Decode a Zstd frame with nvCOMP (the node's GPU service) and with libzstd, and compare.

Usage (on the GPU machine, from the repository root, tests/ importable)::

    python scripts/gpu_zstd_reproducer.py benchmarks/results/2026-12-06-no-device/zstd-1137-frame.zst

The frame there is a mutated Parquet page that libzstd decodes without an
error; the mutation run of 2026-12-05 read other values from it through
nvCOMP. It is corrupt: one of its Huffman literal streams needs bits from
before its start, which libzstd's fast path takes from the stream below it
and nvCOMP fills with zeros (benchmarks/results/2026-12-07-h100-lz4walk/).
This prints both outputs' SHA-256 prefixes and the first differing byte,
and exits 1 where they differ.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import cramjam  # noqa: E402

from dask_hwdecomp.errors import PageLocation  # noqa: E402
from dask_hwdecomp.format.structs import Codec  # noqa: E402
from dask_hwdecomp.jobs import Algo, Job  # noqa: E402
from dask_hwdecomp.options import Options  # noqa: E402
from dask_hwdecomp.routing import registry  # noqa: E402

from pagegen import run_batch  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("frame", type=Path)
    args = ap.parse_args(argv)
    frame = args.frame.read_bytes()
    want = bytes(cramjam.zstd.decompress(frame))
    job = Job(algo=Algo.ZSTD, src_offset=0, src_size=len(frame), dst_offset=0, dst_size=len(want),
              codec=Codec.ZSTD, location=PageLocation(file=str(args.frame)))
    backend = registry.get_backend("nvcomp", Options(backend="nvcomp"))
    got = run_batch(backend, [job], frame, len(want))
    print(f"libzstd: {len(want)} bytes, sha256 {hashlib.sha256(want).hexdigest()[:16]}")
    print(f"nvCOMP ({backend.name}): {len(got)} bytes, sha256 {hashlib.sha256(got).hexdigest()[:16]}")
    if got == want:
        print("the same")
        return 0
    first = next(k for k in range(len(want)) if got[k] != want[k])
    print(f"first difference at byte {first}: libzstd {want[first]}, nvCOMP {got[first]}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
