"""Placeholder for the BYTE_ARRAY kernels (another branch provides them): does nothing."""

from __future__ import annotations

__all__ = ["measure_bytes", "write_bytes"]


def measure_bytes(state) -> None:
    """Measure string lengths (placeholder: nothing)."""


def write_bytes(state, out) -> None:
    """Write offsets and string bytes (placeholder: nothing)."""
