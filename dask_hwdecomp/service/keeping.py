"""A batch's runs whose outputs the GPU service keeps on the device, seen from the reading process.

Inside :meth:`ServiceClient.keeping() <dask_hwdecomp.service.client.ServiceClient.keeping>`,
each run the batch sends asks the service to keep its outputs on the
device, and the token its ``Done`` carries is recorded here with the
connection and the shared range it names. The batch's decode takes the
tokens that lie in its source buffer (:meth:`KeptRuns.take`) and names
them in its measure; whatever was not taken is dropped in the service when
the batch leaves the block, so kept pages live no longer than their batch.
Tokens of a connection that has since been replaced are never sent (the
service that made them is gone).

A batch that plans its decode before decompressing sets
:attr:`KeptRuns.device_only`: the ranges of its buffer that only the GPU
decoder reads. Its runs send them, and where a run's outputs are kept the
service does not copy those bytes back; :attr:`KeptRuns.host_lacks` then
says so, and whoever reads those ranges on the host after all (pyarrow,
where the decode fails) decompresses them there first.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import wire

__all__ = ["KeptRuns"]


@dataclass(frozen=True)
class _KeptRun:
    attachment: Any
    segment: int
    offset: int
    nbytes: int
    token: int


class KeptRuns:
    """The kept runs of one batch (see the module docstring).

    Attributes
    ----------
    device_only : ndarray of int64, shape (n, 2)
        Sorted, disjoint (start, end) ranges of the batch's buffer that only
        the GPU decoder reads (none by default).
    host_lacks : bool
        A run's kept outputs in ``device_only`` were not copied back.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: list[_KeptRun] = []
        self.device_only = np.zeros((0, 2), np.int64)
        self.host_lacks = False

    def device_only_within(self, nbytes: int) -> np.ndarray:
        """:attr:`device_only`, checked to lie in a buffer of ``nbytes``.

        Raises
        ------
        ValueError
            A range lies outside, or the ranges are not sorted and disjoint.
        """
        r = np.asarray(self.device_only, np.int64).reshape(-1, 2)
        if not wire.ranges_fit(r, nbytes):
            raise ValueError(f"device-only ranges that are not sorted, disjoint ranges of {nbytes} bytes")
        return r

    def add(self, attachment: Any, segment: int, offset: int, nbytes: int, token: int,
            device_only: bool = False) -> None:
        """Record run outputs kept as ``token`` by ``attachment``'s service, for ``[offset, offset + nbytes)`` of ``segment``.

        ``device_only``: the run sent :attr:`device_only`, so the host may
        lack those bytes.
        """
        with self._lock:
            self._runs.append(_KeptRun(attachment, segment, offset, nbytes, token))
            self.host_lacks = self.host_lacks or device_only

    def take(self, attachment: Any, segment: int, offset: int, nbytes: int) -> list[int]:
        """The tokens of ``attachment`` whose runs lie in ``[offset, offset + nbytes)`` of ``segment``; removed."""
        with self._lock:
            mine = [r for r in self._runs if r.attachment is attachment and r.segment == segment
                    and offset <= r.offset and r.offset + r.nbytes <= offset + nbytes]
            taken = {id(r) for r in mine}
            self._runs = [r for r in self._runs if id(r) not in taken]
        return [r.token for r in mine]

    def others(self, attachment: Any) -> bool:
        """Whether runs of another connection than ``attachment`` (a service since replaced) are recorded."""
        with self._lock:
            return any(r.attachment is not attachment for r in self._runs)

    def drop_all(self) -> None:
        """Tell each service to drop the tokens not taken (never raises)."""
        with self._lock:
            runs, self._runs = self._runs, []
        by_attachment: dict[int, tuple[Any, list[int]]] = {}
        for r in runs:
            by_attachment.setdefault(id(r.attachment), (r.attachment, []))[1].append(r.token)
        for attachment, tokens in by_attachment.values():
            attachment.notify(wire.Drop(tokens))
