"""``HwdecompPlugin``: per-worker decompression state with an explicit life.

Registered on a cluster, it opens the worker's backends in ``setup`` (so the
first read does not pay for CUDA context creation, pinned pools and nvCOMP
loading) and closes them in ``teardown``. Without it, backends are opened
on a worker's first read and closed when the process exits.

Examples
--------
>>> from distributed import Client, LocalCluster  # doctest: +SKIP
>>> client = Client(LocalCluster(n_workers=2))  # doctest: +SKIP
>>> client.register_plugin(HwdecompPlugin(backend="auto"))  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from ..options import current_options
from ..report import ReadReport
from ..routing import registry
from ..routing.router import Router, pyarrow_reads, pyarrow_routes

__all__ = ["HwdecompPlugin"]

logger = logging.getLogger(__name__)


class HwdecompPlugin(WorkerPlugin):
    """Open a worker's backends at start, close them at shutdown.

    While registered it also adds up the report of every
    ``dd.read_parquet(engine=hwdecomp)`` partition read on its worker
    (:attr:`totals`), which
    :func:`~dask_hwdecomp.engine.metrics.cluster_report` gathers exactly.

    Parameters
    ----------
    **options
        :class:`~dask_hwdecomp.options.Options` fields, resolved on each
        worker (its ``HWDECOMP_*`` environment applies underneath).
    """

    name = "hwdecomp"

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.backends: dict = {}
        self.totals = ReadReport()
        self._lock: threading.Lock | None = None  # made on the worker: locks do not pickle

    def _guard(self) -> threading.Lock:
        if self._lock is None:
            raise RuntimeError("HwdecompPlugin is not set up on a worker")
        return self._lock

    def add(self, report: ReadReport) -> None:
        """Add a finished read's report to this worker's totals (tasks run in threads)."""
        with self._guard():
            self.totals += report

    def take_totals(self, reset: bool = False) -> ReadReport:
        """A copy of this worker's totals; with ``reset``, start again from zero."""
        import copy

        with self._guard():
            out = copy.deepcopy(self.totals)
            if reset:
                self.totals = ReadReport()
        return out

    def setup(self, worker):
        """Open the backends the routing table picks on this worker.

        Raises
        ------
        BackendUnavailableError
            The requested backend cannot run on this worker.
        """
        # Import the read path now so that the first task is not charged
        # for it (dask.dataframe takes seconds to import).
        import dask.dataframe.io.parquet.arrow  # noqa: F401

        from . import arrow  # noqa: F401

        self._lock = threading.Lock()
        self.totals = ReadReport()
        opts = current_options(**self.options)
        if pyarrow_reads(opts):
            self.backends = pyarrow_routes()  # nothing to open: pyarrow reads
        else:
            router = Router(opts)  # opens every usable backend, raises if absent
            self.backends = router.describe()
            for name, why in router.unreachable.items():
                logger.warning("hwdecomp on %s: GPU backend %s cannot be used, the CPU reads instead: %s",
                               worker.address, name, why)
        worker.extensions.setdefault("hwdecomp", self)
        logger.info("hwdecomp backends on %s: %s", worker.address, self.backends)

    def teardown(self, worker):
        """Close every backend this process opened."""
        registry.close_all()
        worker.extensions.pop("hwdecomp", None)
