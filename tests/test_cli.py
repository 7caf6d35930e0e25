"""The ``hwdecomp`` command line as a user meets it: exact demo figures, one-line errors, ``--version``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dask_hwdecomp
from dask_hwdecomp.cli.demo import make_sample
from dask_hwdecomp.cli.main import main
from dask_hwdecomp.decompress import registry

ROOT = Path(__file__).resolve().parents[1]


def _hwdecomp(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m dask_hwdecomp ARGS`` with this checkout first on the path."""
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "dask_hwdecomp", *args], capture_output=True, text=True, timeout=timeout, env=full
    )


def _pages_in(directory: Path) -> dict:
    """``{codec: pages}`` of every file, read one by one in this process."""
    report = dask_hwdecomp.ReadReport()
    for path in sorted(directory.glob("*.parquet")):
        dask_hwdecomp.read_table(str(path), backend="cpu", report=report)
    out: dict = {}
    for (_, codec), stats in report.by_backend.items():
        out[codec] = out.get(codec, 0) + stats.pages
    return out


@pytest.mark.distributed
def test_demo_reports_every_page_and_removes_its_sample(tmp_path):
    # The sample is deterministic (seeded): the same arguments make the same files here.
    rows, files = 48_000, 6
    truth = _pages_in(make_sample(tmp_path / "truth", rows, files, "snappy", progress=False))
    assert truth["SNAPPY"] > files
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = _hwdecomp(
        "demo", "--rows", str(rows), "--files", str(files), "--workers", "3", "--backend", "cpu",
        env={"TMPDIR": str(scratch)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = dict(re.findall(r"^backend\s+(\w+): cpu \((\d+) pages\)$", done.stdout, re.M))
    assert {k: int(v) for k, v in got.items()} == truth, done.stdout
    assert re.search(rf"^rows\s+{rows:,}$", done.stdout, re.M), done.stdout
    assert re.search(rf"^files\s+{files}$", done.stdout, re.M), done.stdout
    assert "equals pyarrow     yes" in done.stdout
    # where each column was decoded, and why not on the GPU (backend=cpu: none in use)
    assert re.search(r"^decoded on\s+pyarrow: 16 columns, \d+ chunks", done.stdout, re.M), done.stdout
    assert re.search(r"^  all 16 columns decoded on pyarrow: .*\(not on the GPU: no GPU backend in use\)$",
                     done.stdout, re.M), done.stdout
    # every step says what it is doing: the cluster's start and stop have a line
    assert "starting LocalCluster" in done.stderr and "stopping the cluster" in done.stderr
    assert list(scratch.iterdir()) == [], "the demo left its sample behind"


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"hwdecomp {dask_hwdecomp.__version__}"


def test_demo_bad_path_is_one_line(tmp_path, capsys):
    code = main(["demo", str(tmp_path / "absent.parquet")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == f"hwdecomp demo: no Parquet file or directory at {str(tmp_path / 'absent.parquet')!r}"


@pytest.mark.skipif(registry.probe("nvcomp") is None, reason="nvCOMP runs here: the backend is not refused")
def test_demo_backend_absent_is_one_line_and_fast():
    done = _hwdecomp("demo", "--backend", "nvcomp", timeout=60)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("hwdecomp demo: backend 'nvcomp' cannot run here: ") and "--backend auto or cpu" in line


@pytest.mark.distributed
def test_demo_on_a_corrupt_file_is_one_line(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "broken.parquet"
    pq.write_table(pa.table({"x": list(range(1000))}), path)
    data = bytearray(path.read_bytes())
    data[-12:-8] = (10**8).to_bytes(4, "little")  # a footer length past the file
    path.write_bytes(bytes(data))
    done = _hwdecomp("demo", str(path), "--workers", "1", timeout=120)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("hwdecomp demo: ") and "broken.parquet" in last, done.stderr[-3000:]


@pytest.mark.skipif(
    registry.probe("nvcomp") is None or registry.probe("hardware") is None,
    reason="a GPU backend runs here: selfcheck checks it",
)
def test_selfcheck_without_gpu_says_what_and_how():
    done = _hwdecomp("selfcheck", timeout=120)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    out = done.stdout
    assert "What selfcheck checks" in out
    for word in ("SNAPPY", "DEFLATE", "LZ4", "ZSTD", "brotli", "v1", "v2"):
        assert word in out
    assert 'pip install "dask-hwdecomp[gpu]"' in out and "hwdecomp selfcheck" in out
    assert out.strip().endswith("FAIL: no GPU backend can run here, so nothing was checked")


@pytest.mark.parametrize(
    "argv",
    [["demo", "--rows", "0"], ["demo", "--codec", "lzo"], ["info", "--backend", "bogus"], ["bench", "--size", "lots"]],
)
def test_bad_arguments_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith(f"hwdecomp {argv[0]}: error: ")


def test_bench_page_parts_without_a_table_say_what_to_give(capsys):
    # The decompression-alone parts cut pages from a generated table; without
    # one the run used to end in a StopIteration traceback.
    assert main(["bench", "--datasets", "", "--parts", "checksums", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--datasets" in err and "Traceback" not in err
