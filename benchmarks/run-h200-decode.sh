#!/usr/bin/env bash
# GPU decoding's target run on the lent H200: `hwdecomp bench` on both
# datasets, every codec, 3 repeats, pyarrow / hwdecomp-auto (decode auto: the
# GPU decodes) / hwdecomp-auto-decode-cpu (pyarrow decodes) / the IPC ceiling
# interleaved, plus the GPU decode kernels alone on the uncompressed files
# (part gpudecode), in one call per cluster shape ($1, default 4x4: the shape
# the targets are judged on; the threaded scheduler adds the stage profile
# that explains a miss). Another shape measures end to end only.
# Wheels: the dependencies as wheels in .whl/, carried with the tree; the
# GPU decoder needs numba and numba-cuda among them (without them the
# gpudecode part and GPU decoding are skipped, and the report says why).
# BENCH_SIZE (Arrow bytes a dataset) and BENCH_S (seconds) are overridable.
set -o pipefail
shape=${1:-4x4}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
schedulers=distributed parts=e2e
[ "$shape" = 4x4 ] && schedulers=distributed,threads parts=e2e,gpudecode
timeout "${BENCH_S:-420}" python3 -m dask_hwdecomp bench --out "/tmp/d$shape" --no-progress --data-dir /tmp/bdata \
  --keep-data --datasets lineitem,entropy --size "${BENCH_SIZE:-800MB}" --files 16 --codecs snappy,lz4_raw,zstd,gzip \
  --repeats 3 --backends auto --decodes auto,cpu --cluster "$shape" --schedulers "$schedulers" --parts "$parts" \
  > "$OUT/d$shape.log" 2>&1
echo "bench $shape: rc=$?"; grep -E "^\s+\[" "$OUT/d$shape.log" | head -80
tar czf "$OUT/d$shape.tgz" -C /tmp --exclude='*/data' "d$shape"
