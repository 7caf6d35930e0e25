#!/usr/bin/env bash
# Before and after on the lent H200, in one run: `hwdecomp bench` end to end
# (lineitem-like data, LocalCluster 4x4, pyarrow measured in each run) for an
# earlier tree (BASE: `git archive <commit>` unpacked in a carried folder) and
# for this tree, on the same generated files; then what the checksums cost,
# decompression alone.
# Wheels: the dependencies as wheels in .whl/, carried with the tree and the BASE folder.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ARGS="--no-progress --data-dir /tmp/bdata --datasets lineitem --size ${BENCH_SIZE:-800MB} --files 16
      --codecs snappy,gzip,zstd --repeats 3 --cluster 4x4 --schedulers distributed --backends auto,cpu --parts e2e"
here=$PWD
(cd "$BASE" && PYTHONPATH=/tmp/site:$PWD timeout "${BASE_S:-200}" python3 -m dask_hwdecomp bench --out /tmp/base $ARGS) \
  > "$OUT/base.log" 2>&1
echo "base: rc=$?"; grep -E "^\s+\[" "$OUT/base.log" | head -20
PYTHONPATH=/tmp/site:$here timeout "${NEW_S:-200}" python3 -m dask_hwdecomp bench --out /tmp/new --keep-data $ARGS \
  > "$OUT/new.log" 2>&1
echo "new: rc=$?"; grep -E "^\s+\[" "$OUT/new.log" | head -20
PYTHONPATH=/tmp/site:$here timeout "${CHECK_S:-90}" python3 -m dask_hwdecomp bench --out /tmp/sums --no-progress \
  --data-dir /tmp/sdata --datasets lineitem --size 300MB --files 8 --codecs snappy,gzip,zstd \
  --parts checksums --decompress-size 512MiB --backends nvcomp > "$OUT/sums.log" 2>&1
echo "checksums: rc=$?"
cp /tmp/base/results.json "$OUT/base-results.json" 2>/dev/null
cp /tmp/base/report.md "$OUT/base-report.md" 2>/dev/null
cp /tmp/sums/report.md "$OUT/sums-report.md" 2>/dev/null
tar czf "$OUT/new.tgz" -C /tmp --exclude=new/data new sums 2>/dev/null
