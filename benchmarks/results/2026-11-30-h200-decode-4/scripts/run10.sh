#!/usr/bin/env bash
# Kept pages: kernel/service tests, GPU decode tests, then the snappy bench new vs base (7671eba).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 HWDECOMP_CORPUS=$PWD/.devcarry/parquet-testing
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
P="python3 -m pytest -q -p no:cacheprovider -rfE"
if [ -z "$NO_TESTS" ]; then
PYTHONPATH=/tmp/site:$PWD timeout ${K_S:-200} $P --timeout 140 tests/test_kept_pages.py tests/test_gpudecode_merge.py tests/test_gpudecode_hosted.py tests/test_service_decode.py tests/test_gpudecode_fixed.py tests/test_gpudecode_bytes.py > $OUT/kernels.log 2>&1; echo "kernels rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/kernels.log | cut -c1-300 | tail -8
PYTHONPATH=/tmp/site:$PWD timeout ${G_S:-220} $P --timeout 150 tests/gpu/test_decode_gpu.py ${G_K:+-k "$G_K"} > $OUT/gpu-decode.log 2>&1; echo "gpu decode rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $OUT/gpu-decode.log | cut -c1-300 | tail -10
fi
[ -n "$BENCHES" ] && NO_TESTS=1 NO_PROF=1 B_S=${B_S:-200} bash .devcarry/run5.sh
true
