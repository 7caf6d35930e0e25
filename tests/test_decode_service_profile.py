"""``benchmarks/decode_service_profile.py`` at a tiny size under numba's CUDA simulator.

The script profiles the GPU service's decoder on a GPU machine; here its
data generation, planning, kept pages, the merged runs, the check against
pyarrow and the stage pass run for real (one dataset decoded, a few rows a
file: the simulator runs every GPU thread in Python), so a change to the
decoder's steps that the script times breaks this test, not the next GPU run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_decode_service_profile_runs_at_a_tiny_size_in_the_simulator(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "decode_service_profile.py"), "--size", "2MB",
                           "--simulate", "--data", str(tmp_path / "data")],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "== lineitem" in out and "== entropy" in out
    assert out.count("pyarrow (CPU baseline") == 2
    assert "[kept] run of 2 files" in out and "decodes equal pyarrow's" in out
    for stage in ("upload", "measure", "place", "write"):
        assert f"\n    {stage} " in out, stage
    assert "kernels: not timed under the simulator" in out
