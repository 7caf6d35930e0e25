"""Run the crafted frames (craft.py's crafted/ + manifest.json) and frame 1137 through nvCOMP and
say, per frame, whether nvCOMP's output equals libzstd's, the zero-fill model's, or neither.

Not run yet (written on a machine without a GPU). To run: copy this file, zstd_trace.py and the
crafted/ folder (plus mutated-frame.zst) somewhere the device run carries (e.g. shared/zstd1137/),
then from the repository root on the GPU machine:

    python shared/zstd1137/gpu_compare_crafted.py shared/zstd1137

It reuses scripts/gpu_zstd_reproducer.py's way of calling nvCOMP (one job a frame).
Hypothesis under test: nvCOMP reads zeros past a Huffman stream's start (so its output equals the
'zeros' model on every over-read frame) and reports success.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path.cwd()
sys.path.insert(0, str(ROOT / "tests"))

from dask_hwdecomp.errors import PageLocation  # noqa: E402
from dask_hwdecomp.format.structs import Codec  # noqa: E402
from dask_hwdecomp.jobs import Algo, Job  # noqa: E402
from dask_hwdecomp.options import Options  # noqa: E402
from dask_hwdecomp.routing import registry  # noqa: E402
from pagegen import run_batch  # noqa: E402


def main(folder: Path) -> int:
    sys.path.insert(0, str(folder))
    from zstd_trace import Decoder  # noqa: E402

    backend = registry.get_backend("nvcomp", Options(backend="nvcomp"))
    crafted = folder / "crafted"
    rows = json.loads((crafted / "manifest.json").read_text())
    items = [(crafted / r["file"], r["size"]) for r in rows if not r["libzstd"].startswith("refused")]
    if (folder / "mutated-frame.zst").exists():
        items.insert(0, (folder / "mutated-frame.zst", 4800))
    tally = {}
    for path, size in items:
        frame = path.read_bytes()
        zeros = Decoder(frame, verbose=False, overread="zeros").decode()
        memory = Decoder(frame, verbose=False, overread="memory").decode()  # = libzstd 1.5.7 on all crafted
        job = Job(algo=Algo.ZSTD, src_offset=0, src_size=len(frame), dst_offset=0, dst_size=size,
                  codec=Codec.ZSTD, location=PageLocation(file=str(path)))
        try:
            got = run_batch(backend, [job], frame, size)
            verdict = ("= libzstd and zeros" if got == memory == zeros else "= libzstd" if got == memory
                       else "= zeros model" if got == zeros else "neither")
        except Exception as e:  # noqa: BLE001
            got, verdict = b"", f"error {type(e).__name__}"
        kind = path.name.split("-l")[-1].split("-", 1)[-1].replace(".zst", "") if "crafted" in str(path) else "1137"
        tally.setdefault((kind.split("-s")[0], verdict), 0)
        tally[(kind.split("-s")[0], verdict)] += 1
        print(f"{path.name:45s} nvCOMP {hashlib.sha256(got).hexdigest()[:16]} {verdict}")
    for k, v in sorted(tally.items()):
        print(v, k)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
