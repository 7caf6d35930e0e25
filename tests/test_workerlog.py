"""The demo's workers: what their logs leave out, and what they keep."""

from __future__ import annotations

import logging

from dask_hwdecomp.cli import workerlog


def _logged(caplog, logger: logging.Logger, message: str) -> bool:
    caplog.clear()
    try:
        raise OSError("Stream is closed")
    except OSError:
        logger.error(message, exc_info=True)
    return any(r.getMessage().startswith(message.split(":")[0]) for r in caplog.records)


def test_a_failed_heartbeat_as_the_demo_stops_is_dropped_and_other_errors_stay(caplog):
    logger = logging.getLogger("distributed.worker")
    caplog.set_level(logging.ERROR, logger="distributed.worker")
    heartbeat = "Failed to communicate with scheduler during heartbeat."
    assert _logged(caplog, logger, heartbeat)  # before: distributed's record, traceback and all
    workerlog.quiet_heartbeat_failures()
    try:
        assert not _logged(caplog, logger, heartbeat)
        assert _logged(caplog, logger, "Compute Failed: something else")
        assert _logged(caplog, logger, "a worker error the user must see")
    finally:
        for f in [f for f in logger.filters if isinstance(f, workerlog._DropRecords) and f.prefix == workerlog._HEARTBEAT]:
            logger.removeFilter(f)
