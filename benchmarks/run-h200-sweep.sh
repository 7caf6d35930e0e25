#!/usr/bin/env bash
# The codec x cluster-shape sweep at scale that backend="auto"'s choice rests on, on the lent GPU:
# `hwdecomp bench --parts e2e` on both tables (3 GB of Arrow in 32 files per dataset and codec, written
# once by parallel processes into /tmp/bdata and reused by the next call on a warm machine), every codec,
# pyarrow, pyarrow on the uncompressed copy, the decode-free ceiling, decode="cpu" and decode="auto"
# interleaved within each LocalCluster. One bench run per shape, each written out before the next starts,
# so that a run cut short by the call's limit loses only its own shape:
#   bash benchmarks/run-h200-sweep.sh 4x4,16x1      then      bash benchmarks/run-h200-sweep.sh 1x16
# Environment: SWEEP_S (seconds for all shapes, default 540), REPEATS (2), CODECS (snappy,lz4_raw,zstd,gzip),
# SIZE and FILES (3GB and 32 per dataset; smaller is a small-read result, labelled by its name),
# TREE (a .devcarry/NAME tree to measure instead of this one). Carry .whl (shared/tools/device-wheels.sh).
set -o pipefail
shapes=${1:-4x4}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  > /dev/null 2>&1 || exit 1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
root=$PWD; src=$root; [ -n "$TREE" ] && src=$root/.devcarry/$TREE
end=$((SECONDS + ${SWEEP_S:-540}))
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for shape in ${shapes//,/ }; do
  name=sweep-$shape; [ -n "$SIZE" ] && name=$name-$SIZE; left=$((end - SECONDS))
  [ $left -lt 30 ] && { echo "$name: not run, $left s left"; continue; }
  t0=$SECONDS
  (cd /tmp && PYTHONPATH=/tmp/site:$src timeout "$left" python3 -m dask_hwdecomp bench --out "/tmp/$name" \
    --no-progress --data-dir /tmp/bdata --keep-data --datasets lineitem,entropy --size ${SIZE:-3GB} --files ${FILES:-32} \
    --codecs "${CODECS:-snappy,lz4_raw,zstd,gzip}" --repeats "${REPEATS:-2}" --backends auto --decodes auto,cpu \
    --cluster "$shape" --schedulers distributed --parts e2e > "$OUT/$name.log" 2>&1)
  echo "$name: rc=$? in $((SECONDS - t0)) s"; grep -E "Error|Traceback" "$OUT/$name.log" | cut -c1-200 | tail -5
  [ -f "/tmp/$name/report.md" ] || continue
  sed -n '/^## End to end/,/^## [^E]/p' "/tmp/$name/report.md" | grep -E "^###|^\| [a-z]" | cut -c1-230
  tar czf "$OUT/$name.tgz" -C /tmp --exclude='*/data' "$name"
done
