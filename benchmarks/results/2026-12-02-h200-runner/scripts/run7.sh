#!/usr/bin/env bash
# usage: run7.sh LABEL=RUNNERS ... : the service timeline at scale (4x4, snappy) per decoder runner count; "tests" runs the GPU suite.
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
  label=${what%%=*}; spec=${what#*=}; runners=${spec%%:*}; switch=""; [ "$spec" != "$runners" ] && switch=${spec#*:}; src=$root
  [ ${label#before} != $label ] && src=$root/.devcarry/before
  (cd $src && HWDECOMP_SERVICE_SWITCH_INTERVAL_S=$switch HWDECOMP_DECODE_RUNNERS=$runners PYTHONPATH=/tmp/site:$src timeout ${PROF_S:-200} python3 $root/benchmarks/profile_timeline.py /tmp/prof-$label --data /tmp/bdata \
    --size 3GB --files 32 --datasets ${DATASETS:-lineitem,entropy} --codecs ${CODECS:-snappy} --cluster ${CLUSTER:-4x4} --repeats ${REPEATS:-2} \
    --variants ${VARIANTS:-pyarrow,pyarrow-uncompressed,ceiling,decode-cpu,decode-auto} > $OUT/profile-$label.log 2>&1)
  echo "$label (runners $runners switch $switch) rc=$?"; grep -E "GB/s(;|$)|Error|service after" $OUT/profile-$label.log | grep -v "warm\|kind " | head -40
  cp /tmp/prof-$label/timeline.md $OUT/timeline-$label.md; cp /tmp/prof-$label/reads.json $OUT/reads-$label.json
done
ls $OUT
