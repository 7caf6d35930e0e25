#!/usr/bin/env bash
# The performance issue's target run on the lent H200 (results in
# benchmarks/results/2026-11-30-h200/): `hwdecomp bench` on both datasets,
# every codec, pyarrow / auto / cpu / the IPC ceiling interleaved, for one
# cluster shape per call ($1: 16x1 or 4x4). 16x1 measures end to end only,
# so that no process but the GPU service holds a CUDA context; 4x4 adds the
# threaded scheduler's stage profile; DECOMPRESS=1 adds decompression alone
# at the defaults (1 MiB and 64 KiB pages) and the copy bandwidth.
# Wheels: the dependencies as wheels in .whl/, carried with the tree.
set -o pipefail
shape=${1:-16x1}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
schedulers=distributed; [ "$shape" = 4x4 ] && schedulers=distributed,threads
parts=e2e; [ -n "$DECOMPRESS" ] && parts=e2e,decompress,copy
timeout "${BENCH_S:-330}" python3 -m dask_hwdecomp bench --out "/tmp/b$shape" --no-progress --data-dir /tmp/bdata \
  --keep-data --datasets lineitem,entropy --size "${BENCH_SIZE:-800MB}" --files 16 --codecs snappy,lz4_raw,zstd,gzip \
  --repeats 3 --backends auto,cpu --cluster "$shape" --schedulers "$schedulers" --parts "$parts" \
  --decompress-size 1GiB > "$OUT/b$shape.log" 2>&1
echo "bench $shape: rc=$?"; grep -E "^\s+\[" "$OUT/b$shape.log" | head -60
tar czf "$OUT/b$shape.tgz" -C /tmp --exclude='*/data' "b$shape"
