#!/usr/bin/env bash
# One device call of GPU-decoder work on the lent H200, modes run in the order given:
#   tests    the GPU suite (tests/gpu; T1 seconds, default 230; GPU_TESTS to narrow it)
#   tests-NAME  the same from the tree in .devcarry/NAME (devcarry-trees.sh with WITH_TESTS=1), its log
#            gpu-tests-NAME.log
#   kernels  each decode kernel's own time on merged batches (benchmarks/kernel_steps.py; MERGE, K_S)
#   before   the service timeline at scale (4x4, snappy, 3 GB in 32 files, every variant interleaved) of the
#            tree in .devcarry/before (e.g. `git archive main dask_hwdecomp | tar -x -C .devcarry/before`)
#   after    the same of this tree; after2: with two decoder runners
#   tree-NAME  the same of the tree in .devcarry/NAME (several versions side by side in one call)
#   pinned   50 GPU-decoded reads of lineitem at scale, each held until the next: the service's pinned bytes
#            against the readers' pools (benchmarks/pinned_loop.py; READS, PIN_S)
#   spy      this tree's again, py-spy sampling the service's GIL; idle: every thread, idle ones too;
#            native: every thread with its native frames (pausing the service at each sample), to tell GIL
#            waits from driver calls and lock waits (benchmarks/spy_waits.py)
# Put tests first: run after profiles in the same call, the GPU suite failed corpus tests that pass on a fresh
# machine (2026-12-04, 25 of 38; the cause is not known).
# Carry .whl (shared/tools/device-wheels.sh) and .devcarry (py-spy's wheel in .devcarry/pyspy for spy and idle).
# Environment: PROF_S (seconds a profile may take, default 110), DATASETS, CODECS (snappy), CLUSTER (4x4),
# VARIANTS, REPEATS, SPY_S.
# The large wheels travel installed and packed (benchmarks/pack-wheels.sh): unpacked first, the rest on top.
[ -f .whl/site.tar.xz ] && { mkdir -p /tmp/site && tar -xJf .whl/site.tar.xz -C /tmp/site || exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl $(ls .devcarry/pyspy/*.whl 2>/dev/null) >/dev/null 2>&1 || exit 1
export PYTHONUNBUFFERED=1
bash benchmarks/numba-cache-guard.sh
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
root=$PWD
n() { grep -cE "(^| )$1( +\[ *[0-9]+%\]|$)" "$2"; }
for what in "$@"; do
  case $what in tests|tests-*)
    src=$root; log=$OUT/gpu-tests.log
    if [ $what != tests ]; then
      src=$root/.devcarry/${what#tests-}; log=$OUT/gpu-$what.log
      [ -e $src/tests/data ] || ln -s $root/tests/data $src/tests/data
    fi
    (cd $src && PYTHONPATH=/tmp/site:$src timeout ${T1:-230} python3 -m pytest -v -p no:cacheprovider -rfEs --timeout 150 \
      ${GPU_TESTS:-tests/gpu} > $log 2>&1)
    echo "$what rc=$? passed $(n PASSED $log) failed $(n FAILED $log) error $(n ERROR $log) skipped $(n SKIPPED $log)"
    grep -E "^(FAILED|ERROR)|SKIPPED \[" $log | cut -c1-300 | head -20; tail -1 $log
    continue ;;
  esac
  if [ $what = pinned ]; then
    PYTHONPATH=/tmp/site:$root timeout ${PIN_S:-150} python3 benchmarks/pinned_loop.py /tmp/pinned --data /tmp/bdata \
      --reads ${READS:-50} > $OUT/pinned.log 2>&1
    echo "pinned rc=$?"; grep -v Warning $OUT/pinned.log | tail -4
    continue
  fi
  if [ $what = kernels ]; then
    PYTHONPATH=/tmp/site:$root timeout ${K_S:-300} python3 benchmarks/kernel_steps.py /tmp/ks --data /tmp/bdata --size 3GB --files 32 \
      --merge ${MERGE:-1,4,16} --repeats ${REPEATS:-2} > $OUT/kernels.log 2>&1
    echo "kernels rc=$?"; grep -v Warning $OUT/kernels.log | tail -70; cp /tmp/ks/kernel_steps.json $OUT/ 2>/dev/null
    continue
  fi
  src=$root; [ $what = before ] && src=$root/.devcarry/before
  case $what in tree-*) src=$root/.devcarry/${what#tree-} ;; esac
  runners=1; [ $what = after2 ] && runners=2; k=$((k+1))
  (cd $src && HWDECOMP_DECODE_RUNNERS=$runners PYTHONPATH=/tmp/site:$src timeout ${PROF_S:-110} python3 $root/benchmarks/profile_timeline.py /tmp/prof-$what --data /tmp/bdata \
    --size 3GB --files 32 --datasets ${DATASETS:-lineitem,entropy} --codecs ${CODECS:-snappy} --cluster ${CLUSTER:-4x4} --repeats ${REPEATS:-2} \
    --variants ${VARIANTS:-pyarrow,pyarrow-uncompressed,ceiling,decode-cpu,decode-auto} > $OUT/profile-$what$k.log 2>&1; mkdir -p /tmp/gantts/$what$k; cp /tmp/prof-$what/gantt-*-decode-*.png /tmp/gantts/$what$k/ 2>/dev/null) &
  prof=$!
  if [ $what = spy ] || [ $what = idle ] || [ $what = native ]; then
    flags="--gil --nonblocking"; [ $what = idle ] && flags="--idle --threads --nonblocking"
    [ $what = native ] && flags="--idle --threads --native"
    until grep -q "#1:" $OUT/profile-$what$k.log 2>/dev/null || ! kill -0 $prof 2>/dev/null; do sleep 0.5; done
    svc=$(pgrep -f "dask_hwdecomp.service" | head -1)
    timeout 60 /tmp/site/bin/py-spy record --pid $svc $flags --rate ${SPY_RATE:-200} --format raw -o $OUT/spy-service-$what.txt --duration ${SPY_S:-25} > $OUT/spy.log 2>&1 &
  fi
  wait $prof; echo "$what rc=$?"; grep -E "GB/s(;|$)|Error|service after|^mean " $OUT/profile-$what$k.log | grep -v "warm\|kind " | head -70
  wait
done
[ -f $OUT/spy.log ] && tail -2 $OUT/spy.log
for f in $OUT/spy-service-*.txt; do [ -f $f ] && python3 benchmarks/spy_summary.py $f > ${f%.txt}-summary.log; done
[ -f $OUT/spy-service-native.txt ] && python3 benchmarks/spy_waits.py $OUT/spy-service-native.txt | tee $OUT/spy-waits.log | head -60
# The profiles' services log any numba compile inside a request (service/compile_watch.py): a step no warm-up
# compiles, which on a cold cache can pass its request's deadline. Printed here, and the logs kept.
compiled=$(cat /tmp/dask-hwdecomp-*/*.log 2>/dev/null | grep -o "numba compiled [^ ]*" | sort | uniq -c)
[ -n "$compiled" ] && echo "compiled inside requests (service logs):" && echo "$compiled"
logs=$(ls /tmp/dask-hwdecomp-*/*.log 2>/dev/null); [ -n "$logs" ] && tar czf $OUT/service-logs.tgz $logs 2>/dev/null
[ -d /tmp/gantts ] && tar czf $OUT/gantts.tgz -C /tmp gantts; ls $OUT
