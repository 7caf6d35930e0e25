#!/usr/bin/env bash
# Put the package of other revisions beside this checkout for one device call that profiles them side by side:
#   bash benchmarks/devcarry-trees.sh huge=output-copy-huge views=cheap-views before=main~3
# writes .devcarry/NAME/dask_hwdecomp (about 1.5 MB each) for run-h200-profile.sh's tree-NAME mode (and
# `before` for its before mode). WITH_TESTS=1 also writes each revision's tests (without tests/data, which
# the device links to this checkout's) and pyproject.toml, for its tests-NAME mode: several branches' GPU
# suites and profiles in one device call. Carry .devcarry; .whl and .devcarry together must fit the
# device's 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
for pair in "$@"; do
  name=${pair%%=*}; rev=${pair#*=}
  if [ -z "$name" ] || [ "$name" = "$pair" ]; then echo "give NAME=REVISION, not $pair" >&2; exit 2; fi
  rm -rf ".devcarry/$name" && mkdir -p ".devcarry/$name"
  if [ "${WITH_TESTS:-0}" = 1 ]; then
    git archive "$rev" dask_hwdecomp tests pyproject.toml | tar -x -C ".devcarry/$name" --exclude=tests/data
  else
    git archive "$rev" dask_hwdecomp | tar -x -C ".devcarry/$name"
  fi
  echo "$name: $(git rev-parse --short "$rev") $(du -sh ".devcarry/$name" | cut -f1)"
done
du -sh .devcarry .whl 2>/dev/null || true
