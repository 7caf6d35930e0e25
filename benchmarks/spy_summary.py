"""Summarise a py-spy raw profile (``--format raw``): threads, own and inclusive shares of frames.

Usage::

    python benchmarks/spy_summary.py SPY.txt [--top 50]

``run-h200-profile.sh spy`` records the GPU service with ``py-spy record
--gil --format raw``: each line is one stack (frames joined by ``;``, the
thread's outermost first) and its sample count. Printed: the samples in
all, each thread root's share, each frame's share as the innermost frame
(``own``: where the interpreter was) and anywhere in the stack
(``inclusive``: what it spent below).
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path


def summarise(lines: list[str]) -> tuple[int, collections.Counter, collections.Counter, collections.Counter]:
    """(samples, by thread root, by innermost frame, by any frame) of raw py-spy lines."""
    total = 0
    threads: collections.Counter = collections.Counter()
    own: collections.Counter = collections.Counter()
    inclusive: collections.Counter = collections.Counter()
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        threads[frames[0]] += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    return total, threads, own, inclusive


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("profile", type=Path)
    p.add_argument("--top", type=int, default=50)
    args = p.parse_args(argv)
    total, threads, own, inclusive = summarise(args.profile.read_text().splitlines())
    print(f"total samples {total}")
    for title, counter, top in (("threads", threads, 12), ("own", own, args.top),
                                ("inclusive", inclusive, 2 * args.top)):
        print(f"--- {title}")
        for frame, n in counter.most_common(top):
            print(f"{100 * n / max(total, 1):5.1f} {frame[:160]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
