#!/usr/bin/env bash
# One runner by default: the decoder tests, the GPU decode tests, then the snappy bench with one runner (new) and two (r2).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 HWDECOMP_CORPUS=$PWD/.devcarry/parquet-testing
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
P="python3 -m pytest -q -p no:cacheprovider -rfE"
PYTHONPATH=/tmp/site:$PWD timeout 60 $P --timeout 50 tests/test_gpudecode_hosted.py tests/test_service_decode.py tests/test_kept_pages.py > $OUT/decoder-tests.log 2>&1; echo "decoder tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/decoder-tests.log | tail -3
PYTHONPATH=/tmp/site:$PWD timeout 70 $P --timeout 60 tests/gpu/test_decode_gpu.py > $OUT/gpu-decode-tests.log 2>&1; echo "gpu decode rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/gpu-decode-tests.log | tail -3
B_S=75 BENCHES="new r2" bash .devcarry/run11.sh
