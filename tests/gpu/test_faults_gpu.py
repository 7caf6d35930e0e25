"""What a corrupt page costs on the GPU, and whom: the targets of the faults work, on nvCOMP.

Measured against the default ``gpu_timeout_s`` (a minute): a corrupt page
read alone must be named within 2 s whatever nvCOMP does with it (a
status, an illegal address that ends the service, a hang); 15 good files
read beside a corrupt one must all come back right; a SIGKILL of the
service under 16 reading threads must end every read right and leave no
shared segment outside a pool. ``benchmarks/faults_h200.py`` measures the
same at scale on a cluster, with the figures.
"""

from __future__ import annotations

import gc
import os
import signal
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dask_hwdecomp
from dask_hwdecomp.errors import CorruptPageError
from dask_hwdecomp.jobs import Algo
from dask_hwdecomp.options import Options
from dask_hwdecomp.routing import registry
from dask_hwdecomp.service.launch import node_stats
from dask_hwdecomp.service.rundir import service_dir

from corruption import corrupt_file
from helpers import assert_tables_equal

pytestmark = pytest.mark.gpu



def _good(path, seed: int = 11, rows: int = 200_000):
    rng = np.random.default_rng(seed)
    pq.write_table(pa.table({"v": rng.integers(0, 40, rows), "w": rng.integers(0, 9, rows)}), path,
                   compression=path.stem.split("-")[0], use_dictionary=False, data_page_size=48 << 10)
    return path


# Seeds whose damage the CPU names (flipped bits in Zstd literals can decode silently).
@pytest.mark.parametrize("codec,algo,mode,seed", [
    ("zstd", Algo.ZSTD, "bitflip", 8),  # hung the GPU for 63 to 75 s before the deadline rule
    ("zstd", Algo.ZSTD, "noise", 7),  # nvCOMP 6.0: illegal address
    ("snappy", Algo.SNAPPY, "noise", 7),  # illegal address
    ("snappy", Algo.SNAPPY, "bitflip", 7),
    ("lz4", Algo.LZ4, "noise", 7),
    ("gzip", Algo.DEFLATE, "bitflip", 7),
], ids=lambda v: getattr(v, "value", str(v)))
def test_corrupt_page_read_alone_is_named_by_its_requests_deadline(nvcomp_available, tmp_path, codec, algo, mode, seed,
                                                                   record_property):
    good = _good(tmp_path / f"{codec}-good.parquet")
    assert_tables_equal(dask_hwdecomp.read_table(good, backend="nvcomp"), pq.read_table(good))  # warm
    bad = corrupt_file(good, tmp_path / f"{codec}-bad.parquet", algo, mode, seed)
    with pytest.raises(CorruptPageError) as on_cpu:
        dask_hwdecomp.read_table(bad, backend="cpu")
    t0 = time.monotonic()
    with pytest.raises(CorruptPageError) as on_gpu:
        dask_hwdecomp.read_table(bad, backend="nvcomp")
    took = time.monotonic() - t0
    print(f"{codec} {mode} {seed}: the error after {took:.2f} s: {on_gpu.value}")
    assert on_gpu.value.location == on_cpu.value.location, str(on_gpu.value)
    assert "(gpu_timeout_s)" not in str(on_gpu.value), "found by the minute's bound, not the request's deadline"
    # The seconds are a figure (benchmarks/faults_h200.py reports them against the target), not a test's verdict.
    record_property("seconds_to_error", round(took, 3))
    t0 = time.monotonic()
    assert_tables_equal(dask_hwdecomp.read_table(good, backend="nvcomp"), pq.read_table(good))
    print(f"{codec} {mode} {seed}: the next read {time.monotonic() - t0:.2f} s")


def _read_all(paths, results: dict, rounds: int = 1, **options) -> list[threading.Thread]:
    """A thread per path reading it ``rounds`` times; ``results[path]`` lists the tables or exceptions."""
    def read(path):
        for _ in range(rounds):
            try:
                got = dask_hwdecomp.read_table(path, backend="nvcomp", **options)
            except Exception as exc:  # inspected by the test
                got = exc
            results.setdefault(path, []).append(got)

    threads = [threading.Thread(target=read, args=(p,)) for p in paths]
    for t in threads:
        t.start()
    return threads


def test_corrupt_file_among_15_good_ones_read_at_once_costs_them_nothing_wrong(nvcomp_available, tmp_path):
    good = [_good(tmp_path / f"zstd-{i:02d}.parquet", seed=100 + i, rows=1_000_000) for i in range(15)]
    template = _good(tmp_path / "zstd-template.parquet")
    bad = corrupt_file(template, tmp_path / "zstd-bad.parquet", Algo.ZSTD, "bitflip", 8)
    for path in good:  # warm
        dask_hwdecomp.read_table(path, backend="nvcomp")
    results: dict = {}
    for t in _read_all([*good, bad], results):
        t.join(120)
    (on_bad,) = results[bad]
    assert isinstance(on_bad, CorruptPageError) and on_bad.location.page == 3, on_bad
    for path in good:
        (got,) = results[path]
        assert not isinstance(got, BaseException), (path, got)
        assert_tables_equal(got, pq.read_table(path))
    stats = registry.get_backend("nvcomp", Options(backend="nvcomp")).stats()
    print(f"beside the corrupt file: {on_bad}; client counters: "
          f"{ {k: stats[k] for k in ('restarts', 'recoveries', 'retried', 'timeouts')} }")


def _service_backends() -> list:
    return [b for b in list(registry._open.values()) if hasattr(b, "pid")]


def _segments_outside_pools() -> int:
    """Shared segments open in this process that no open backend's pool holds (idle or lent)."""
    gc.collect()
    names = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/memfd:hwdecomp-"):
            names.add(target.split()[0])  # the segment's own descriptor and its mapping's
    held = sum(b.stats()["pinned_idle_blocks"] + len(b.pool._lent) for b in _service_backends())
    return len(names) - held


def test_service_sigkilled_under_16_reading_threads_every_read_ends_right(nvcomp_available, tmp_path):
    paths = [_good(tmp_path / f"snappy-{i:02d}.parquet", seed=200 + i, rows=1_000_000) for i in range(16)]
    for path in paths:  # warm
        dask_hwdecomp.read_table(path, backend="nvcomp")
    outside = _segments_outside_pools()
    results: dict = {}
    threads = _read_all(paths, results, rounds=6)
    killed = None
    deadline = time.monotonic() + 60
    while killed is None and time.monotonic() < deadline and any(t.is_alive() for t in threads):
        for entry in node_stats(service_dir(None)):
            if entry.get("taken_run_bytes", 0) > 0:
                killed = entry["service_pid"]
                os.kill(killed, signal.SIGKILL)
                break
    for t in threads:
        t.join(180)
    assert killed is not None, "no request was seen in the service"
    for path in paths:
        assert len(results[path]) == 6
        for got in results[path]:
            assert not isinstance(got, BaseException), (path, got)
            assert_tables_equal(got, pq.read_table(path))
    stats = [b.stats() for b in _service_backends()]
    assert sum(s["restarts"] for s in stats) >= 1 and stats[0]["taken_run_bytes"] == 0, stats
    assert _segments_outside_pools() <= outside  # none lost by the reads or their recovery
    print(f"SIGKILL of service {killed} under 16 threads: counters "
          f"{[{k: s[k] for k in ('restarts', 'recoveries', 'retried', 'timeouts')} for s in stats]}")


# Cases of the mutation run (scripts/gpu_mutation_run.py, 1,500 cases on an
# H100 with nvCOMP 6.0), by the seed each mutated: Zstd pages relabelled LZ4
# and LZ4_RAW, LZ4 and gzip pages relabelled otherwise, and 936, which is
# alltypes_plain.snappy.parquet with its codec "changed" to the one it had.
# On a warm service 936 came back wrong in two of three rounds.
_NEIGHBOURS = {926: "lz4-v1-dict.parquet", 927: "lz4-v1-plain.parquet", 928: "lz4-v2-dict.parquet",
               929: "lz4-v2-plain.parquet", 930: "zstd-v1-dict.parquet", 931: "zstd-v1-plain.parquet",
               932: "zstd-v2-dict.parquet", 933: "zstd-v2-plain.parquet", 934: "gzip-members.parquet",
               935: "zstd-checksummed-v1.parquet", 936: "alltypes_plain.snappy.parquet",
               937: "byte_stream_split.zstd.parquet", 938: "byte_stream_split_extended.gzip.parquet",
               939: "concatenated_gzip_members.parquet"}
_INNOCENT = 936


@pytest.mark.parametrize("decode", ["cpu", "gpu"])
def test_an_unmutated_file_read_beside_the_mutation_runs_relabelled_pages_is_read_right(
        nvcomp_available, tmp_path, decode, record_property):
    from mutation_seeds import mutant_of, seed_maps

    from fuzzing import Harness

    maps = seed_maps(tmp_path)
    cases = [mutant_of(maps, seed, "wrong_codec_everywhere", i) for i, seed in _NEIGHBOURS.items()]
    innocent = f"wrong_codec_everywhere:{_NEIGHBOURS[_INNOCENT]}:{_INNOCENT}"
    options = {"gpu_timeout_s": 60.0, "decode": decode}
    harnesses = [Harness(tmp_path / f"w{w}", timeout=60.0, memory_limit=0) for w in range(4)]
    for h in harnesses:
        h.workdir.mkdir()
    verdicts: dict = {}
    lock = threading.Lock()

    def work(w: int) -> None:
        h = harnesses[w]
        h.run(maps[0][0].read_bytes(), "warm-up", backend="nvcomp", options=options)
        for _ in range(4):  # rounds on a warm service, as the run's second and third
            for k in range(w, len(cases), len(harnesses)):
                label, data = cases[k]
                verdict = h.run(data, label, backend="nvcomp", options=options)
                with lock:
                    verdicts.setdefault(label, []).append(verdict)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(len(harnesses))]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        # while the harnesses are attached (the service leaves with its last client)
        overruns = {k: v for e in node_stats(service_dir(None)) for k, v in e.items() if "guard_overruns" in k}
    finally:
        for h in harnesses:
            h.close()
    record_property("guard_overruns", overruns)
    print(f"guard overruns in the service: {overruns}")
    assert verdicts[innocent] == ["ok-equal"] * 4, verdicts[innocent]
    failed = {label: v for label, v in verdicts.items() if any(x.startswith("FAIL") for x in v)}
    assert not failed, failed
