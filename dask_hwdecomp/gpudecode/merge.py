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
from .tables import CHUNK, PAGE, output_bytes, place_outputs

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


def merge_plans(plans: Sequence[PlanRecords]) -> MergedPlan:
    """Lay ``plans`` one after the other as one batch.

    Every plan must have passed :func:`~.checks.check_plan`: rows and
    dictionary entries numbered from zero in chunk order. The merged plan
    then passes it too, each member's records pointing only into its own
    bytes, records, rows and entries. The records are shifted all at once
    (no Python a chunk or page).

    Raises
    ------
    ValueError
        A chunk's dictionary page outside its own plan's pages.
    """
    n = len(plans)
    chunk_base = np.zeros(n + 1, np.int64)
    page_base = np.zeros(n + 1, np.int64)
    chunk_base[1:] = np.cumsum([len(p.chunks) for p in plans])
    page_base[1:] = np.cumsum([len(p.pages) for p in plans])
    sizes = np.array([round_up(int(p.data_bytes), DATA_ALIGN) for p in plans], np.int64)
    data_base = np.cumsum(sizes) - sizes
    c = np.concatenate([np.asarray(p.chunks, CHUNK) for p in plans]) if n else np.zeros(0, CHUNK)
    g = np.concatenate([np.asarray(p.pages, PAGE) for p in plans]) if n else np.zeros(0, PAGE)
    # member of each record
    cm = np.repeat(np.arange(n), np.diff(chunk_base))
    pm = np.repeat(np.arange(n), np.diff(page_base))
    d = c["dict_page"].astype(np.int64)
    has_dict = d >= 0
    if (d[has_dict] >= np.diff(page_base)[cm[has_dict]]).any():
        raise ValueError("a chunk's dictionary page lies outside its plan's pages")
    d[has_dict] += page_base[cm[has_dict]]
    # rows and dictionary entries before each member: running sums over every chunk before it
    rows_at = _before(c["num_rows"].astype(np.int64), chunk_base)
    entries = np.zeros(len(c), np.int64)
    entries[has_dict] = g["num_values"][d[has_dict]]
    dict_at = _before(entries, chunk_base)
    c["dict_page"] = np.where(has_dict, d, c["dict_page"])
    c["first_page"] += page_base[cm]
    c["row_base"] += rows_at[cm]
    c["dict_base"] += dict_at[cm]
    g["chunk"] += chunk_base[pm]
    g["offset"] += data_base[pm]
    g["row_start"] += rows_at[pm]
    return MergedPlan(chunks=c, pages=g, data_bytes=int(sizes.sum()), data_base=data_base,
                      chunk_base=chunk_base, page_base=page_base)


def _before(values: np.ndarray, bases: np.ndarray) -> np.ndarray:
    """For each member (records ``[bases[i], bases[i + 1])``), the sum of ``values`` of the records before it."""
    total = np.zeros(len(values) + 1, np.int64)
    np.cumsum(values, out=total[1:])
    return total[bases[:-1]]


def place_members(merged: MergedPlan, chunks: np.ndarray) -> np.ndarray:
    """Place the measured merged ``chunks`` member by member in one output buffer.

    Sets the records' ``out_*`` fields: member ``i``'s buffers lie in
    ``[out_base[i], out_base[i + 1])``, placed inside it as
    :func:`~.tables.place_outputs` places that member alone. Returns
    ``out_base`` (int64, members + 1; the last is the output's size).

    Every chunk's buffers take a multiple of :data:`~.tables.ALIGN`, so
    placing all the chunks at once is exactly that (:func:`~.tables.output_bytes`).
    """
    sizes = output_bytes(chunks)
    place_outputs(chunks)
    total = np.zeros(len(chunks) + 1, np.int64)
    np.cumsum(sizes, out=total[1:])
    return total[merged.chunk_base]
