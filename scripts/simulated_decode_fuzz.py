"""Mutated uncompressed files through the GPU decoder's kernels, under numba's CUDA simulator.

Usage (any machine, no GPU; from the repository root)::

    python scripts/simulated_decode_fuzz.py --first 0 --last 600

Seeds: a table of every GPU output kind written uncompressed (page v1 and
v2, dictionary on and off). Each case is a seed broken by one of
``tests/fuzzing.py``'s mutators and read by ``read_table`` with every
batch's GPU-decodable columns decoded by the real kernels in this process
(``decode_host`` under the simulator, where an out-of-bounds index raises
instead of corrupting memory). A case must end in one of the project's
exceptions or in pyarrow's table; the script prints one line per case and
exits 1 on any other outcome (a foreign exception, rows where pyarrow
refuses, another table, a case over ``--timeout``).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import traceback
from pathlib import Path

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from dask_hwdecomp import CorruptPageError, HwdecompError, read_table  # noqa: E402
from dask_hwdecomp.gpudecode.assemble import assemble  # noqa: E402
from dask_hwdecomp.gpudecode.plan import plan_file  # noqa: E402
from dask_hwdecomp.gpudecode.runner import decode_host  # noqa: E402
from dask_hwdecomp.readpath.batch import use_column_decoder  # noqa: E402

import checksum_cases as cc  # noqa: E402
from fuzzing import MUTATORS, file_map  # noqa: E402


def simulated_decoder(images, options, report) -> None:
    """Decode each image's GPU columns with the kernels in this process; a page error is its CorruptPageError."""
    for image in images:
        buf = np.frombuffer(image.buffer, np.uint8)
        plan = plan_file(buf, path=image.plan.piece.path)
        if not len(plan.chunks):
            continue
        done = decode_host(plan.gather(buf), plan.chunks, plan.pages)
        bad = np.flatnonzero(done.pages["error"])
        if len(bad):
            raise CorruptPageError(f"the GPU decoder found it invalid (error {int(done.pages['error'][bad[0]])})",
                                   plan.page_location(int(bad[0])))
        image.decoded.update(assemble(done.out, done.out, done.chunks, plan)[0])


def seeds(work: Path) -> list:
    table = cc.table(300)
    out = []
    for version in ("1.0", "2.0"):
        for dictionary in (True, False):
            p = work / f"none-v{version[0]}-{'dict' if dictionary else 'plain'}.parquet"
            pq.write_table(table, p, compression="none", data_page_version=version, use_dictionary=dictionary,
                           row_group_size=150, data_page_size=500)
            out.append((p, file_map(p)))
    return out


def _alarm(signum, frame):
    raise TimeoutError("case over its time")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--last", type=int, default=200)
    ap.add_argument("--timeout", type=int, default=60, help="seconds per case before it counts as a hang")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="hwd-simfuzz-"))
    maps = seeds(work)
    names = sorted(n for n in MUTATORS if "codec" not in n)  # the files hold no compressed page
    signal.signal(signal.SIGALRM, _alarm)
    failed = 0
    for i in range(args.first, args.last):
        path, fm = maps[i % len(maps)]
        mutator = names[(i // len(maps)) % len(names)]
        case = work / f"case{i}.parquet"
        case.write_bytes(MUTATORS[mutator](fm, random.Random(i)))
        label = f"{mutator}:{path.name}:{i}"
        signal.alarm(args.timeout)
        try:
            with use_column_decoder(simulated_decoder, always=True):
                got = read_table(str(case), backend="cpu")
            signal.alarm(0)
            try:
                verdict = "ok-equal" if got.equals(pq.read_table(case)) else "FAIL-different-table"
            except Exception as exc:  # pyarrow refuses it: rows are wrong
                verdict = f"FAIL-rows-where-pyarrow-refuses ({type(exc).__name__}: {exc})"
        except HwdecompError as exc:
            verdict = f"ok-our-error {type(exc).__name__}"
        except Exception as exc:  # a foreign exception, or the alarm
            where = [f"{Path(f.filename).name}:{f.lineno}" for f in traceback.extract_tb(exc.__traceback__)[-3:]]
            verdict = f"FAIL-{type(exc).__name__}: {str(exc)[:160]} at {where}"
        finally:
            signal.alarm(0)
        failed += verdict.startswith("FAIL")
        print(label, verdict, flush=True)
    print(f"{args.last - args.first} cases, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
