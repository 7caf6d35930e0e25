"""Backends a GPU service hosts in the CI tests of the isolation (no GPU).

Each is a ``function(options)`` the service process imports by name
(``service_backends:standin``): the real CPU backend, or the real GPU
backend code over the engine stand-in (``standin_hwengine.StandinHwEngine``),
with the faults nvCOMP was seen to have on corrupt pages.

A service without a GPU grants its requests no rate, only ``gpu_timeout_s``
(:mod:`dask_hwdecomp.service.deadline`); the factories that test the
deadline rule declare one (``deadline_bytes_per_s``). A service is another
process: it tells a test what it saw through a file the test names in
``$HWDECOMP_TEST_EVENTS`` (:func:`note`, :func:`events`), and learns how
many parts to merge from ``$HWDECOMP_TEST_MERGE``.
:func:`open_backend` attaches to a service hosting one of them, in a
directory from :func:`service_directory` (the ``service_dir`` fixture),
which stops its services and removes it afterwards.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

from dask_hwdecomp.decompress.cpu import CpuBackend
from dask_hwdecomp.decompress.hardware import create_with
from dask_hwdecomp.gpu.errors import CudaError
from dask_hwdecomp.service.deadline import GPU_BYTES_PER_S

from standin_hwengine import StandinHwEngine, hold_first_call, hold_until_queued

# What a test's service directory is called in the temporary directory;
# conftest fails the run if one is left behind.
SERVICE_DIR_PREFIX = "hwd-"

EVENTS_ENV = "HWDECOMP_TEST_EVENTS"
MERGE_ENV = "HWDECOMP_TEST_MERGE"
# The rate the merged-fault stand-ins grant: the rule of a GPU scaled down to
# a Python engine on a loaded CI machine, so that a task of 30 pages (about
# 120 KB in and out) is given about two seconds more than one of 2 pages.
SLOW_BYTES_PER_S = 64 << 10
# How fast the busy stand-in works; it grants an eighth of it, as a GPU service does.
BUSY_BYTES_PER_S = 4 << 20


def note(event: str) -> None:
    """Append ``event`` to the test's events file, if it named one (in the service process)."""
    path = os.environ.get(EVENTS_ENV)
    if path:
        with open(path, "a") as f:
            f.write(event + "\n")


def events(path) -> list[str]:
    """The events a service noted in ``path`` so far."""
    try:
        return Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []


def open_backend(factory: str, options, service_dir: str, gpu: str = "none", **kw):
    """A ServiceClient of a service hosting ``factory`` (a function here), listening in ``service_dir``.

    ``gpu``: the GPU the service is named for (a service per GPU; without a
    GPU the name is all that differs).

    Backends opened in the same directory with the same factory share one
    service; a directory of its own per test keeps tests apart.
    """
    from dask_hwdecomp.service.client import ServiceClient

    return ServiceClient("test", options.replace(service_dir=service_dir),
                          factories={"test": f"service_backends:{factory}"}, gpu=gpu,
                          **{"cap_bytes": 64 << 20, **kw})


@contextlib.contextmanager
def service_directory() -> Iterator[str]:
    """A fresh service directory, removed afterwards once every service in it has exited.

    It lies directly in the temporary directory, not in pytest's
    ``tmp_path``: a socket path must fit in 107 bytes, and a service's
    (``<dir>/<20 hex digits>.sock``) under ``tmp_path`` of a long test name
    and an xdist worker comes close. A service outlives its last client by
    a moment (``idle_s``) and takes its lock file in the directory to remove
    its socket: the directory is removed only once its services are gone.
    """
    with tempfile.TemporaryDirectory(prefix=SERVICE_DIR_PREFIX) as directory:
        try:
            yield directory
        finally:
            stop_services(directory)


def stop_services(directory: str, timeout_s: float = 30.0) -> None:
    """Stop every service process listening in ``directory`` and wait until each has exited.

    Each listening one is told to ``Stop`` (as ``hwdecomp service stop``
    does); every process started for a socket there, listening or not (one
    leaving on its own, one starting), is waited for, and killed if it is
    still there after ``timeout_s``.

    Raises
    ------
    AssertionError
        A service was still running after it was killed.
    """
    from dask_hwdecomp.service import wire
    from dask_hwdecomp.service.launch import node_stats, query, wait_for_exit
    from dask_hwdecomp.service.rundir import ServiceUnreachable

    for entry in node_stats(directory):
        with contextlib.suppress(ServiceUnreachable, OSError):
            query(entry["socket"], wire.Stop("the test is over"))
    survivors = []
    for pid in _service_pids(directory):
        if not wait_for_exit(pid, timeout_s):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if not wait_for_exit(pid, 10.0):
                survivors.append(pid)
    assert not survivors, f"services {survivors} of {directory} still run after SIGKILL"


def _service_pids(directory: str) -> list[int]:
    """The processes whose command line names a ``--socket`` in ``directory`` (from /proc)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        sockets = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == b"--socket"]
        if any(os.path.dirname(os.fsdecode(sock)) == directory for sock in sockets):
            pids.append(int(proc.name))
    return pids


def cpu(options):
    return CpuBackend(options.cpu_threads)


def standin(options):
    return create_with(StandinHwEngine(), options)


def standin_merging_8x30(options):
    # The first engine call waits until 8 callers' parts of 30 pages are in it
    # or queued behind it (standin_hwengine.hold_first_call).
    engine = StandinHwEngine()
    backend = create_with(engine, options)
    hold_first_call(engine, backend, callers=8, pages_per_caller=30)
    return backend


def standin_dies(options):
    return create_with(StandinHwEngine(fault="die"), options)


def standin_hangs(options):
    return create_with(StandinHwEngine(fault="hang"), options)


def standin_illegal_address(options):
    return create_with(StandinHwEngine(fault="illegal_address"), options)


def standin_broken_device(options):
    return create_with(StandinHwEngine(fault="die", fault_on="every call"), options)


def no_device(options):
    raise CudaError("CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected (while initialising the CUDA driver)",
                    code=100, name="CUDA_ERROR_NO_DEVICE")


def standin_illegal_address_every_call(options):
    return create_with(StandinHwEngine(fault="illegal_address", fault_on="every call"), options)


def standin_fails_7777(options):
    # The engine fails every operation of 7777 output bytes (the CPU decodes them).
    return create_with(StandinHwEngine(fail_if=lambda rec: rec["dst_num_bytes"] == 7777), options)


def standin_hangs_at_gpu_rate(options):
    # Granted what a GPU service grants: a hung call is found after a second.
    backend = create_with(StandinHwEngine(fault="hang"), options)
    backend.deadline_bytes_per_s = GPU_BYTES_PER_S
    return backend


def _faults_merged(options, fault: str):
    # The first call waits until $HWDECOMP_TEST_MERGE parts are queued, so the
    # corrupt page's call holds every task's pages; only in the test's first
    # service (the retries on the fresh one must not wait for a merge).
    engine = StandinHwEngine(fault=fault, on_fault=lambda ops: note(f"fault {len(ops)}"))
    backend = create_with(engine, options)
    backend.deadline_bytes_per_s = SLOW_BYTES_PER_S
    if "held" not in events(os.environ[EVENTS_ENV]):
        hold_until_queued(backend, int(os.environ[MERGE_ENV]), on_hold=lambda: note("held"))
    return backend


def standin_hangs_merged(options):
    return _faults_merged(options, "hang")


def standin_dies_merged(options):
    return _faults_merged(options, "die")


def standin_illegal_address_merged(options):
    return _faults_merged(options, "illegal_address")


def standin_busy(options):
    # Every call takes its bytes at BUSY_BYTES_PER_S (a busy GPU); it grants an eighth.
    backend = create_with(StandinHwEngine(busy_bytes_per_s=BUSY_BYTES_PER_S), options)
    backend.deadline_bytes_per_s = BUSY_BYTES_PER_S // 8
    return backend


def standin_decoder_hangs(options):
    # Decoding never returns, as on a GPU whose kernel hangs; granted a GPU's rate.
    import threading

    from dask_hwdecomp.gpudecode.hosted import HostedDecoder

    HostedDecoder.decode = lambda self, request: threading.Event().wait()
    backend = create_with(StandinHwEngine(), options)
    backend.deadline_bytes_per_s = GPU_BYTES_PER_S
    return backend
