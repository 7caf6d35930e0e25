"""Reports of reads run by dask's processes scheduler, back to the block.

Under ``scheduler="processes"`` a read runs in a worker process that holds
no :func:`~dask_hwdecomp.report.collect_reports` block. While a block is
open, this process keeps a spool directory and names it in the environment
variable :data:`ENV`, which the scheduler's worker processes (started by
each compute) inherit. A worker process with no block of its own writes
each read's report there (:func:`send`), before the task's result goes
back; when a block closes, the reports spooled so far go to it and to the
blocks around it (:func:`sweep`).

What this cannot tell apart: two threads of one process that compute with
the processes scheduler at the same time, each inside its own block; the
block that closes first takes the reports of both. A process pool created
before the block opened (``dask.config.set(pool=...)``) does not see the
spool: its reads are not gathered. ``distributed`` workers report through
the dashboard's metrics instead, never here.
"""

from __future__ import annotations

import os
import pickle
import shutil
import sys
import tempfile
import threading
import uuid

__all__ = ["ENV", "open_block", "close_block", "send", "sweep"]

# "<pid of the process holding blocks>:<spool directory>". Not HWDECOMP_*:
# that prefix is reserved for options.
ENV = "_HWDECOMP_REPORT_SPOOL"

_lock = threading.Lock()
_blocks = 0
_directory: str | None = None


def open_block() -> None:
    """A block opened: make the spool if it is the first."""
    global _blocks, _directory
    with _lock:
        _blocks += 1
        if _blocks > 1:
            return
        _directory = tempfile.mkdtemp(prefix="hwdecomp-reports-")
        os.environ[ENV] = f"{os.getpid()}:{_directory}"


def close_block() -> None:
    """A block closed: drop the spool if it was the last."""
    global _blocks, _directory
    with _lock:
        _blocks -= 1
        if _blocks > 0:
            return
        if os.environ.get(ENV, "").endswith(f":{_directory}"):
            del os.environ[ENV]
        if _directory is not None:
            shutil.rmtree(_directory, ignore_errors=True)
        _directory = None


def _in_distributed_task() -> bool:
    if "distributed" not in sys.modules:
        return False
    from distributed.worker import get_worker

    try:
        get_worker()
    except ValueError:
        return False
    return True


def send(report) -> bool:
    """In a processes-scheduler worker, write ``report`` to the spool; True if written.

    False (and nothing written) in the process that holds the blocks, where
    no spool is named, inside a ``distributed`` task, or when the write
    fails (the read itself never fails for its report).
    """
    value = os.environ.get(ENV)
    if not value:
        return False
    owner, _, directory = value.partition(":")
    if owner == str(os.getpid()) or _in_distributed_task():
        return False
    name = f"{os.getpid()}-{uuid.uuid4().hex}.report"
    tmp = os.path.join(directory, "." + name)
    try:
        with open(tmp, "wb") as f:
            pickle.dump(report, f)
        os.replace(tmp, os.path.join(directory, name))  # whole files only
    except OSError:
        return False
    return True


def sweep() -> list:
    """Take every report the worker processes have written so far (oldest first)."""
    with _lock:
        directory = _directory
        if directory is None:
            return []
        try:
            names = os.listdir(directory)
        except OSError:
            return []
        reports = []
        for name in sorted(names, key=lambda n: _mtime(os.path.join(directory, n))):
            if name.startswith("."):
                continue  # still being written
            path = os.path.join(directory, name)
            try:
                with open(path, "rb") as f:
                    reports.append(pickle.load(f))
                os.remove(path)
            except (OSError, pickle.UnpicklingError, EOFError):
                continue
        return reports


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0
