#!/usr/bin/env bash
# Fit the GPU machine's wheels into the device tool's 64 MiB carry, with the tracked tree beside them:
#   bash benchmarks/pack-wheels.sh            (after ../shared/tools/device-wheels.sh, or it runs it)
# The large wheels (libnvcomp, nvcomp's bindings, cuda-bindings and cuda-pathfinder: about 42 MB zipped) are installed
# here into a folder for Python 3.12 on x86-64 and carried as one xz tarball of their files (about 34 MB);
# the device scripts (run-h200-profile.sh, run-h200-faults.sh) unpack .whl/site.tar.xz into /tmp/site
# before they install the remaining wheels there. WITH_PYSPY=1 also puts py-spy's wheel in
# .devcarry/pyspy for run-h200-profile.sh's spy and idle modes.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "$(ls .whl/*.whl 2>/dev/null)" ] || bash ../shared/tools/device-wheels.sh > /dev/null
# Every wheel of the cuda and nvidia namespaces goes in the tarball: pip install --upgrade --target replaces a
# whole top-level folder, so a cuda-pathfinder installed after the unpacking took cuda/bindings with it (the
# image's older cuda-bindings was then used, 2026-12-07).
big=$(ls .whl/nvidia_*.whl .whl/cuda_*.whl 2>/dev/null || true)
if [ -n "$big" ]; then
  site=$(mktemp -d)
  python3 -m pip install -q --no-deps --no-compile --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --target "$site" $big
  tar -cJf .whl/site.tar.xz -C "$site" .
  rm -rf "$site" $big
fi
if [ "${WITH_PYSPY:-0}" = 1 ]; then
  mkdir -p .devcarry/pyspy
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .devcarry/pyspy py-spy
fi
# The device tool counted more than the files' bytes on 2026-12-07 (66.6 MB of files, 63.5 MiB, but 67 MiB on disk: refused):
# the sizes on disk are printed, and what to move out of the tree when they pass 64 MiB.
tracked=$(git ls-files -z | xargs -0 du -ck | tail -1 | cut -f1)
carried=$(du -ck .whl .devcarry 2>/dev/null | tail -1 | cut -f1)
echo "carry: tracked $((tracked >> 10)) MiB + .whl and .devcarry $((carried >> 10)) MiB of 64 MiB, on disk"
if [ $(((tracked + carried) >> 10)) -ge 63 ]; then
  echo "over the carry: move benchmarks/results/* out of the tree for the device calls (tests read only" \
       "benchmarks/results/2026-12-06-no-device) and back before committing, or drop .devcarry trees"
fi
