"""Several decode plans as one: what lets the service decode concurrent reads in one launch sequence.

Each plan (a reading task's batch, checked by :mod:`~.checks`) numbers its
own uploaded bytes, chunks, pages, rows and dictionary entries from zero.
:func:`merge_plans` lays the plans one after the other in each of those
spaces and shifts the records' indices and offsets by their plan's base,
so that the kernels decode the lot as one batch; :func:`place_members`
gives each plan a region of one output buffer, laid out inside it exactly
as :func:`~.tables.place_outputs` lays out that plan alone (which is what
its client computes). Nothing here imports numba or CUDA.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..rounding import round_up
from .tables import ALIGN, CHUNK, PAGE, place_outputs

__all__ = ["PlanRecords", "MergedPlan", "merge_plans", "place_members", "DATA_ALIGN"]

# Each plan's bytes start on this boundary in the merged upload, so that any
# alignment a plan's own offsets have is kept.
DATA_ALIGN = 256


@dataclass(frozen=True)
class PlanRecords:
    """One plan as the service received it.

    Attributes
    ----------
    ranges : ndarray of int64, shape (n, 3)
        Upload ranges: source offset, bytes, offset in the plan's device copy.
    chunks, pages : ndarray of CHUNK, PAGE
    data_bytes : int
        Size of the plan's device copy.
    """

    ranges: np.ndarray
    chunks: np.ndarray
    pages: np.ndarray
    data_bytes: int


@dataclass(frozen=True)
class MergedPlan:
    """Plans laid one after the other; member ``i`` owns ``[base[i], base[i + 1])`` of each space.

    Attributes
    ----------
    chunks, pages : ndarray of CHUNK, PAGE
        The shifted records of every member, in member order.
    data_bytes : int
        Size of the merged device copy.
    data_base : ndarray of int64
        Each member's first byte in the merged copy (upload offsets shift by it).
    chunk_base, page_base : ndarray of int64, length members + 1
        Each member's first chunk and page record, and the totals.
    """

    chunks: np.ndarray
    pages: np.ndarray
    data_bytes: int
    data_base: np.ndarray
    chunk_base: np.ndarray
    page_base: np.ndarray

    def member_chunks(self, i: int, chunks: np.ndarray) -> np.ndarray:
        """Member ``i``'s slice of merged ``chunks`` (a copy)."""
        return chunks[self.chunk_base[i] : self.chunk_base[i + 1]].copy()

    def member_pages(self, i: int, pages: np.ndarray) -> np.ndarray:
        """Member ``i``'s slice of merged ``pages`` (a copy)."""
        return pages[self.page_base[i] : self.page_base[i + 1]].copy()


def _rows(chunks: np.ndarray) -> int:
    return int(chunks["num_rows"].sum())


def _dict_entries(chunks: np.ndarray, pages: np.ndarray) -> int:
    d = chunks["dict_page"]
    d = d[d >= 0]
    return int(pages["num_values"][d].astype(np.int64).sum())


def merge_plans(plans: Sequence[PlanRecords]) -> MergedPlan:
    """Lay ``plans`` one after the other as one batch.

    Every plan must have passed :func:`~.checks.check_plan`: rows and
    dictionary entries numbered from zero in chunk order. The merged plan
    then passes it too, each member's records pointing only into its own
    bytes, records, rows and entries.
    """
    n = len(plans)
    data_base = np.zeros(n, np.int64)
    chunk_base = np.zeros(n + 1, np.int64)
    page_base = np.zeros(n + 1, np.int64)
    chunks_out, pages_out = [], []
    data_at = rows_at = dict_at = 0
    for i, p in enumerate(plans):
        data_base[i] = data_at
        chunk_base[i + 1] = chunk_base[i] + len(p.chunks)
        page_base[i + 1] = page_base[i] + len(p.pages)
        c = np.array(p.chunks, CHUNK)
        g = np.array(p.pages, PAGE)
        has_dict = c["dict_page"] >= 0
        c["dict_page"][has_dict] += page_base[i]
        c["first_page"] += page_base[i]
        c["row_base"] += rows_at
        c["dict_base"] += dict_at
        g["chunk"] += chunk_base[i]
        g["offset"] += data_at
        g["row_start"] += rows_at
        chunks_out.append(c)
        pages_out.append(g)
        rows_at += _rows(p.chunks)
        dict_at += _dict_entries(p.chunks, p.pages)
        data_at += round_up(int(p.data_bytes), DATA_ALIGN)
    return MergedPlan(
        chunks=np.concatenate(chunks_out) if chunks_out else np.zeros(0, CHUNK),
        pages=np.concatenate(pages_out) if pages_out else np.zeros(0, PAGE),
        data_bytes=data_at,
        data_base=data_base,
        chunk_base=chunk_base,
        page_base=page_base,
    )


def place_members(merged: MergedPlan, chunks: np.ndarray) -> np.ndarray:
    """Place the measured merged ``chunks`` member by member in one output buffer.

    Sets the records' ``out_*`` fields: member ``i``'s buffers lie in
    ``[out_base[i], out_base[i + 1])``, placed inside it as
    :func:`~.tables.place_outputs` places that member alone. Returns
    ``out_base`` (int64, members + 1; the last is the output's size).
    """
    members = len(merged.chunk_base) - 1
    out_base = np.zeros(members + 1, np.int64)
    for i in range(members):
        lo, hi = int(merged.chunk_base[i]), int(merged.chunk_base[i + 1])
        mine = chunks[lo:hi].copy()
        size = place_outputs(mine)
        base = int(out_base[i])
        for name in ("out_valid", "out_values", "out_data"):
            col = mine[name]
            col[col >= 0] += base
        chunks[lo:hi] = mine
        out_base[i + 1] = base + round_up(size, ALIGN)
    return out_base
