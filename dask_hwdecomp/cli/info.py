"""``hwdecomp info``: versions, GPUs, the engine's capabilities, nvCOMP, and
which backend each codec goes to with the options in force here."""

from __future__ import annotations

import importlib
import importlib.metadata
import json

from .helpformat import add_command

__all__ = ["add_parser", "run", "collect"]


def add_parser(subparsers) -> None:
    p = add_command(subparsers, "info", "versions, GPUs and the backend chosen per codec", __doc__)
    p.add_argument(
        "--backend", default=None, choices=("auto", "hardware", "nvcomp", "cpu"), help="resolve routing for this backend option (default: the options in force here)"
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def collect(backend: str | None = None) -> dict:
    """Everything ``hwdecomp info`` shows, as a dict."""
    from ..backend_table import BACKEND_MODULES
    from ..bench.system import system_info
    from ..errors import BackendUnavailableError
    from ..options import current_options
    from ..routing import registry
    from ..routing.router import Router, pyarrow_reads, pyarrow_routes

    info = system_info()
    info["versions"]["nvidia-nvcomp-cu13"] = _version("nvidia-nvcomp-cu13")
    info["versions"]["nvidia-libnvcomp-cu13"] = _version("nvidia-libnvcomp-cu13")
    opts = current_options(**({"backend": backend} if backend else {}))
    info["options"] = opts.to_dict()
    info["backends"] = {name: registry.probe(name) or "available" for name in BACKEND_MODULES}
    # The engine's per-device capabilities, where the hardware module can tell.
    try:
        hardware = importlib.import_module("dask_hwdecomp.decompress.hardware")
        describe = getattr(hardware, "describe", None)
        info["engine"] = describe() if describe else None
    except ImportError as exc:
        info["engine"] = f"not importable: {exc}"
    try:
        info["routing"] = pyarrow_routes() if pyarrow_reads(opts) else Router(opts).describe()
    except BackendUnavailableError as exc:
        info["routing"] = f"unavailable: {exc}"
    info["services"] = _services(opts)
    return info


def _services(opts) -> dict:
    """The GPU services of this user on this node: where they listen and what they serve."""
    from ..service.launch import node_stats
    from ..service.rundir import ServiceUnreachable, service_dir

    try:
        directory = service_dir(opts.service_dir or None, create=False)
    except ServiceUnreachable as exc:
        return {"directory": None, "running": [], "problem": exc.reason}
    return {"directory": str(directory), "running": node_stats(directory)}


def _pyarrow_only(routing: dict) -> bool:
    from ..report import PYARROW_NO_GPU

    return all(names == [PYARROW_NO_GPU] for names in routing.values())


def run(args) -> int:
    """Print the report; exit 0 (1 when the requested backend cannot run)."""
    from ..bench.system import format_system
    from ..report import PYARROW_NO_GPU

    info = collect(args.backend)
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return 0 if isinstance(info["routing"], dict) else 1
    print(format_system(info))
    missing = [k for k, v in info["versions"].items() if not v]
    if missing:
        print("not installed: " + ", ".join(missing))
    print("backends:")
    for name, state in info["backends"].items():
        print(f"  {name:<9} {state}")
    if info.get("engine") is not None:
        print(f"decompression engine: {info['engine']}")
    services = info["services"]
    if services.get("problem"):
        print(f"GPU service: cannot be used: {services['problem']}")
    elif not services["running"]:
        print(f"GPU service: none running in {services['directory']} (the first GPU read starts one)")
    for s in services["running"]:
        print(f"GPU service: pid {s['service_pid']} on GPU {s['gpu']}, {s['clients']} client(s), "
              f"{s['gpu_calls']} GPU call(s) so far ({s['socket']})")
    print(f"options: backend={info['options']['backend']} decode={info['options']['decode']} cpu_threads={info['options']['cpu_threads']} "
          f"batch_bytes={info['options']['batch_bytes']} streams={info['options']['streams']}")
    if isinstance(info["routing"], dict) and _pyarrow_only(info["routing"]):
        print(f"routing: every bitstream -> {PYARROW_NO_GPU}: no GPU backend can run here, so backend=auto")
        print("  hands reads to pyarrow's own reader (as engine='pyarrow'); backend=cpu takes the page path")
        print("  (page checksums, errors naming the page)")
        return 0
    if isinstance(info["routing"], dict):
        print("routing (bitstream -> backends in order):")
        for algo, names in info["routing"].items():
            print(f"  {algo:<8} {' -> '.join(names)}")
        return 0
    print(f"routing: {info['routing']}")
    return 1
