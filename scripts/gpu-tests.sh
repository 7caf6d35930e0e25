#!/usr/bin/env bash
# The GPU suite, as run on the lent GPU machine (see tests/gpu/).
# Wheels: cramjam==2.14.0, fsspec, pytest-timeout and hypothesis as wheels in
# .whl/ (the GPU machine has no network); corpus: apache/parquet-testing in
# .devcarry/parquet-testing. Both are carried with the tree.
# Every step has a time limit so that a short device lease still brings back
# the logs of the steps before it; QUICK=1 leaves out the CPU suite and runs a
# small selfcheck.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HWDECOMP_CORPUS=$PWD/.devcarry/parquet-testing
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# -v: one line per test, so a step cut short by its time limit still gives counts.
PYTEST="python3 -m pytest -v -p no:cacheprovider -rfEsxX --durations=10"
n() { grep -cE "(^| )$1( +\[ *[0-9]+%\]|$)" "$2"; }  # -v lines, not the -r summary
counts() { echo "$1: passed $(n PASSED "$2") failed $(n FAILED "$2") error $(n ERROR "$2") skipped $(n SKIPPED "$2") xfailed $(n XFAIL "$2")"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 30 python3 scripts/gpu_probe.py > "$OUT/probe.log" 2>&1; tail -5 "$OUT/probe.log"
# Corrupt pages first. nvCOMP runs in a sidecar process (docs/gpu.md): a page
# that kills or hangs its context costs the sidecar, never this process.
timeout ${CORRUPT_S:-110} $PYTEST --timeout 100 tests/gpu -k "corrupt" -s > "$OUT/corrupt.log" 2>&1
echo "corrupt: rc=$?"; counts corrupt "$OUT/corrupt.log"; grep -E "PASSED|FAILED|ERROR|^E  " "$OUT/corrupt.log" | cut -c1-220 | tail -40
timeout ${SUITE_S:-120} $PYTEST --timeout 90 tests/gpu -k "not corrupt" > "$OUT/gpu.log" 2>&1
echo "gpu suite: rc=$?"; counts "gpu suite" "$OUT/gpu.log"; grep -E " FAILED| ERROR|^(FAILED|ERROR) |[0-9] passed" "$OUT/gpu.log" | cut -c1-220 | tail -25
if [ -z "$QUICK" ]; then
  timeout 300 $PYTEST tests/test_standin_engine.py tests/test_selfcheck_engine.py tests/test_sidecar.py tests/test_matrix.py > "$OUT/cpu-suite.log" 2>&1
  tail -3 "$OUT/cpu-suite.log"
  timeout 300 python3 -m dask_hwdecomp selfcheck > "$OUT/selfcheck.log" 2>&1
else
  timeout ${SELFCHECK_S:-25} python3 -m dask_hwdecomp selfcheck --pages 200 --rows 20000 > "$OUT/selfcheck.log" 2>&1
fi
echo "selfcheck: rc=$?"; tail -4 "$OUT/selfcheck.log"
