"""Repeated measurements and their min / median / max."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["summarize", "ratio"]


def summarize(values: Sequence[float]) -> dict:
    """``{"min", "median", "max", "n", "values"}`` of ``values`` (all None if empty)."""
    vals = [float(v) for v in values]
    if not vals:
        return {"min": None, "median": None, "max": None, "n": 0, "values": []}
    return {
        "min": min(vals),
        "median": statistics.median(vals),
        "max": max(vals),
        "n": len(vals),
        "values": vals,
    }


def ratio(a: dict | None, b: dict | None) -> float | None:
    """Ratio of the medians of two summaries, or None if either is missing."""
    if not a or not b or not a.get("median") or not b.get("median"):
        return None
    return a["median"] / b["median"]
