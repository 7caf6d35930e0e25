#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl .devcarry/pyspy/*.whl >/dev/null 2>&1 || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
SPY=/tmp/site/bin/py-spy; ls -la $SPY
timeout 400 python3 benchmarks/profile_timeline.py /tmp/prof --data /tmp/bdata --size 3GB --files 32 \
  --datasets ${DATASETS:-lineitem} --codecs snappy --cluster 4x4 --repeats ${REPEATS:-6} --variants ${VARIANTS:-pyarrow,decode-auto,decode-cpu} > $OUT/profile.log 2>&1 &
prof=$!
until grep -q "#1:" $OUT/profile.log 2>/dev/null || ! kill -0 $prof 2>/dev/null; do sleep 0.5; done
svc=$(pgrep -f "dask_hwdecomp.service" | head -1); wk=$(pgrep -f "distributed.*spawn" | head -1)
echo "service pid=$svc worker pid=$wk"; ps aux | grep -E "python" | grep -v grep | cut -c1-200 | head
timeout 90 $SPY record --pid $svc --gil --rate 200 --format raw -o $OUT/service-gil.txt --duration ${SPY_S:-30} --nonblocking > $OUT/spy-svc.log 2>&1 &
timeout 90 $SPY record --pid $svc --rate 200 --format raw -o $OUT/service-all.txt --duration ${SPY_S:-30} --nonblocking --threads > $OUT/spy-svc-all.log 2>&1 &
wait $prof; echo "profile rc=$?"
wait
tail -3 $OUT/spy-svc.log
grep -E "GB/s$|held" $OUT/profile.log | head -40
cp /tmp/prof/timeline.md $OUT/
ls -la $OUT
