#!/usr/bin/env bash
# usage: run6.sh [tests] [before] [after]: the GPU suite on this tree; the service timeline at scale per version.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
root=$PWD
n() { grep -cE "(^| )$1( +\[ *[0-9]+%\]|$)" "$2"; }
for what in "$@"; do
  if [ $what = tests ]; then
    PYTHONPATH=/tmp/site:$root timeout ${T1:-230} python3 -m pytest -v -p no:cacheprovider -rfEs --timeout 150 ${GPU_TESTS:-tests/gpu} > $OUT/gpu-tests.log 2>&1
    echo "gpu tests rc=$? passed $(n PASSED $OUT/gpu-tests.log) failed $(n FAILED $OUT/gpu-tests.log) error $(n ERROR $OUT/gpu-tests.log) skipped $(n SKIPPED $OUT/gpu-tests.log)"
    grep -E "^(FAILED|ERROR)|SKIPPED \[" $OUT/gpu-tests.log | cut -c1-300 | head -20
    continue
  fi
  if [ $what = decprof ]; then
    PYTHONPATH=/tmp/site:$root timeout ${T3:-170} python3 benchmarks/decode_service_profile.py --size 1GB --data /tmp/dprof > $OUT/decode-profile.log 2>&1
    echo "decode profile rc=$?"; tail -60 $OUT/decode-profile.log
    continue
  fi
  src=$root; [ $what = before ] && src=$root/.devcarry/before
  (cd $src && PYTHONPATH=/tmp/site:$src timeout ${PROF_S:-280} python3 $root/benchmarks/profile_timeline.py /tmp/prof-$what --data /tmp/bdata \
    --size 3GB --files 32 --datasets ${DATASETS:-lineitem,entropy} --codecs snappy --cluster 4x4 --repeats ${REPEATS:-2} \
    --variants ${VARIANTS:-pyarrow,pyarrow-uncompressed,ceiling,decode-cpu,decode-auto} > $OUT/profile-$what.log 2>&1)
  echo "$what rc=$?"; grep -E "GB/s$|Error|service after" $OUT/profile-$what.log | grep -v "warm\|kind " | head -40
  cp /tmp/prof-$what/timeline.md $OUT/timeline-$what.md; cp /tmp/prof-$what/reads.json $OUT/reads-$what.json
done
ls $OUT
