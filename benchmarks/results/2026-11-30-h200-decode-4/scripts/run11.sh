#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
bench() {  # $1 name, $2 package root
  PYTHONPATH=/tmp/site:$2 timeout ${B_S:-200} python3 -m dask_hwdecomp bench --out /tmp/b$1 --no-progress --data-dir /tmp/bdata --keep-data \
    --datasets lineitem,entropy --size ${BENCH_SIZE:-400MB} --files 16 --codecs snappy --repeats 3 --backends auto \
    --decodes ${DECODES:-auto} --cluster 4x4 --schedulers distributed --parts e2e > $OUT/bench-$1.log 2>&1
  echo "bench $1 rc=$?"; grep -E "^\s+\[" $OUT/bench-$1.log | grep -E "GPU decoding" | cut -c1-230 | head -20
  cp /tmp/b$1/report.md $OUT/report-$1.md 2>/dev/null; cp /tmp/b$1/results.json $OUT/results-$1.json 2>/dev/null
  PYTHONPATH=/tmp/site:$2 python3 -m dask_hwdecomp service stop >/dev/null 2>&1; sleep 3
}
for b in ${BENCHES:-new sw sw2}; do
  case $b in new) bench new $PWD;; *) bench $b $PWD/.devcarry/$b;; esac
done
