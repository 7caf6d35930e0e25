"""``hwdecomp service``: the node's GPU service, by hand.

Readers start the service themselves and it exits once its last client has
left; ``run`` keeps one in the foreground (``--persist``: even without
clients), ``status`` lists the services of this user and what they serve,
``stop`` asks them to finish their batches and exit.

``run`` refuses (one line, exit 2) where no GPU backend can run: the service
would have nothing to serve. A service over other backends, such as the
tests' CPU stand-ins, runs through the service's own entry point,
``python -m dask_hwdecomp.service --socket PATH --backend NAME=MODULE:FUNCTION``.
"""

from __future__ import annotations

import argparse
import json
import math
import os

from .errors import UsageError
from .helpformat import add_command

__all__ = ["add_parser", "run"]


def _seconds(text: str) -> float:
    """Seconds as argparse's type: a finite number >= 0 (``-1``, ``nan``, ``inf`` are refused).

    Raises
    ------
    argparse.ArgumentTypeError
        Not a finite number of seconds >= 0.
    """
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds >= 0")
    return value


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "service", "run, list or stop this node's GPU service", __doc__)
    p.add_argument("action", choices=("run", "status", "stop"))
    p.add_argument("--persist", action="store_true", help="run: keep serving when no client is attached")
    p.add_argument("--idle-s", type=_seconds, default=2.0, help="run: exit this long after the last client left")
    p.add_argument("--json", action="store_true", help="status: print JSON")
    p.add_argument("--timeout-s", type=_seconds, default=60.0, help="stop: longest wait for a service to exit")
    p.set_defaults(func=run)


def _check_gpu_backends(names) -> None:
    """Refuse to start a service that none of the GPU backends ``names`` could serve from.

    Raises
    ------
    UsageError
        Every backend's probe says why it cannot run here.
    """
    from ..routing import registry

    reasons = {name: registry.probe(name) for name in sorted(names)}
    if all(reason is not None for reason in reasons.values()):
        why = "; ".join(f"{name}: {reason}" for name, reason in reasons.items())
        raise UsageError(f"no GPU backend can run here ({why}), so a GPU service would serve nothing "
                         "(python -m dask_hwdecomp.service runs one over other backends)")


def run(args) -> int:
    """Run, list or stop the services; returns the exit status.

    Raises
    ------
    UsageError
        ``run`` where no GPU backend can run.
    """
    from ..options import current_options
    from ..service import wire
    from ..service.client import GPU_FACTORIES
    from ..service.launch import node_stats, query, service_command, wait_for_exit
    from ..service.rundir import ServiceUnreachable, address_for, service_dir

    opts = current_options()
    if args.action == "run":
        _check_gpu_backends(GPU_FACTORIES)
        address = address_for(GPU_FACTORIES, opts.service_dir or None)
        cmd, env = service_command(address, idle_s=args.idle_s, persist=args.persist)
        print(f"hwdecomp service: GPU {address.gpu}, listening on {address.socket}", flush=True)
        os.execvpe(cmd[0], cmd, env)  # a fresh interpreter that sees only this GPU
    directory = service_dir(opts.service_dir or None)
    found = node_stats(directory)
    if args.action == "stop":
        for entry in found:
            try:
                query(entry["socket"], wire.Stop("hwdecomp service stop"))
            except (ServiceUnreachable, OSError):
                entry["stopped"] = False
            else:  # it finishes its runs first: wait until it is gone
                entry["stopped"] = wait_for_exit(int(entry["service_pid"]), args.timeout_s)
    if args.json:
        print(json.dumps(found, indent=2))
    elif not found:
        print(f"no GPU service runs in {directory}")
    for entry in found if not args.json else ():
        if args.action == "stop":
            print(f"{'stopped' if entry['stopped'] else 'could not stop'} pid {entry['service_pid']} "
                  f"({entry['socket']})")
        else:
            print(f"pid {entry.get('service_pid')} GPU {entry.get('gpu')}: {entry.get('clients')} client(s), "
                  f"{entry.get('hosted_backends')} backend(s), {entry.get('runs')} run(s), "
                  f"{entry.get('gpu_calls')} GPU call(s) of {entry.get('gpu_pages')} page(s), "
                  f"{entry.get('refused')} refused ({entry['socket']})")
    return 0 if all(entry.get("stopped", True) for entry in found) else 1
