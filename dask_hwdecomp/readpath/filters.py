"""The column names a row filter refers to."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute.Expression)

__all__ = ["filter_columns"]


def filter_columns(filters) -> set:
    """Names a filter refers to (DNF list, or a pyarrow expression)."""
    if isinstance(filters, pa.compute.Expression):
        expr = str(filters)
        # pyarrow prints field refs as bare names; cheap and safe: take all
        # identifiers, unknown ones select nothing.
        return set(re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", expr))
    out = set()
    stack = [filters]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple) and len(item) == 3 and isinstance(item[0], str):
            out.add(item[0])
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return out
