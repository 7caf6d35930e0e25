"""The demo's workers leave distributed's report of a failed task out of their log.

A task that raises on a worker is logged there by ``distributed.worker`` at
ERROR as "Compute Failed" with its key, task, exception and traceback (some
30 lines) before the client receives the exception. The demo prints that
exception itself, as one line for broken input or with its traceback for a
bug, so the log block only repeats it in a form a user cannot act on. Only
that record is dropped, and only in the demo's own workers: every other
warning and error of distributed still reaches the terminal.

When the demo stops its cluster, a worker whose heartbeat was on its way
as the scheduler closed logs "Failed to communicate with scheduler during
heartbeat" with a traceback (seen on a loaded 2-core machine): the demo
says it is stopping the cluster, so :func:`quiet_heartbeat_failures`, run
on every worker just before, drops that record from then on.
"""

from __future__ import annotations

import logging

from distributed.diagnostics.plugin import WorkerPlugin

__all__ = ["QuietTaskFailures", "quiet_heartbeat_failures"]

# distributed's logger and message: tests/test_cli.py runs the demo on a
# corrupt file, so a distributed that words it otherwise fails there.
_LOGGER = "distributed.worker"
_MESSAGE = "Compute Failed"
_HEARTBEAT = "Failed to communicate with scheduler during heartbeat"


class _DropRecords(logging.Filter):
    """Drops the records whose message starts with ``prefix``."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


def quiet_heartbeat_failures() -> None:
    """Drop a failed heartbeat's record from this worker's log (run on the workers as the demo stops them)."""
    logging.getLogger(_LOGGER).addFilter(_DropRecords(_HEARTBEAT))


class QuietTaskFailures(WorkerPlugin):
    """A worker plugin that keeps "Compute Failed" records out of the worker's log until teardown."""

    name = "hwdecomp-demo-quiet-task-failures"

    def setup(self, worker) -> None:
        self._filter = _DropRecords(_MESSAGE)
        logging.getLogger(_LOGGER).addFilter(self._filter)

    def teardown(self, worker) -> None:
        logging.getLogger(_LOGGER).removeFilter(self._filter)
