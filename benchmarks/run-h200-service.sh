#!/usr/bin/env bash
# The performance issue's end-to-end figures on the lent H200, in one run:
# `hwdecomp bench` end to end on the lineitem-like and high-entropy data,
# every codec, pyarrow / hwdecomp auto / hwdecomp cpu interleaved, for a
# LocalCluster of 4 workers x 4 threads and of 16 workers x 1 thread, all
# workers attached to the one GPU service; then decompression alone at the
# default options.
# Wheels: the dependencies as wheels in .whl/, carried with the tree.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ARGS="--no-progress --data-dir /tmp/bdata --keep-data --datasets ${DATASETS:-lineitem,entropy} --size ${BENCH_SIZE:-800MB}
      --files 16 --codecs ${CODECS:-snappy,lz4_raw,zstd,gzip} --repeats ${REPEATS:-3} --schedulers distributed
      --backends auto,cpu --parts e2e"
for shape in ${SHAPES:-4x4 16x1}; do
  timeout "${E2E_S:-240}" python3 -m dask_hwdecomp bench --out "/tmp/e2e-$shape" --cluster "$shape" $ARGS \
    > "$OUT/e2e-$shape.log" 2>&1
  echo "e2e $shape: rc=$?"; grep -E "^\s+\[|Traceback|Error" "$OUT/e2e-$shape.log" | head -10
  cp "/tmp/e2e-$shape/results.json" "$OUT/e2e-$shape-results.json" 2>/dev/null
  cp "/tmp/e2e-$shape/report.md" "$OUT/e2e-$shape-report.md" 2>/dev/null
  cp /tmp/e2e-$shape/*.png "$OUT/" 2>/dev/null && for f in /tmp/e2e-$shape/*.png; do mv "$OUT/$(basename $f)" "$OUT/e2e-$shape-$(basename $f)"; done
done
if [ -n "$DECOMPRESS" ]; then
  timeout "${DEC_S:-120}" python3 -m dask_hwdecomp bench --out /tmp/dec --no-progress --data-dir /tmp/ddata \
    --datasets lineitem --size 300MB --files 8 --codecs snappy,lz4_raw,zstd,gzip --parts decompress,copy \
    --decompress-size 1GiB --backends nvcomp > "$OUT/dec.log" 2>&1
  echo "decompress: rc=$?"
  cp /tmp/dec/report.md "$OUT/dec-report.md" 2>/dev/null; cp /tmp/dec/results.json "$OUT/dec-results.json" 2>/dev/null
fi
python3 -m dask_hwdecomp service status
