#!/usr/bin/env bash
# The service timeline at scale, before (536e164: timeline only) and after the pinning changes, one version after the other.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
for ver in ${VERS:-before after}; do
  src=$PWD; [ $ver = before ] && src=$PWD/.devcarry/before
  PYTHONPATH=/tmp/site:$src timeout ${PROF_S:-270} python3 benchmarks/profile_timeline.py /tmp/prof-$ver --data /tmp/bdata \
    --size 3GB --files 32 --datasets lineitem,entropy --codecs snappy --cluster 4x4 --repeats ${REPEATS:-3} > $OUT/profile-$ver.log 2>&1
  echo "$ver rc=$?"; grep -E "GB/s$" $OUT/profile-$ver.log | grep -v warm
  cp /tmp/prof-$ver/timeline.md $OUT/timeline-$ver.md; cp /tmp/prof-$ver/reads.json $OUT/reads-$ver.json
done
cp /tmp/prof-after/gantt-lineitem-snappy-decode-auto-*.png /tmp/prof-after/gantt-entropy-snappy-decode-auto-*.png $OUT/ 2>/dev/null
ls $OUT
