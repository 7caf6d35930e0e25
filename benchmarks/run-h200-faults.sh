#!/usr/bin/env bash
# The faults issue's targets on the lent H200, in steps that each fit one
# device command (STEPS picks them, in this order by default):
#   tests       tests/gpu/test_faults_gpu.py and the corrupt-page read tests,
#               against the default gpu_timeout_s (a corrupt page of each codec
#               named within 2 s; 15 good files beside a corrupt one; a SIGKILL
#               under 16 reading threads)
#   faults      benchmarks/faults_h200.py: the same at scale on a 4x4 cluster,
#               with the figures (OUT/faults/faults.json)
#   mut-nvcomp  1,500 mutated files through backend="nvcomp" (0 wrong, 0 crash,
#               0 over 5 s)
#   mut-decode  the same with decode="gpu"
#   replay      the mutation cases ONLY (comma-separated) again, ROUNDS (3) times, with DECODE (cpu),
#               of the tree in .devcarry/TREE if given (benchmarks/devcarry-trees.sh), else this one:
#               cases that go wrong only beside others, e.g. ONLY=926,927,...,939 TREE=before
# MUT_WORKERS (4) harnesses share the service; MUT_SECONDS (420) stops starting cases.
# e.g. STEPS=tests,faults bash benchmarks/run-h200-faults.sh, then
#      STEPS=mut-nvcomp,mut-decode bash benchmarks/run-h200-faults.sh
# Wheels: the dependencies as wheels in .whl/, carried with the tree.
set -o pipefail
# The large wheels travel installed and packed (benchmarks/pack-wheels.sh): unpacked first, the rest on top.
if [ -f .whl/site.tar.xz ]; then
  mkdir -p /tmp/site && tar -xJf .whl/site.tar.xz -C /tmp/site || exit 1
fi
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
bash benchmarks/numba-cache-guard.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
status=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for step in $(echo "${STEPS:-tests,faults,mut-nvcomp,mut-decode}" | tr , ' '); do
  case $step in
    tests)
      timeout "${TESTS_S:-280}" python3 -m pytest -v -s -p no:cacheprovider -rfEs --timeout 120 \
        tests/gpu/test_faults_gpu.py tests/gpu/test_read_path.py -k "faults or corrupt or sigkill" \
        > "$OUT/faults-tests.log" 2>&1 ;;
    faults)
      timeout "${FAULTS_S:-500}" python3 benchmarks/faults_h200.py --out "$OUT/faults" \
        > "$OUT/faults.log" 2>&1 ;;
    mut-nvcomp)
      timeout "${MUT_S:-500}" python3 scripts/gpu_mutation_run.py --cases 1500 --workers "${MUT_WORKERS:-4}" --seconds "${MUT_SECONDS:-420}" \
        --timeout 5 --gpu-timeout 60 --out /tmp/mut-nvcomp > "$OUT/mut-nvcomp.log" 2>&1 ;;
    mut-decode)
      timeout "${MUT_S:-500}" python3 scripts/gpu_mutation_run.py --cases 1500 --workers "${MUT_WORKERS:-4}" --seconds "${MUT_SECONDS:-420}" \
        --timeout 5 --gpu-timeout 60 --decode gpu --out /tmp/mut-decode > "$OUT/mut-decode.log" 2>&1 ;;
    replay)
      tree=$PWD; [ -n "$TREE" ] && tree=$PWD/.devcarry/$TREE
      : > "$OUT/replay-${TREE:-this}.log"
      for r in $(seq "${ROUNDS:-3}"); do
        PYTHONPATH=/tmp/site:$tree timeout "${MUT_S:-500}" python3 scripts/gpu_mutation_run.py --only "$ONLY" \
          --workers "${MUT_WORKERS:-4}" --timeout 5 --gpu-timeout 60 --decode "${DECODE:-cpu}" \
          --out "/tmp/mut-replay-${TREE:-this}-$r" >> "$OUT/replay-${TREE:-this}.log" 2>&1
      done ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
  rc=$?; [ $rc -eq 0 ] || status=1
  echo "$step: rc=$rc"
  log="$OUT/$([ "$step" = tests ] && echo faults-tests || echo "$step").log"
  [ "$step" = replay ] && log="$OUT/replay-${TREE:-this}.log"
  grep -E "PASSED|FAILED|ERROR|error after|next read|beside|SIGKILL|^alone|^together|^sigkill|targets|^\{\"cases|^FAIL|Traceback" \
    "$log" | cut -c1-260 | tail -60
done
python3 -m dask_hwdecomp service status
# A few files only come back from the device: the runs' summaries and failing mutants, and the
# services' own logs (a line per start, backend and warm-up, with times: what a restart costs), as one archive.
tar czf "$OUT/faults-files.tgz" -C / $(cd / && ls -d tmp/mut-*/summary.json tmp/mut-*/failures tmp/dask-hwdecomp-*/*.log 2>/dev/null) 2>/dev/null
exit $status
