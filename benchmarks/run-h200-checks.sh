#!/usr/bin/env bash
# What the checks before a GPU call cost, on the lent GPU, in one device command: decompression
# alone through nvCOMP (`hwdecomp bench --parts decompress`: host to host, 1 MiB and 64 KiB pages
# cut from lineitem and entropy, GB/s of output) for the tree in .devcarry/before (e.g.
# `git archive main dask_hwdecomp | tar -x -C .devcarry/before`) and this tree, interleaved
# ROUNDS times (default 2), CODECS (default snappy,lz4_raw,zstd). The end-to-end cost at scale is
# run-h200-profile.sh's `before after` with CODECS set the same way. Then the walk's kernel alone
# (benchmarks/block_checks_bench.py) on lineitem and entropy pages.
# Carry .whl (shared/tools/device-wheels.sh) and .devcarry.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  > /dev/null 2>&1 || exit 1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
root=$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for round in $(seq "${ROUNDS:-2}"); do
  for tree in before after; do
    src=$root; [ $tree = before ] && src=$root/.devcarry/before
    log=$OUT/checks-$tree-$round.log
    (cd /tmp && PYTHONPATH=/tmp/site:$src timeout "${CHECK_S:-120}" python3 -m dask_hwdecomp bench --parts decompress \
      --backends nvcomp --codecs "${CODECS:-snappy,lz4_raw,zstd}" --datasets lineitem,entropy --size 256MB --files 4 \
      --data-dir /tmp/checks-data --keep-data --repeats 3 --no-progress --out /tmp/checks-$tree-$round > "$log" 2>&1)
    echo "$tree round $round: rc=$?"
    grep -E "decompression alone, host to host" "$log" | sed -E 's/.*host to host, //; s/\(target.*//' | cut -c1-160
  done
done
# The walk's kernel alone (this tree), on pages cut from the same data.
for kind in lineitem entropy; do
  PYTHONPATH=/tmp/site:$root timeout "${CHECK_S:-120}" python3 benchmarks/block_checks_bench.py \
    /tmp/checks-data/$kind/uncompressed > "$OUT/block-checks-$kind.log" 2>&1
  echo "kernel alone, $kind: rc=$?"; grep -E "GB/s" "$OUT/block-checks-$kind.log"
done
