"""Which GPU a reading process uses on a node of several: the one it sees, or its turn (no GPU needed).

``rundir.gpu_key`` gives a process that sees one GPU that GPU, and one that
sees several the next in turn among the node's processes (a counter in the
service directory under a lock), kept for the process's life; the
service's address follows the GPU, so each GPU has its own service.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from dask_hwdecomp.service import rundir

GPUS = ["GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-0000-0000-0000-000000000000"]


@pytest.fixture
def directory(tmp_path):
    d = tmp_path / "svc"
    d.mkdir(mode=0o700)
    return d


def test_turns_go_round_the_gpus_in_order(directory):
    assert [rundir.take_turn(GPUS, directory) for _ in range(5)] == [GPUS[0], GPUS[1], GPUS[0], GPUS[1], GPUS[0]]
    (directory / "gpu-turn").write_text("not a number")
    assert rundir.take_turn(GPUS, directory) == GPUS[0]  # an unreadable counter starts again


def test_processes_starting_at_once_spread_evenly(directory):
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from dask_hwdecomp.service.rundir import take_turn
        print(take_turn({GPUS!r}, Path(sys.argv[1])))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(directory)], stdout=subprocess.PIPE, text=True)
             for _ in range(8)]
    picks = Counter(p.communicate(timeout=120)[0].strip() for p in procs)
    assert picks == Counter({GPUS[0]: 4, GPUS[1]: 4})


def test_a_process_that_sees_one_gpu_uses_it_and_takes_no_turn(directory, monkeypatch):
    monkeypatch.setattr(rundir, "visible_gpus", lambda: GPUS[1:])
    assert rundir.gpu_key(str(directory)) == GPUS[1]
    assert not (directory / "gpu-turn").exists()
    monkeypatch.setattr(rundir, "visible_gpus", lambda: [])
    assert rundir.gpu_key(str(directory)) == "none"


def test_a_process_that_sees_several_takes_one_turn_and_keeps_its_gpu(directory, monkeypatch):
    monkeypatch.setattr(rundir, "visible_gpus", lambda: list(GPUS))
    monkeypatch.setattr(rundir, "_chosen", {})
    rundir.take_turn(GPUS, directory)  # another process came first
    first = rundir.gpu_key(str(directory))
    assert first == GPUS[1]
    assert [rundir.gpu_key(str(directory)) for _ in range(3)] == [first] * 3
    assert (directory / "gpu-turn").read_text() == "2"
    factories = {"nvcomp": "dask_hwdecomp.decompress.nvcomp:create"}
    mine = rundir.address_for(factories, str(directory))
    other = rundir.address_for(factories, str(directory), gpu=GPUS[0])
    assert mine.gpu == first and mine.socket != other.socket  # one service per GPU
