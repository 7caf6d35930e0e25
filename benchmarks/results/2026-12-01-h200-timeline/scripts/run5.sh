#!/usr/bin/env bash
# Final: the GPU tests of the read path, the service and the decoder on this commit, then a short timeline of the final code.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD HWDECOMP_CORPUS=$PWD/.devcarry/parquet-testing
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
P="python3 -m pytest -v -p no:cacheprovider -rfEs --timeout 150"
n() { grep -cE "(^| )$1( +\[ *[0-9]+%\]|$)" "$2"; }
timeout ${T1:-210} $P tests/gpu/test_read_path.py tests/gpu/test_service_gpu.py tests/gpu/test_decode_gpu.py tests/gpu/test_nvcomp_backend.py > $OUT/gpu-tests.log 2>&1
echo "gpu tests rc=$? passed $(n PASSED $OUT/gpu-tests.log) failed $(n FAILED $OUT/gpu-tests.log) error $(n ERROR $OUT/gpu-tests.log) skipped $(n SKIPPED $OUT/gpu-tests.log)"
grep -E "^(FAILED|ERROR)|SKIPPED \[" $OUT/gpu-tests.log | cut -c1-200 | head -20
timeout ${T2:-150} python3 benchmarks/profile_timeline.py /tmp/prof --size 3GB --files 32 --datasets lineitem --codecs snappy \
  --cluster 4x4 --repeats 2 --variants pyarrow,ceiling,decode-cpu,decode-auto > $OUT/profile-final.log 2>&1
echo "profile rc=$?"; grep -E "GB/s$" $OUT/profile-final.log | grep -v warm
cp /tmp/prof/timeline.md $OUT/timeline-final.md 2>/dev/null; cp /tmp/prof/reads.json $OUT/reads-final.json 2>/dev/null
