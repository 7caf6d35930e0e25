"""The node's GPU service as many processes share it, without a GPU (CI).

Real service processes on real sockets: merging across worker processes,
who may attach, what a hostile message gets, a killed service, a service
that cannot be reached, and ``hwdecomp service``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dask_hwdecomp.format.codecs import Algo
from dask_hwdecomp.options import Options
from dask_hwdecomp.report import ReadReport
from dask_hwdecomp.routing import registry
from dask_hwdecomp.routing.router import Router
from dask_hwdecomp.service import rundir, wire
from dask_hwdecomp.service.client import ServiceClient
from dask_hwdecomp.service.rundir import ServiceUnreachable, address_for
from dask_hwdecomp.service.server import Service
from dask_hwdecomp.service.sockets import bind, peer_of

from helpers import assert_tables_equal, until
from pagegen import assert_outputs, make_batch, run_batch
from service_backends import open_backend

OPTS = Options(streams=1, batch_latency_ms=1.0, batch_bytes=8 << 20, cpu_threads=2)
ENGINE_ALGOS = (Algo.SNAPPY, Algo.DEFLATE, Algo.LZ4)

_WORKER = textwrap.dedent("""
    import sys
    from dask_hwdecomp.options import Options
    from pagegen import make_batch, run_concurrently
    from service_backends import open_backend
    from dask_hwdecomp.format.codecs import Algo

    directory, first = sys.argv[1], int(sys.argv[2])
    opts = Options(streams=1, batch_latency_ms=1.0, batch_bytes=8 << 20, cpu_threads=2)
    algos = (Algo.SNAPPY, Algo.DEFLATE, Algo.LZ4)
    with open_backend("standin_merging_8x30", opts, service_dir=directory) as b:
        run_concurrently(b, [make_batch(algos, [3000 + 17 * t] * 30, seed=10 + t) for t in range(first, first + 4)])
""")


def test_two_worker_processes_share_one_service_and_their_pages_are_merged(service_dir):
    # Two processes of four threads each, one part of 30 pages per thread,
    # one stream whose first call is held until all 8 parts are in it or
    # queued: merged across processes they take 1 or 2 calls; a service per
    # process, or no merging, would take 8.
    with open_backend("standin_merging_8x30", OPTS, service_dir) as b:
        pid = b.pid
        workers = [subprocess.Popen([sys.executable, "-c", _WORKER, service_dir, str(first)])
                   for first in (0, 4)]
        assert [w.wait(timeout=120) for w in workers] == [0, 0]
        stats = b.stats()
        assert b.pid == pid
    assert stats["parts"] == 8 and 1 <= stats["calls"] <= 2, stats
    assert stats["connections"] == 3 and stats["hosted_backends"] == 1, stats


@pytest.fixture
def served(service_dir):
    """A service run in this process (its credential check is the one under test)."""
    started = []

    def start(allowed_uid=None, factory="cpu"):
        address = address_for({"test": f"service_backends:{factory}"}, service_dir, gpu="none")
        service = Service(address, bind(address), persist=True, allowed_uid=allowed_uid)
        thread = threading.Thread(target=service.serve, daemon=True)
        thread.start()
        started.append((service, thread))
        return service, OPTS.replace(service_dir=service_dir)

    yield start
    for service, thread in started:
        service.stop("test over")
        thread.join(30)


def test_another_user_cannot_attach_and_is_logged(served, caplog):
    # The kernel's peer credentials name this test's uid; the service is told
    # only uid + 1 may attach, as a service of another user would be.
    service, opts = served(allowed_uid=os.getuid() + 1)
    with caplog.at_level("WARNING", logger="dask_hwdecomp.service"):
        with pytest.raises(ServiceUnreachable, match=f"uid {os.getuid()} may not attach"):
            ServiceClient("test", opts, factories={"test": "service_backends:cpu"}, gpu="none",
                           startup_timeout_s=10)
    assert service.counters.refused == 1 and service.stats()["clients"] == 0
    assert f"refused a connection from pid {os.getpid()} of uid {os.getuid()}" in caplog.text


def _raw(service, opts) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(str(service.address.socket))
    wire.send(sock, wire.Attach("test", opts.to_dict(), os.getpid()))
    hello, _, _ = wire.receive(sock)
    assert isinstance(hello, wire.Hello) and hello.name == "cpu"
    return sock


def _frame(body: bytes, blob: bytes = b"", nfds: int = 0) -> bytes:
    return wire._HEADER.pack(len(body), len(blob), nfds) + body + blob


def test_messages_that_fail_validation_are_refused_logged_and_never_run(served, caplog):
    service, opts = served()
    sock = _raw(service, opts)
    with caplog.at_level("WARNING", logger="dask_hwdecomp.service"):
        cases = [
            (_frame(b"not json"), "is not JSON"),
            (_frame(b'{"kind": "Exec", "code": "import os"}'), "unknown message kind 'Exec'"),
            (_frame(b'{"kind": "Forget", "seg_id": 1, "extra": 2}'), "Forget has fields"),
            (_frame(b'{"kind": "Forget", "seg_id": true}'), "Forget.seg_id is a boolean"),
            (_frame(b'{"kind": "Drop", "kept": ["1"]}'), "Drop.kept holds other than integers"),
            (_frame(b'{"kind": "Drop", "kept": [1, true]}'), "Drop.kept holds other than integers"),
            (_frame(b'{"kind": "Hello", "name": "x", "algorithms": [], "max_job_bytes": 1, '
                    b'"overwrites_gaps": false, "service_pid": 1}'), "a client may not send Hello"),
        ]
        for frame, said in cases:
            sock.sendall(frame)
            reply, _, _ = wire.receive(sock)
            assert isinstance(reply, wire.Refused) and said in reply.reason, (said, reply)
        # A run naming a segment never shared, then one whose job writes past its buffer.
        with tempfile.TemporaryFile() as f:
            f.truncate(1 << 16)
            wire.send(sock, wire.Share(1, 1 << 16), fds=[os.dup(f.fileno())])
        jobs, src, dst_len, _ = make_batch([Algo.SNAPPY], [3000] * 2, seed=1)
        blob = wire.pack_jobs(jobs)
        wire.send(sock, wire.Run(7, 9, 0, len(src), 1, 0, dst_len, 2, 0, False), blob)
        reply, _, _ = wire.receive(sock)
        assert isinstance(reply, wire.Refused) and "names segment 9, which was not shared" in reply.reason
        end = max(j.dst_offset + j.dst_size for j in jobs)
        wire.send(sock, wire.Run(8, 1, 0, len(src), 1, 0, end - 1, 2, 0, False), blob)
        reply, _, _ = wire.receive(sock)
        assert isinstance(reply, wire.Refused) and "job 1 has an output range outside" in reply.reason
        wire.send(sock, wire.Run(9, 1, 0, len(src), 1, 0, dst_len, 3, 0, False), blob)
        reply, _, _ = wire.receive(sock)
        assert isinstance(reply, wire.Refused) and "carried" in reply.reason
        assert service.counters.runs == 0  # nothing reached the backend
        # A frame out of bounds: refused, and the connection is closed.
        sock.sendall(wire._HEADER.pack(wire.MAX_JSON_BYTES + 1, 0, 0))
        reply, _, _ = wire.receive(sock)
        assert isinstance(reply, wire.Refused) and "out of bounds" in reply.reason
        with pytest.raises(EOFError):
            wire.receive(sock)
    sock.close()
    assert caplog.text.count("refused a message") == 11


def _until_gone(b, timeout_s: float = 30.0) -> None:
    """Wait until ``b``'s connection has seen its service go."""
    until(lambda: b.pid is None, "the connection did not see its service go", timeout_s)


def test_a_killed_service_is_started_again_and_the_next_read_succeeds(service_dir):
    with open_backend("standin", OPTS, service_dir) as b:
        jobs, src, dst_len, expected = make_batch(ENGINE_ALGOS, [5000] * 20, seed=6)
        assert_outputs(run_batch(b, jobs, src, dst_len), jobs, expected)
        first = b.pid
        os.kill(first, signal.SIGKILL)
        _until_gone(b)  # killed between batches: the next one goes to a fresh service
        assert_outputs(run_batch(b, jobs, src, dst_len), jobs, expected)
        second = b.pid
        assert second not in (None, first)
        stats = b.stats()
    assert stats["restarts"] == 1 and stats["service_pid"] == second


def test_a_service_killed_on_one_gpu_leaves_the_other_gpus_reads_untouched(service_dir):
    # Two GPUs, a service each (named by the GPU, started with CUDA_VISIBLE_DEVICES set to it).
    gpus = ("GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-0000-0000-0000-000000000000")
    with open_backend("standin", OPTS, service_dir, gpu=gpus[0]) as a, \
            open_backend("standin", OPTS, service_dir, gpu=gpus[1]) as b:
        batches = [make_batch(ENGINE_ALGOS, [5000] * 20, seed=20 + k) for k in range(6)]
        for jobs, src, dst_len, expected in batches[:2]:
            assert_outputs(run_batch(a, jobs, src, dst_len), jobs, expected)
            assert_outputs(run_batch(b, jobs, src, dst_len), jobs, expected)
        assert a.pid != b.pid and a.address.socket != b.address.socket
        spared = b.pid
        os.kill(a.pid, signal.SIGKILL)
        for jobs, src, dst_len, expected in batches[2:]:  # the other GPU's service reads on, untouched
            assert_outputs(run_batch(b, jobs, src, dst_len), jobs, expected)
        _until_gone(a)
        jobs, src, dst_len, expected = batches[0]
        assert_outputs(run_batch(a, jobs, src, dst_len), jobs, expected)  # a fresh service for the first GPU
        assert b.pid == spared and b.stats()["restarts"] == 0 and a.stats()["restarts"] == 1


def test_the_service_outlives_the_process_that_started_it(service_dir):
    with open_backend("cpu", OPTS, service_dir) as b:
        code = ("import sys; from service_backends import open_backend; from dask_hwdecomp.options import Options;"
                "b = open_backend('cpu', Options(streams=1, batch_latency_ms=1.0, batch_bytes=8 << 20, cpu_threads=2),"
                " service_dir=sys.argv[1]); print(b.pid); b.close()")
        # The service already runs (this process started it); a second process attaches and leaves.
        out = subprocess.run([sys.executable, "-c", code, service_dir], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert int(out.stdout) == b.pid
        jobs, src, dst_len, expected = make_batch([Algo.SNAPPY, Algo.ZSTD], [4000] * 10, seed=3)
        assert_outputs(run_batch(b, jobs, src, dst_len), jobs, expected)


def test_a_reader_that_cannot_reach_the_service_reads_on_the_cpu_and_says_so(tmp_path, monkeypatch, matrix_source):
    # A node whose GPU probes fine but whose service directory is unusable
    # (here a file): backend="auto" reads on the CPU, and the report says why.
    from dask_hwdecomp import read_table

    path = tmp_path / "data.parquet"
    pq.write_table(matrix_source, path, compression="snappy")
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    monkeypatch.setattr(registry, "_probes", {"nvcomp": None, "hardware": "no engine on this node (test)"})
    report = ReadReport()
    got = read_table(str(path), backend="auto", service_dir=str(blocked), report=report)
    assert_tables_equal(got, pq.read_table(path))
    assert "nvcomp" in report.unreachable and "not-a-directory" in report.unreachable["nvcomp"]
    assert report.backends == {"SNAPPY": ["cpu"]}
    assert "read on cpu: GPU backend nvcomp could not be used" in report.summary()
    registry.close_all()


def test_a_service_lost_mid_read_that_cannot_start_again_leaves_the_cpu_to_read(service_dir):
    from dask_hwdecomp.decompress.cpu import CpuBackend

    with open_backend("standin", OPTS.replace(backend="auto"), service_dir) as b, CpuBackend(2) as cpu:
        router = Router.over(OPTS.replace(backend="auto"),
                             {a: ([b] if a in b.algorithms else []) + [cpu] for a in Algo})
        jobs, src, dst_len, expected = make_batch(ENGINE_ALGOS, [5000] * 12, seed=8)
        pid = b.pid
        os.kill(pid, signal.SIGKILL)
        _until_gone(b)
        b.address.socket.unlink(missing_ok=True)
        b.address.socket.mkdir()  # the next service cannot take the socket: it exits at start
        report = ReadReport()
        with b.host_buffer(len(src)) as s, b.host_buffer(dst_len) as d:
            s.view[:] = src
            router.run(jobs, s.view, d.view, report)
            assert_outputs(bytes(d.view), jobs, expected)
    assert "exited with status 1 at start" in report.unreachable["hardware"], report.unreachable
    assert {b for b, _ in report.by_backend} == {"cpu"}


def test_hwdecomp_service_status_and_stop(service_dir):
    env = {**os.environ, "HWDECOMP_SERVICE_DIR": service_dir}
    with open_backend("cpu", OPTS, service_dir) as b:
        out = subprocess.run([sys.executable, "-m", "dask_hwdecomp", "service", "status", "--json"],
                             env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        (entry,) = json.loads(out.stdout)
        assert entry["service_pid"] == b.pid and entry["clients"] == 1 and entry["gpu"] == "none"
        pid = b.pid
        out = subprocess.run([sys.executable, "-m", "dask_hwdecomp", "service", "stop"],
                             env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and "stopped" in out.stdout, out
        jobs, src, dst_len, expected = make_batch([Algo.SNAPPY], [4000] * 4, seed=2)
        assert_outputs(run_batch(b, jobs, src, dst_len), jobs, expected)  # a fresh service serves it
        assert b.pid != pid
    out = subprocess.run([sys.executable, "-m", "dask_hwdecomp", "service", "status"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0


def test_service_directory_open_to_others_is_refused(tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o755)
    open_dir.chmod(0o755)
    with pytest.raises(ServiceUnreachable, match="mode 755"):
        rundir.service_dir(str(open_dir))
    made = rundir.service_dir(str(tmp_path / "made"))
    assert made.stat().st_mode & 0o777 == 0o700
    link = tmp_path / "link"
    link.symlink_to(made)
    with pytest.raises(ServiceUnreachable, match="not a directory"):
        rundir.service_dir(str(link))
    assert Path(made).is_dir()


def test_a_backend_the_service_cannot_create_leaves_the_cpu_to_read_under_auto(tmp_path, monkeypatch,
                                                                              matrix_source, service_dir):
    # The service starts, but creating the backend fails (the driver finds no
    # device): auto reads on the CPU and says why; a named backend raises.
    # (decode="auto": with decode="cpu", auto would read zstd through pyarrow
    # and never reach the service.)
    from dask_hwdecomp import read_table
    from dask_hwdecomp.errors import BackendUnavailableError

    path = tmp_path / "data.parquet"
    pq.write_table(matrix_source, path, compression="zstd")
    monkeypatch.setattr(registry, "_probes", {"nvcomp": None, "hardware": "no engine on this node (test)"})

    def open_no_device(name, options):
        if name == "cpu":
            from dask_hwdecomp.decompress.cpu import CpuBackend

            return CpuBackend(options.cpu_threads)
        return open_backend("no_device", options, service_dir)

    monkeypatch.setattr(registry, "get_backend", open_no_device)
    report = ReadReport()
    got = read_table(str(path), backend="auto", decode="auto", report=report)
    assert_tables_equal(got, pq.read_table(path))
    assert "CUDA_ERROR_NO_DEVICE" in report.unreachable["nvcomp"], report.unreachable
    assert report.backends == {"ZSTD": ["cpu"]}
    with pytest.raises(BackendUnavailableError, match="CUDA_ERROR_NO_DEVICE"):
        read_table(str(path), backend="nvcomp")


_READER = textwrap.dedent("""
    import sys
    from dask_hwdecomp.options import Options
    from service_backends import open_backend
    b = open_backend("cpu", Options(streams=1, batch_latency_ms=1.0, batch_bytes=8 << 20, cpu_threads=2),
                     service_dir=sys.argv[1])
    print(b.pid)
    sys.stdin.read()  # attached until the test lets go
    b.close()
""")


def test_readers_that_start_together_start_one_service(service_dir):
    # Six processes find no service at once: one starts it, the others wait
    # for it to listen (no service process is started only to exit again).
    readers = [subprocess.Popen([sys.executable, "-c", _READER, service_dir], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True) for _ in range(6)]
    try:
        pids = {int(r.stdout.readline()) for r in readers}
    finally:
        for r in readers:
            r.communicate("", timeout=120)
    assert len(pids) == 1
    (log,) = Path(service_dir).glob("*.log")
    text = log.read_text()
    assert text.count(" listening on ") == 1 and "already listens" not in text, text


def test_a_reader_that_takes_the_start_lock_late_connects_to_the_service_already_listening(service_dir,
                                                                                           monkeypatch):
    # The race of readers that start together, made certain: this reader
    # finds no service, and before it takes the start lock another reader
    # has started one, connected and let go of the lock. It connects to that
    # service rather than starting a second one that only exits again.
    from dask_hwdecomp.service import launch

    address = address_for({"test": "service_backends:cpu"}, service_dir, gpu="none")
    first = launch.connect(address, timeout_s=60)  # the other reader: started it, let go of the lock
    real_attempt, real_start = launch._attempt_connect, launch.start_service
    attempts, starts = [], []

    def attempt(addr):
        attempts.append(addr)
        return None if len(attempts) == 1 else real_attempt(addr)  # looked just before it listened

    def start(addr):
        starts.append(addr)
        return real_start(addr)

    monkeypatch.setattr(launch, "_attempt_connect", attempt)
    monkeypatch.setattr(launch, "start_service", start)
    try:
        second = launch.connect(address, timeout_s=60)
        assert peer_of(second).pid == peer_of(first).pid
        second.close()
    finally:
        first.close()
    assert starts == [] and len(attempts) == 2
    # A reader connects as soon as the service's socket listens, a moment before the service logs that it does.
    until(lambda: address.log.exists() and " listening on " in address.log.read_text(),
          "the service logs that it listens")
    text = address.log.read_text()
    assert text.count(" listening on ") == 1 and "already listens" not in text, text


def test_hwdecomp_info_names_the_running_service(service_dir):
    env = {**os.environ, "HWDECOMP_SERVICE_DIR": service_dir}
    with open_backend("cpu", OPTS, service_dir) as b:
        out = subprocess.run([sys.executable, "-m", "dask_hwdecomp", "info"], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert f"GPU service: pid {b.pid} on GPU none, 1 client(s)" in out.stdout, out.stdout
    missing = os.path.join(service_dir, "not-made")
    out = subprocess.run([sys.executable, "-m", "dask_hwdecomp", "info"], capture_output=True, text=True,
                         env={**os.environ, "HWDECOMP_SERVICE_DIR": missing}, timeout=120)
    assert f"GPU service: none running in {missing}" in out.stdout and not os.path.exists(missing)


def test_readers_with_and_without_the_zstd_stream_walk_get_backends_of_their_own(service_dir):
    # zstd_stream_walk is a backend option: a reader that turns it off must
    # not share a backend made with it (nor the other way round).
    with open_backend("cpu", OPTS.replace(zstd_stream_walk=False), service_dir) as plain, \
            open_backend("cpu", OPTS, service_dir) as walking:
        assert plain.pid == walking.pid
        run_batch(plain, *make_batch(ENGINE_ALGOS, [3000] * 4, seed=3)[:3])
        run_batch(walking, *make_batch(ENGINE_ALGOS, [3000] * 4, seed=4)[:3])
        stats = walking.stats()
    assert stats["connections"] == 2 and stats["hosted_backends"] == 2, stats
