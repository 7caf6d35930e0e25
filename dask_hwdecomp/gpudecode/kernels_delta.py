"""Placeholder for the DELTA_* kernels (another branch provides them): does nothing."""

from __future__ import annotations

__all__ = ["measure_delta", "write_delta"]


def measure_delta(state) -> None:
    """Measure DELTA pages (placeholder: nothing)."""


def write_delta(state, out) -> None:
    """Write DELTA_BINARY_PACKED values (placeholder: nothing)."""
