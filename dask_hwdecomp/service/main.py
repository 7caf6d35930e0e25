"""Running a service process: ``python -m dask_hwdecomp.service``.

A reader starts one this way when it finds none (:mod:`~dask_hwdecomp.service.client`),
as a session of its own, so the service outlives the worker that started it;
``hwdecomp service run`` starts one by hand.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from .compile_watch import watch_compiles
from .rundir import ServiceAddress
from .server import Service
from .sockets import bind

__all__ = ["main", "run", "SWITCH_ENV", "switch_interval_from_env"]

# The service's thread switch interval in milliseconds (a tuning knob for
# profiling; Python's own, 5 ms, when unset). A thread of the service that
# lets the GIL go for a driver call waits up to this long to take it back
# while another thread runs Python.
SWITCH_ENV = "HWDECOMP_SWITCH_INTERVAL_MS"


def switch_interval_from_env() -> float | None:
    """The switch interval :data:`SWITCH_ENV` asks for, in seconds (None when unset).

    Raises
    ------
    ValueError
        It is set to anything but a number of milliseconds from 0.01 to 100.
    """
    text = os.environ.get(SWITCH_ENV, "").strip()
    if not text:
        return None
    try:
        ms = float(text)
    except ValueError:
        ms = -1.0
    if not 0.01 <= ms <= 100:
        raise ValueError(f"{SWITCH_ENV}={text!r}: a number of milliseconds from 0.01 to 100")
    return ms / 1e3


def run(address: ServiceAddress, idle_s: float = 2.0, persist: bool = False) -> int:
    """Listen on ``address`` and serve until idle or stopped.

    Returns
    -------
    int
        0 when it served (or another service already listens there).
    """
    listener = bind(address)
    if listener is None:
        logging.getLogger(__name__).info("a service already listens on %s", address.socket)
        return 0
    watch_compiles()
    interval = switch_interval_from_env()
    if interval is not None:
        sys.setswitchinterval(interval)
    return Service(address, listener, idle_s=idle_s, persist=persist).serve()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dask_hwdecomp.service", description=__doc__)
    p.add_argument("--socket", required=True, type=Path)
    p.add_argument("--gpu", default="none")
    p.add_argument("--backend", action="append", default=[], metavar="NAME=MODULE:FUNCTION")
    p.add_argument("--idle-s", type=float, default=2.0)
    p.add_argument("--persist", action="store_true")
    return p


def main(argv=None) -> int:
    """Entry point of a service process."""
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    factories = tuple(sorted(tuple(b.split("=", 1)) for b in args.backend))
    address = ServiceAddress(args.socket, args.gpu, factories)
    return run(address, idle_s=args.idle_s, persist=args.persist)
