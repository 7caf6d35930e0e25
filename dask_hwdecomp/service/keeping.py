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
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

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
    """The kept runs of one batch (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: list[_KeptRun] = []

    def add(self, attachment: Any, segment: int, offset: int, nbytes: int, token: int) -> None:
        """Record run outputs kept as ``token`` by ``attachment``'s service, for ``[offset, offset + nbytes)`` of ``segment``."""
        with self._lock:
            self._runs.append(_KeptRun(attachment, segment, offset, nbytes, token))

    def take(self, attachment: Any, segment: int, offset: int, nbytes: int) -> list[int]:
        """The tokens of ``attachment`` whose runs lie in ``[offset, offset + nbytes)`` of ``segment``; removed."""
        with self._lock:
            mine = [r for r in self._runs if r.attachment is attachment and r.segment == segment
                    and offset <= r.offset and r.offset + r.nbytes <= offset + nbytes]
            taken = {id(r) for r in mine}
            self._runs = [r for r in self._runs if id(r) not in taken]
        return [r.token for r in mine]

    def drop_all(self) -> None:
        """Tell each service to drop the tokens not taken (never raises)."""
        with self._lock:
            runs, self._runs = self._runs, []
        by_attachment: dict[int, tuple[Any, list[int]]] = {}
        for r in runs:
            by_attachment.setdefault(id(r.attachment), (r.attachment, []))[1].append(r.token)
        for attachment, tokens in by_attachment.values():
            attachment.notify(wire.Drop(tokens))
