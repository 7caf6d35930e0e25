#!/usr/bin/env bash
# The service timeline at scale, before (536e164: the timeline only) and after pinning while idle; one version after the other.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
root=$PWD
for ver in ${VERS:-before after}; do
  src=$root; [ $ver = before ] && src=$root/.devcarry/before
  # The service starts as "python -m dask_hwdecomp.service" in the readers' directory: run from the version's own tree.
  (cd $src && PYTHONPATH=/tmp/site:$src timeout ${PROF_S:-250} python3 $root/benchmarks/profile_timeline.py /tmp/prof-$ver --data /tmp/bdata \
    --size 3GB --files 32 --datasets lineitem,entropy --codecs snappy --cluster 4x4 --repeats ${REPEATS:-3} > $OUT/profile-$ver.log 2>&1)
  echo "$ver rc=$?"; grep -E "GB/s$|Error" $OUT/profile-$ver.log | grep -v warm | head -40
  cp /tmp/prof-$ver/timeline.md $OUT/timeline-$ver.md; cp /tmp/prof-$ver/reads.json $OUT/reads-$ver.json
done
cp /tmp/prof-after/gantt-lineitem-snappy-decode-auto-*.png /tmp/prof-after/gantt-entropy-snappy-decode-auto-*.png $OUT/ 2>/dev/null
ls $OUT
