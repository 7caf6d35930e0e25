#!/usr/bin/env bash
# Run from a checkout's root before a device command: delete the package's numba caches when its sources differ
# from those of the last command that ran here. Numba checks only the source file of a function it caches, not
# the functions compiled into it, and a device machine keeps a checkout's ignored files between calls: a tree
# changed under the same checkout could run stale compiled code (a table check cached with an older Zstd block
# walk compiled into it did not check Huffman trees on the development machine, 2026-12-07).
stamp=.numba-sources.sha1
now=$(find dask_hwdecomp -name '*.py' -print0 | sort -z | xargs -0 sha1sum | sha1sum | cut -c1-40)
if [ "$(cat "$stamp" 2>/dev/null)" != "$now" ]; then
  gone=$(find dask_hwdecomp \( -name '*.nbi' -o -name '*.nbc' \) -print -delete | wc -l)
  [ "$gone" -gt 0 ] && echo "numba caches of other sources deleted: $gone files"
  echo "$now" > "$stamp"
fi
exit 0
