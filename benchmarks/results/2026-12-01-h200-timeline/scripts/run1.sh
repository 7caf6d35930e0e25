#!/usr/bin/env bash
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1 || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 60 python3 .devcarry/reg_probe.py 2>&1 | tee $OUT/reg_probe.log
timeout ${PROF_S:-420} python3 benchmarks/profile_timeline.py /tmp/prof --data /tmp/bdata --size ${SIZE:-3GB} --files ${FILES:-32} \
  --datasets ${DATASETS:-lineitem,entropy} --codecs ${CODECS:-snappy} --cluster ${SHAPE:-4x4} --repeats ${REPEATS:-2} > $OUT/profile.log 2>&1
echo "profile rc=$?"
grep -E "GB/s|held:" $OUT/profile.log | head -60
cp /tmp/prof/timeline.md $OUT/ 2>/dev/null
cp /tmp/prof/gantt-*.png $OUT/ 2>/dev/null
tar czf $OUT/spans.tgz -C /tmp/prof spans 2>/dev/null
ls -la $OUT
