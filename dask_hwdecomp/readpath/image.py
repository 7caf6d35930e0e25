"""The uncompressed in-memory copy of one piece, as a batch hands it on (:class:`Image`).

Its own module so that the steps after decompression (the GPU column
decoder, the decode report) take it without importing the batch that makes
it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from .plan import PiecePlan

__all__ = ["Image"]


@dataclass
class Image:
    """The uncompressed in-memory copy of one piece.

    ``buffer`` holds an uncompressed Parquet file with the piece's row
    groups in order: row group ``i`` of the image is ``row_groups[i]`` of
    the original file.

    ``decoded`` holds the columns already decoded into Arrow (on the GPU),
    by column name, each for exactly the image's row groups; pyarrow
    decodes every other column from ``buffer``. ``why_not_gpu`` says, per
    column, why the GPU did not decode it; ``cpu_reason`` why it decoded
    none of the image's columns (empty when it was asked to).

    ``restore``, where not None, decompresses on the host the bytes of
    ``buffer`` that only the GPU received (the pages of the columns it
    decodes were left on the device): call it before pyarrow reads any
    column of ``decoded`` from ``buffer`` (idempotent).
    """

    plan: PiecePlan
    buffer: pa.Buffer
    row_groups: list[int]
    decoded: dict[str, pa.ChunkedArray] = field(default_factory=dict)
    why_not_gpu: dict[str, str] = field(default_factory=dict)
    cpu_reason: str = ""
    restore: Callable[[], None] | None = None

    def reason(self, column: str) -> str:
        """Why pyarrow, not the GPU, decoded ``column`` of this image."""
        return self.why_not_gpu.get(column) or self.cpu_reason or "not decoded on the GPU"
