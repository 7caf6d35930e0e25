"""The ``hwdecomp`` command line as a user meets it: exact demo figures, one-line errors, ``--version``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dask_hwdecomp
from dask_hwdecomp.backend_table import GPU_BACKENDS
from dask_hwdecomp.cli.demo import make_sample
from dask_hwdecomp.cli.main import main
from dask_hwdecomp.routing import registry

ROOT = Path(__file__).resolve().parents[1]
_NO_GPU_BACKEND = all(registry.probe(name) is not None for name in GPU_BACKENDS)


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
    # where each column was decoded, and why not on the GPU: without --decode
    # the demo reads as the library does by default (decode='auto'), here
    # with backend 'cpu', so no GPU backend decompresses
    assert dask_hwdecomp.Options().decode == "auto"
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
    assert 'pip install -e ".[gpu]"' in out and "hwdecomp selfcheck" in out
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


def _subcommands() -> dict:
    from dask_hwdecomp.cli.main import build_parser

    (sub,) = [a for a in build_parser()._actions if a.choices and "demo" in a.choices]
    return dict(sub.choices)


@pytest.mark.parametrize("command", ["demo", "bench", "service", "info", "selfcheck"])
def test_help_shows_every_default_once(command):
    # Every option that takes a value says its default, and only once
    # (argparse's "(default: X)" used to follow a hand-written one).
    parser = _subcommands()[command]
    text = " ".join(parser.format_help().split())
    valued = [a for a in parser._actions
              if a.nargs != 0 and (a.option_strings or a.nargs == "?")]
    assert text.count("(default") == len(valued), text
    assert "(default: None)" not in text and not re.search(r"\(default[^)]*\) \(default", text), text


def test_demo_defaults_are_the_libraries():
    from dataclasses import fields

    from dask_hwdecomp.options import Options

    library = {f.name: f.default for f in fields(Options)}
    text = " ".join(_subcommands()["demo"].format_help().split())
    for name in ("backend", "decode"):
        assert f"(default: ${'HWDECOMP_' + name.upper()}, else {library[name]})" in text, text


@pytest.mark.parametrize("option", [["--codec", "zstd"], ["--rows", "10"], ["--files", "2"]])
def test_demo_sample_options_with_a_path_are_refused(tmp_path, option, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "given.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), path)
    assert main(["demo", str(path), *option]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line == (f"hwdecomp demo: {option[0]} is for the sample the demo writes without PATH; "
                    f"{str(path)!r} is read as it is"), line
    assert captured.out == ""


def _one_line(done: subprocess.CompletedProcess, command: str) -> str:
    """The single line a refused command prints, after checking it printed nothing else."""
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stdout == "" and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"hwdecomp {command}: "), line
    return line


@pytest.mark.skipif(not _NO_GPU_BACKEND, reason="a GPU backend runs here: decode='gpu' is not refused")
@pytest.mark.parametrize("how", ["flag", "environment"])
def test_demo_decode_gpu_without_a_gpu_is_one_line_before_any_cluster(how):
    args, env = (["--decode", "gpu"], {}) if how == "flag" else ([], {"HWDECOMP_DECODE": "gpu"})
    line = _one_line(_hwdecomp("demo", *args, env=env, timeout=60), "demo")
    # one line, no sample written and no cluster started for it
    assert line.startswith("hwdecomp demo: decode 'gpu' cannot run here: no GPU backend can (hardware: "), line
    assert "--decode auto or cpu" in line


def test_demo_option_combination_that_cannot_run_is_one_line(capsys):
    # decode='gpu' needs a GPU backend, backend='cpu' has none: refused on any machine.
    assert main(["demo", "--decode", "gpu", "--backend", "cpu"]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("hwdecomp demo: decode='gpu' needs a GPU backend, but backend='cpu'"), line
    assert "starting LocalCluster" not in captured.err and captured.out == ""


def _corrupt_page_file(path: Path) -> Path:
    """A pyarrow-written snappy file whose one data page has 16 bytes flipped in its middle."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": list(range(1000))}), path, compression="snappy", use_dictionary=False)
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(0)
    data = bytearray(path.read_bytes())
    middle = chunk.data_page_offset + chunk.total_compressed_size // 2
    data[middle:middle + 16] = bytes(b ^ 0xFF for b in data[middle:middle + 16])
    path.write_bytes(bytes(data))
    return path


@pytest.mark.distributed
@pytest.mark.parametrize("backend", ["auto", "cpu"])
def test_demo_on_a_corrupt_page_prints_only_its_own_line(tmp_path, backend):
    # The task fails on a worker: distributed used to log its 30-line
    # "Compute Failed" block (key, task, traceback) before the demo's line.
    path = _corrupt_page_file(tmp_path / "broken.parquet")
    done = _hwdecomp("demo", str(path), "--workers", "1", "--no-check", "--backend", backend, timeout=120)
    assert done.returncode == 1, done.stderr[-3000:]
    both = done.stdout + done.stderr
    assert "Compute Failed" not in both and "Traceback" not in both, both[-3000:]
    # the cluster's start and stop, the bar, the error: nothing more
    assert len([line for line in both.split("\n") if line.strip()]) <= 5, both[-3000:]
    last = done.stderr.strip().split("\n")[-1]
    assert last.startswith("hwdecomp demo: ") and str(path) in last, last


def test_bench_console_says_why_a_target_was_not_measured(tmp_path):
    done = _hwdecomp(
        "bench", "--out", str(tmp_path / "out"), "--size", "1MB", "--datasets", "lineitem", "--codecs", "snappy",
        "--files", "1", "--repeats", "1", "--parts", "e2e", "--schedulers", "threads", "--backends", "auto",
        "--decodes", "cpu", "--no-progress", timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    unmeasured = [line for line in done.stdout.splitlines() if line.lstrip().startswith("[   n/a]")]
    assert unmeasured, done.stdout
    for line in unmeasured:
        # the reason report.md gives, not a bare "-"
        assert re.search(r": not measur(ed|able)\b.* \(target [^)]+\)$", line), line
    assert "the distributed scheduler was not run" in done.stdout
    # 1 MB: the console says the figures are a small read's, before the targets
    assert "\nSMALL READ: figures under 1 GB per dataset are dominated by per-task costs; do not use them for " \
           "decisions (lineitem; the targets below are not judged on them)\n" in done.stdout


def test_info_lists_only_packages_the_project_uses(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "cupy" not in out
    assert not any("cupy" in path.read_text() for path in (ROOT / "dask_hwdecomp").rglob("*.py"))


def test_install_hints_say_how_to_install_from_a_checkout():
    # No package index serves dask-hwdecomp: the gpu extra comes from the checkout.
    texts = [*(ROOT / "dask_hwdecomp").rglob("*.py"), *(ROOT / "docs").glob("*.md"),
             ROOT / "README.md", ROOT / "benchmarks" / "README.md"]
    assert [str(p.relative_to(ROOT)) for p in texts if "dask-hwdecomp[" in p.read_text()] == []
    if registry.probe("nvcomp") is not None and "not installed" in registry.probe("nvcomp"):
        assert 'pip install -e ".[gpu]"' in registry.probe("nvcomp")


def _service(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """``hwdecomp service ARGS`` with a service directory of its own (nothing else on the node is touched)."""
    directory = tmp_path / "svc"
    return _hwdecomp("service", *args, env={"HWDECOMP_SERVICE_DIR": str(directory)}, timeout=30)


@pytest.mark.skipif(not _NO_GPU_BACKEND, reason="a GPU backend runs here: the service has something to serve")
def test_service_run_without_a_gpu_backend_is_refused(tmp_path):
    line = _one_line(_service("run", tmp_path=tmp_path), "service")
    assert line.startswith("hwdecomp service: no GPU backend can run here (hardware: "), line
    assert "python -m dask_hwdecomp.service" in line
    assert not list((tmp_path / "svc").glob("*.sock")), "a service was started"


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_service_idle_s_must_be_a_finite_number_of_seconds(tmp_path, value):
    done = _service("run", f"--idle-s={value}", tmp_path=tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last == f"hwdecomp service: error: argument --idle-s: {value!r} is not a finite number of seconds >= 0", last
