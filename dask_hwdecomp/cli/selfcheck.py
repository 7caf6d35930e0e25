"""``hwdecomp selfcheck``: check the GPU backends against the CPU backend here.

For a Blackwell user, one command: it checks the hardware decompression
engine (and nvCOMP) on generated pages of every algorithm each decodes, at
many sizes up to near the engine's maximum length, then reads real Parquet
files written by pyarrow in every codec, comparing each with the CPU path
and pyarrow. It prints a pass/fail table and exits non-zero on any failure.
Where the engine is absent (mask 0) it says so and what it checked instead.

On the engine it also checks what the CPU comparison cannot see
(``decompress/hwengine_check.py``, in a child process): canary bytes around
every output (writes past a page's output) and size slots filled with the
right sizes then zeroed before the call (a slot the engine does not write
must not pass for a good page). For each GPU backend, a page that fails in a
batch merged from two callers must be named to its caller while the other
caller's outputs stay right.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .helpformat import add_command

__all__ = ["add_parser", "run"]

_CODECS = ("snappy", "gzip", "lz4", "zstd", "brotli")

_NOTHING_TO_CHECK = f"""
What selfcheck checks, where a GPU backend can run:
  - the hardware decompression engine (Blackwell GPUs: B200, B300, GB200, GB300)
    and nvCOMP (any NVIDIA GPU), each against the CPU backend, on generated
    pages of every algorithm it decodes (SNAPPY, DEFLATE, LZ4, ZSTD), at sizes
    from 1 byte up to the engine's maximum length;
  - Parquet files written by pyarrow in {", ".join(_CODECS)}, data pages v1
    and v2, read with that backend and compared with pyarrow's own read.
To get it checked: on a machine with an NVIDIA GPU and its driver, install
the gpu extra from a checkout (pip install -e ".[gpu]": cuda-bindings >= 13.5
and nvCOMP), run `hwdecomp info` to see that the backends are available, then
`hwdecomp selfcheck`; send its table with an issue if a line says FAIL.
"""


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "selfcheck", "check the GPU decompression backends against the CPU backend",
                    __doc__.split("\n\n")[1])
    p.add_argument("--pages", type=int, default=2000, help="generated pages per algorithm")
    p.add_argument("--rows", type=int, default=200_000, help="rows of each generated Parquet file")
    p.set_defaults(func=run)


def _pages(algo, sizes, seed: int):
    """(jobs, src, dst_len, expected) of one page per size, unaligned inputs."""
    import numpy as np

    from ..decompress.samples import compress_page, sample_payload
    from ..errors import PageLocation
    from ..format.codecs import preamble_of
    from ..format.layout import Job

    rng = np.random.default_rng(seed)
    src = bytearray()
    jobs, expected, dpos = [], [], 0
    for k, size in enumerate(sizes):
        data = sample_payload(size, rng)
        body = compress_page(algo, data)
        src += bytes(int(rng.integers(1, 40)))
        dpos += int(rng.integers(1, 40))
        jobs.append(Job(algo=algo, src_offset=len(src), src_size=len(body), dst_offset=dpos, dst_size=size, codec=0,
                        location=PageLocation(file="selfcheck", row_group=0, column=algo.value, page=k),
                        preamble=preamble_of(algo, body)))
        expected.append(data)
        src += body
        dpos += size
    return jobs, src, dpos + 8, expected


def _check_pages(backend, algo, sizes, seed) -> tuple[bool, str]:
    from ..decompress.cpu import CpuBackend

    jobs, src, dst_len, expected = _pages(algo, sizes, seed)
    sbuf, dbuf = backend.host_buffer(len(src)), backend.host_buffer(dst_len)
    try:
        sbuf.view[:] = src
        t0 = time.perf_counter()
        backend.decompress(jobs, sbuf.view, dbuf.view)
        elapsed = time.perf_counter() - t0
        gpu = bytes(dbuf.view)
    except Exception as exc:  # reported in the table, counted as a failure
        return False, f"{type(exc).__name__}: {exc}"
    finally:
        sbuf.close()
        dbuf.close()
    ref = bytearray(dst_len)
    with CpuBackend(4) as cpu:
        cpu.decompress(jobs, memoryview(bytes(src)), memoryview(ref))
    wrong = sum(
        1 for j, e in zip(jobs, expected)
        if gpu[j.dst_offset : j.dst_offset + j.dst_size] != e or ref[j.dst_offset : j.dst_offset + j.dst_size] != e
    )
    total = sum(sizes)
    if wrong:
        return False, f"{wrong} of {len(jobs)} pages differ from the CPU backend"
    return True, f"{len(jobs)} pages, {total / 1e6:.1f} MB, {total / elapsed / 1e9:.2f} GB/s"


def _check_engine_contract() -> list[tuple[str, str, bool, str]]:
    """The engine checks of ``hwengine_check`` in a child process (a fault costs only the child)."""
    cmd = [sys.executable, "-m", "dask_hwdecomp.decompress.hwengine_check"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return [("engine contract", "hardware", False, "the check did not finish within 300 s")]
    rows = []
    for line in proc.stdout.splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        rows.append((r["label"], "hardware", bool(r["ok"]), r["detail"]))
    if not rows:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        rows.append(("engine contract", "hardware", False, f"the check exited with status {proc.returncode}: {tail}"))
    return rows


def _check_merged_failure(backend) -> tuple[bool, str]:
    """Two callers at once, one with a truncated page: it is named, the other's outputs are right."""
    from ..errors import CorruptPageError
    from ..format.codecs import Algo

    algo = Algo.LZ4 if Algo.LZ4 in backend.algorithms else sorted(backend.algorithms, key=lambda a: a.value)[0]
    sizes = [4096, 65_536, 30_000, 100_000, 7_000]
    callers = [_pages(algo, sizes, seed=90), _pages(algo, sizes, seed=91)]
    bad = callers[0][0][3]
    bad.src_size //= 2
    outcome: list = [None, None]
    batches = [0]
    start = threading.Barrier(2)

    def work(i):
        jobs, src, dst_len, expected = callers[i]
        try:
            with backend.host_buffer(len(src)) as s, backend.host_buffer(dst_len) as d:
                s.view[:] = src
                # A first call each: the batcher then waits for both callers.
                backend.decompress(jobs[:1], s.view, d.view)
                start.wait()
                if i == 0:
                    batches[0] = backend.stats()["calls"]
                start.wait()
                backend.decompress(jobs, s.view, d.view)
                out = bytes(d.view)
            outcome[i] = [k for k, (j, e) in enumerate(zip(jobs, expected))
                          if out[j.dst_offset : j.dst_offset + j.dst_size] != e]
        except Exception as exc:  # judged below
            outcome[i] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    named = isinstance(outcome[0], CorruptPageError) and outcome[0].location == bad.location
    shared = "in one batch" if backend.stats()["calls"] - batches[0] == 1 else "(the callers did not share a batch)"
    if named and outcome[1] == []:
        return True, (f"the truncated {algo.value} page is named; the other caller's {len(sizes)} pages are right, "
                      + shared)
    return False, (f"caller with the truncated page got {outcome[0]!r}; "
                   f"the other caller got {outcome[1]!r} (wrong pages or error)")


def _sizes(n: int, top: int, seed: int) -> list[int]:
    import numpy as np

    rng = np.random.default_rng(seed)
    base = [1, 2, 17, 255, 4096, 65_536, 131_072, 1 << 20]
    sizes = [s for s in base if s <= top] + [max(1, top - 1), top]
    sizes += [int(x) for x in rng.integers(1, min(top, 1 << 18) + 1, size=max(0, n - len(sizes)))]
    return sizes


def _check_files(name: str, rows: int, rows_out: list) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    import dask_hwdecomp

    rng = np.random.default_rng(0)
    table = pa.table({
        "i": rng.integers(0, 1000, rows),
        "f": rng.normal(size=rows),
        "s": pa.array([f"v{x % 97}" for x in rng.integers(0, 10_000, rows)]),
    })
    with tempfile.TemporaryDirectory() as tmp:
        for codec in _CODECS:
            for version in ("1.0", "2.0"):
                path = Path(tmp) / f"{codec}-{version}.parquet"
                pq.write_table(table, path, compression=codec, data_page_version=version, data_page_size=1 << 18)
                label = f"file {codec} v{version[0]}"
                try:
                    report = dask_hwdecomp.ReadReport()
                    got = dask_hwdecomp.read_table(path, backend=name, report=report)
                    ok = got.equals(pq.read_table(path))
                    used = ", ".join(sorted({b for b, _ in report.by_backend})) or "-"
                    rows_out.append((label, name, ok, f"decompressed by {used}" + ("" if ok else "; table differs")))
                except Exception as exc:  # reported in the table, counted as a failure
                    rows_out.append((label, name, False, f"{type(exc).__name__}: {exc}"))


def run(args) -> int:
    """Run the checks and print the table; 0 when all pass."""
    from ..options import Options
    from ..routing import registry

    rows: list[tuple[str, str, bool, str]] = []
    hw_reason = registry.probe("hardware")
    nv_reason = registry.probe("nvcomp")
    print(f"hardware engine: {'available' if hw_reason is None else 'ABSENT: ' + hw_reason}")
    print(f"nvCOMP:          {'available' if nv_reason is None else 'ABSENT: ' + nv_reason}")
    names = [n for n, r in (("hardware", hw_reason), ("nvcomp", nv_reason)) if r is None]
    if hw_reason is not None:
        print("The engine path cannot be checked here; checking "
              + ("nvCOMP instead." if nv_reason is None else "nothing on the GPU."))
    if not names:
        print(_NOTHING_TO_CHECK)
        print("FAIL: no GPU backend can run here, so nothing was checked")
        return 2
    options = Options(streams=2)
    # One stream and a long wait: the two callers share one batch.
    merging = Options(streams=1, batch_latency_ms=500.0)
    if hw_reason is None:
        rows.extend(_check_engine_contract())
    for name in names:
        backend = registry.get_backend(name, options)
        top = backend.max_job_bytes or (16 << 20)
        for k, algo in enumerate(sorted(backend.algorithms, key=lambda a: a.value)):
            ok, note = _check_pages(backend, algo, _sizes(args.pages, top, k), seed=k)
            rows.append((f"pages {algo.value} (max {top})", name, ok, note))
        ok, note = _check_merged_failure(registry.get_backend(name, merging))
        rows.append(("failed page in a merged batch", name, ok, note))
        _check_files(name, args.rows, rows)
    width = max(len(r[0]) for r in rows)
    print()
    print(f"{'check':<{width}}  {'backend':<8}  result  detail")
    for label, name, ok, note in rows:
        print(f"{label:<{width}}  {name:<8}  {'PASS' if ok else 'FAIL':<6}  {note}")
    failed = sum(1 for r in rows if not r[2])
    print(f"\n{len(rows) - failed} passed, {failed} failed")
    return 1 if failed else 0
