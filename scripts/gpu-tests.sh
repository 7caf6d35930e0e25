#!/usr/bin/env bash
# The GPU suite, as run on the lent GPU machine (see tests/gpu/).
# Wheels: bash ../shared/tools/device-wheels.sh cramjam==2.14.0 fsspec pytest-timeout hypothesis
# Corpus: cp -r ../shared/corpus/parquet-testing .devcarry/ ; carry .whl and .devcarry.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HWDECOMP_CORPUS=$PWD/.devcarry/parquet-testing
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 scripts/gpu_probe.py 2>&1 | tee "$OUT/probe.log"
# corrupt pages first, in their own process: if one ever poisoned the context
# it must not take the rest of the suite down with it
python3 -m pytest -q -p no:cacheprovider tests/gpu -k "corrupt" -rxXs 2>&1 | tail -30 | tee "$OUT/corrupt.log"
python3 -m pytest -q -p no:cacheprovider tests/gpu -k "not corrupt" -x 2>&1 | tail -25 | tee "$OUT/gpu.log"
python3 -m pytest -q -p no:cacheprovider tests/test_standin_engine.py tests/test_matrix.py 2>&1 | tail -8 | tee "$OUT/cpu-suite.log"
python3 -m dask_hwdecomp selfcheck 2>&1 | tail -60 | tee "$OUT/selfcheck.log"
