#!/usr/bin/env bash
# Before and after the GPU service, on the lent H200, in one run: `hwdecomp
# bench` end to end for an earlier tree (BASE: `git archive <commit>` unpacked
# in a carried folder; a sidecar per worker) and for this tree (one service
# per GPU), on the same generated files, LocalCluster 16x1 and 4x4, pyarrow
# measured in each run; this tree again with a longer batching latency; then
# decompression alone at the default options.
# Wheels: the dependencies as wheels in .whl/, carried with the tree.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
here=$PWD
ARGS="--no-progress --data-dir /tmp/bdata --keep-data --datasets ${DATASETS:-lineitem,entropy} --size ${BENCH_SIZE:-600MB}
      --files 16 --codecs ${CODECS:-snappy,lz4_raw,zstd,gzip} --repeats ${REPEATS:-2} --schedulers distributed
      --backends auto,cpu --parts e2e"
run() {  # label, tree, shape, extra environment
  local label=$1 tree=$2 shape=$3; shift 3
  (cd "$tree" && env "$@" PYTHONPATH=/tmp/site:$tree timeout "${E2E_S:-150}" python3 -m dask_hwdecomp bench \
     --out "/tmp/$label" --cluster "$shape" $ARGS) > "$OUT/$label.log" 2>&1
  echo "$label: rc=$?"
  grep -E "^\s+\[" "$OUT/$label.log" | head -12
}
for shape in 16x1 4x4; do
  run "base-$shape" "$BASE" "$shape" X=1
  run "new-$shape" "$here" "$shape" X=1
done
run "new-16x1-latency8" "$here" 16x1 HWDECOMP_BATCH_LATENCY_MS=8
(cd "$here" && PYTHONPATH=/tmp/site:$here timeout "${DEC_S:-150}" python3 -m dask_hwdecomp bench --out /tmp/dec \
   --no-progress --data-dir /tmp/ddata --datasets lineitem --size 300MB --files 8 --codecs snappy,lz4_raw,zstd,gzip \
   --parts decompress,copy --decompress-size 1GiB --backends nvcomp) > "$OUT/dec.log" 2>&1
echo "decompress: rc=$?"
grep -E "^\s+\[" "$OUT/dec.log" | head -12
tar czf "$OUT/results.tgz" -C /tmp --exclude='*/data' base-16x1 new-16x1 base-4x4 new-4x4 new-16x1-latency8 dec 2>/dev/null
ls -la "$OUT"
