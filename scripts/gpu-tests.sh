#!/usr/bin/env bash
# The GPU suite, as run on the lent GPU machine (see tests/gpu/).
# Wheels: cramjam==2.14.0, fsspec, pytest-timeout and hypothesis as wheels in
# .whl/ (the GPU machine has no network), carried with the tree; the corpus
# (apache/parquet-testing) ships in tests/data/parquet-testing.
# Every step has a time limit so that a short device lease still brings back
# the logs of the steps before it; QUICK=1 leaves out the CPU suite and runs a
# small selfcheck.
# Exit status: 2 when the gpu extra is missing, 1 when a step failed, else 0.
set -o pipefail
if compgen -G ".whl/*.whl" > /dev/null; then  # else: the environment's own packages
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# Without the gpu extra every GPU test skips and the run would look green.
if ! why=$(python3 -c 'import sys; from dask_hwdecomp.decompress import nvcomp; r = nvcomp.probe(); print(r or ""); sys.exit(1 if r else 0)' 2>&1); then
  echo "gpu-tests: FAILED before any test: the nvcomp backend cannot run here: $why" >&2
  echo "gpu-tests: install the gpu extra (pip install -e '.[test,gpu]': cuda-bindings 13.5.x, nvCOMP), or carry its wheels in .whl/" >&2
  exit 2
fi
status=0
# -v: one line per test, so a step cut short by its time limit still gives counts.
PYTEST="python3 -m pytest -v -p no:cacheprovider -rfEsxX --durations=10"
n() { grep -cE "(^| )$1( +\[ *[0-9]+%\]|$)" "$2"; }  # -v lines, not the -r summary
counts() { echo "$1: passed $(n PASSED "$2") failed $(n FAILED "$2") error $(n ERROR "$2") skipped $(n SKIPPED "$2") xfailed $(n XFAIL "$2")"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 30 python3 scripts/gpu_probe.py > "$OUT/probe.log" 2>&1; tail -5 "$OUT/probe.log"
# Corrupt pages first. nvCOMP runs in the GPU service (docs/gpu.md): a page
# that kills or hangs its context costs the service, never this process.
timeout ${CORRUPT_S:-110} $PYTEST --timeout 100 tests/gpu -k "corrupt" -s > "$OUT/corrupt.log" 2>&1
rc=$?; [ $rc -eq 0 ] || status=1
echo "corrupt: rc=$rc"; counts corrupt "$OUT/corrupt.log"; grep -E "PASSED|FAILED|ERROR|^E  " "$OUT/corrupt.log" | cut -c1-220 | tail -40
timeout ${SUITE_S:-120} $PYTEST --timeout 90 tests/gpu -k "not corrupt" > "$OUT/gpu.log" 2>&1
rc=$?; [ $rc -eq 0 ] || status=1
echo "gpu suite: rc=$rc"; counts "gpu suite" "$OUT/gpu.log"; grep -E " FAILED| ERROR|^(FAILED|ERROR) |[0-9] passed" "$OUT/gpu.log" | cut -c1-220 | tail -25
if [ -z "$QUICK" ]; then
  timeout 300 $PYTEST tests/test_standin_hwengine.py tests/test_selfcheck_hwengine.py tests/test_service.py tests/test_service_node.py tests/test_matrix.py > "$OUT/cpu-suite.log" 2>&1
  [ $? -eq 0 ] || status=1
  tail -3 "$OUT/cpu-suite.log"
  timeout 300 python3 -m dask_hwdecomp selfcheck > "$OUT/selfcheck.log" 2>&1
else
  timeout ${SELFCHECK_S:-25} python3 -m dask_hwdecomp selfcheck --pages 200 --rows 20000 > "$OUT/selfcheck.log" 2>&1
fi
rc=$?; [ $rc -eq 0 ] || status=1
echo "selfcheck: rc=$rc"; tail -4 "$OUT/selfcheck.log"
exit $status
