"""scripts/gpu-tests.sh refuses to run without the gpu extra.

Without cuda-bindings and nvCOMP every GPU test skips, so a run on a GPU
machine that lacks them would otherwise look green.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dask_hwdecomp.decompress import nvcomp

from helpers import REPO


@pytest.mark.skipif(nvcomp.probe() is None, reason="the gpu extra and a GPU are here")
def test_gpu_tests_script_fails_without_the_gpu_extra(tmp_path):
    for name in ("dask_hwdecomp", "scripts", "tests"):
        (tmp_path / name).symlink_to(REPO / name)
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}",
           "OUT": str(tmp_path / "out")}
    done = subprocess.run(["bash", str(REPO / "scripts" / "gpu-tests.sh")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "the nvcomp backend cannot run here" in done.stderr
    assert nvcomp.probe() in done.stderr
    assert not (tmp_path / "out" / "gpu.log").exists()  # no test ran
