"""Readers of Parquet files through a test GPU service: threads of this process, or of another.

:func:`registry_on` makes the registry's ``"hardware"`` backend a
:class:`~dask_hwdecomp.service.client.ServiceClient` of a service hosting
a stand-in of ``service_backends`` in a given directory (``nvcomp`` is not
there); :func:`read_in_threads` reads files with ``read_table`` from several
threads at once, compares every table with pyarrow's and says what
happened. Run as a script, it does the same in a process of its own (where
a dask worker would read), between a line ``reading`` and a line of JSON::

    python service_readers.py DIRECTORY FACTORY THREADS ROUNDS PATH...
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections.abc import Iterator

import pyarrow.parquet as pq

from dask_hwdecomp import read_table
from dask_hwdecomp.report import PYARROW_CHOSEN, ReadReport
from dask_hwdecomp.routing import registry

from service_backends import open_backend

# How the readers' service batches: two streams, little latency, and calls
# small enough for the busy stand-in to run one within the deadline's floor.
# A max_batch_bytes of their own, a limit only the page path enforces, keeps
# every file there: with decode="cpu" and the defaults, auto would give the
# files of the codecs pyarrow reads faster to pyarrow's own read, and they
# would never reach the service.
READ_OPTIONS = {"backend": "auto", "decode": "cpu", "max_batch_bytes": 1 << 30, "streams": 2, "batch_latency_ms": 1.0,
                "batch_bytes": 256 << 10, "cpu_threads": 2}
GPU_CODECS = {"SNAPPY", "GZIP", "LZ4_RAW", "LZ4"}


def shared_segments() -> set[str]:
    """This process's open shared-memory segments (memfds of the shared pool), ``"<fd> <target>"``."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("/memfd:hwdecomp-"):
            out.add(f"{fd} {target}")
    return out


@contextlib.contextmanager
def registry_on(directory: str, factory: str) -> Iterator[dict]:
    """The registry's ``"hardware"`` backend opened on ``factory``'s service in ``directory``; closed after.

    Yields the backends opened, by name.
    """
    opened: dict = {}
    lock = threading.Lock()
    saved = registry.probe, registry.get_backend
    real_get_backend = registry.get_backend

    def get_backend(name, options):
        if name == "cpu":
            return real_get_backend(name, options)
        with lock:
            if name not in opened:
                opened[name] = open_backend(factory, options, directory)
            return opened[name]

    registry.probe = lambda name: None if name in ("hardware", "cpu") else "not on this machine (test)"
    registry.get_backend = get_backend
    try:
        yield opened
    finally:
        registry.probe, registry.get_backend = saved
        for b in opened.values():
            b.close()


def read_in_threads(paths: list[str], threads: int, rounds: int) -> dict:
    """Read every path ``rounds`` times from each of ``threads`` threads started together.

    Returns
    -------
    dict
        ``reads``; ``wrong`` (tables unlike pyarrow's), ``errors`` (what a
        read raised), ``unreported`` (reads whose GPU codecs the CPU
        decompressed without the report saying why, or that pyarrow read
        and so never reached the service), each a list of strings.
    """
    expected = {p: pq.read_table(p) for p in paths}
    out: dict = {"reads": 0, "wrong": [], "errors": [], "unreported": []}
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def reader(k: int) -> None:
        start.wait()
        for _ in range(rounds):
            for i in range(len(paths)):
                path = paths[(i + k) % len(paths)]
                report = ReadReport()
                try:
                    got = read_table(path, report=report, **READ_OPTIONS)
                except Exception as exc:  # what the test asserts on
                    with lock:
                        out["errors"].append(f"{path}: {type(exc).__name__}: {exc}")
                    continue
                on_cpu = {c for b, c in report.by_backend if b == "cpu"} & GPU_CODECS
                bypassed = any(b == PYARROW_CHOSEN for b, _ in report.by_backend)
                with lock:
                    out["reads"] += 1
                    if not got.equals(expected[path]):
                        out["wrong"].append(path)
                    if bypassed or on_cpu and not (report.unreachable or report.retries):
                        out["unreported"].append(f"{path}: {report.summary()}")

    workers = [threading.Thread(target=reader, args=(k,)) for k in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return out


def main(argv: list[str]) -> int:
    directory, factory, threads, rounds, *paths = argv
    before = shared_segments()
    with registry_on(directory, factory) as opened:
        read_table(paths[0], **READ_OPTIONS)  # attached: the test may act once this line is out
        print("reading", flush=True)
        summary = read_in_threads(paths, int(threads), int(rounds))
        stats = opened["hardware"].stats()
    summary.update({k: stats[k] for k in ("restarts", "recoveries", "cpu_kept", "retried", "timeouts")})
    summary["segments_left"] = sorted(shared_segments() - before)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    # What the tests read is the line above, with the backends closed. The
    # interpreter's teardown is left out: right after a scan, pyarrow's own
    # worker threads can abort it ("terminate called without an active
    # exception", an open Arrow bug that pyarrow's own reads hit too), which
    # once failed a fresh clone's CI run here.
    os._exit(code)
