"""The one rule that cuts work to the ``batch_bytes`` budget.

Three places cut work by ``Options.batch_bytes``: the reader groups a
partition's pieces into *batches* (by the uncompressed size their footers
claim), a GPU backend cuts a batch's jobs into *parts* (by output size), and
its batcher merges the parts of concurrent callers into one GPU *call*. All
three apply :func:`split_by_budget`'s rule, from here: items are taken in
order, and an item joins the group being built while the group stays
within the budget; the first item of a group always joins, so an item
larger than the budget makes a group of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

import numpy as np

__all__ = ["split_by_budget", "split_sizes", "take_within_budget"]

T = TypeVar("T")


def _joins(count: int, total: int, size: int, budget: int) -> bool:
    """Whether an item of ``size`` bytes joins a group of ``count`` items and ``total`` bytes."""
    return count == 0 or total + size <= budget


def split_by_budget(items: Iterable[T], size_of: Callable[[T], int], budget: int) -> list[list[T]]:
    """Consecutive groups of ``items``, each within ``budget`` bytes unless it is one item.

    Parameters
    ----------
    items : iterable
        In the order they are to be processed; the order is kept.
    size_of : callable
        The bytes an item counts for.
    budget : int
        The most bytes of one group.

    Returns
    -------
    list of list
        No empty group (no group at all for no items).
    """
    groups: list[list[T]] = []
    group: list[T] = []
    total = 0
    for item in items:
        size = size_of(item)
        if not _joins(len(group), total, size, budget):
            groups.append(group)
            group, total = [], 0
        group.append(item)
        total += size
    if group:
        groups.append(group)
    return groups


def split_sizes(sizes, budget: int) -> list[tuple[int, int]]:
    """:func:`split_by_budget`'s groups of items of ``sizes`` bytes, as ``(start, end)`` index ranges.

    For a table of thousands of items: one search per group, not a step per item.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    ends = np.cumsum(sizes)
    groups: list[tuple[int, int]] = []
    start, n = 0, len(sizes)
    while start < n:
        before = int(ends[start - 1]) if start else 0
        # every item up to the last whose running total stays within the budget; at least one
        end = max(int(np.searchsorted(ends, before + budget, side="right")), start + 1)
        groups.append((start, end))
        start = end
    return groups


def take_within_budget(sizes: Iterable[int], budget: int) -> int:
    """How many leading items, of ``sizes`` bytes each, form the first group of :func:`split_by_budget`.

    For a queue whose later items are not known yet: at least 1 when
    ``sizes`` has an item.
    """
    count = total = 0
    for size in sizes:
        if not _joins(count, total, size, budget):
            break
        count += 1
        total += size
    return count
