"""Rounding sizes and offsets up to an alignment (device buffers, image bases)."""

from __future__ import annotations

__all__ = ["round_up"]


def round_up(n: int, multiple: int) -> int:
    """``n`` rounded up to a multiple of ``multiple`` (a positive integer)."""
    return (n + multiple - 1) // multiple * multiple
