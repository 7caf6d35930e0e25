#!/usr/bin/env bash
# The H200 run of `hwdecomp bench`, as sent to a GPU machine without network.
# Wheels: cramjam==2.14.0 and fsspec as wheels in .whl/, carried with the tree.
# Sized to end in about 7 minutes on one H200 with 16 cores; results are
# saved after every part, so a run cut short by the timeout keeps its figures.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout ${BENCH_TIMEOUT:-480} python3 -m dask_hwdecomp bench --no-progress \
  --out /tmp/h200 --data-dir /tmp/bdata \
  --size ${BENCH_SIZE:-1.2GB} --files 16 --repeats 3 --cluster 4x4 \
  --decompress-size 2GiB --pages-per-call 16,64,256,1024,2048 --streams 1,2,4 \
  2>&1 | tee "$OUT/run.log"
rc=$?
cp /tmp/h200/report.md "$OUT/" 2>/dev/null
tar czf "$OUT/h200.tgz" -C /tmp --exclude=h200/data h200 2>/dev/null
exit $rc
