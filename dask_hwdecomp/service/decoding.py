"""Decoding column chunks in the GPU service, seen from a reading process.

:func:`decode_in_service` (:meth:`ServiceClient.decode
<dask_hwdecomp.service.client.ServiceClient.decode>`) sends a decode plan
over a client's connection (the
same connection and shared segments as its decompression), in two
requests: *measure* (the service uploads the chunks from the batch's
shared buffer and measures), then, with the outputs placed here, *write*
(the service writes the Arrow buffers straight into a shared buffer of
this process).

Each request has the deadline of every request to the service
(:mod:`~dask_hwdecomp.service.deadline`: from when the service took it up,
a second plus time for its bytes and those queued ahead of it, at most
``gpu_timeout_s``); past it the service is killed as a hung one. A decode
whose service was lost (killed, hung, died on another reader's batch) is
sent once more, to a fresh service; lost again, it is
:class:`DecoderLost`, and the caller decodes with pyarrow and says why.

That shared buffer becomes the memory of the Arrow arrays: it goes back to
the pool when the last array over it is freed (:class:`OutputOwner`). So
that arrays kept alive for long (a ``persist``) can neither exhaust the
pool nor make the next reads wait for fresh memory to be pinned (the
service registers a new segment at 2 to 3 GB/s, stalling its other copies),
outputs are copied into ordinary memory, and their shared buffer given back
at once, while the outputs alive exceed :data:`ZERO_COPY_SHARE` of the
pool's cap (``pinned_bytes``); the read's report counts those copies. That
ordinary memory is reused once its arrays are gone, up to the same share
(:mod:`~dask_hwdecomp.service.spares`): a copy into fresh memory faults
every page in.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import timeline
from ..errors import BackendUnavailableError, HwdecompError
from ..gpudecode.tables import place_outputs
from . import wire
from .connection import Overdue, ServiceGone
from .keeping import KeptRuns
from .spares import spares_for

__all__ = ["DecodeOutput", "OutputOwner", "DecoderLost", "decode_in_service", "ZERO_COPY_SHARE"]

# Outputs alive over shared memory take at most this fraction (1/n) of the
# pool's cap; past it they are copied out. A read of 3 GB on 4 workers leaves
# about 750 MB of outputs per worker: with the default 4 GiB cap, a read
# released before the next one copies a third of them, and one still held
# (a persist) makes the next read copy all of its outputs instead of pinning
# 3 GB afresh (a held read took 1.9 s against 0.5 s on an H200).
ZERO_COPY_SHARE = 8


class DecoderLost(HwdecompError):
    """The GPU service died, hung or failed on a decode; nothing was decoded.

    The caller decodes those columns with pyarrow and says so in the report.
    ``retryable`` marks a service lost under the decode (it died, or was
    killed as hung, maybe for another reader's batch) rather than one that
    failed it: a fresh service may take it.
    """

    retryable = False


class _Lost(DecoderLost):
    retryable = True


@dataclass(frozen=True)
class DecodeOutput:
    """What a decode returns.

    Attributes
    ----------
    chunks : ndarray of CHUNK
        The measured records with their output placement.
    buffer : memoryview
        The output bytes (``place_outputs``'s layout).
    owner : object
        Keep it alive as long as any array over ``buffer``: the base of
        every ``pa.foreign_buffer``.
    copied : bool
        Whether the outputs were copied out of shared memory (pool pressure).
    """

    chunks: np.ndarray
    buffer: memoryview
    owner: Any
    copied: bool


class _Returns:
    """Output bytes alive in one client's shared pool, and the buffers whose arrays are gone.

    An owner's finalizer may run inside any code (the cyclic garbage
    collector), also inside the pool's own locked sections; so it only
    queues: the buffer goes back at the pool's next ``get`` (before the next
    read's buffers are taken, so they reuse it), and its bytes leave
    ``live_bytes`` at the next decode.
    """

    def __init__(self, pool) -> None:
        self.pool = pool
        self.released: collections.deque = collections.deque()
        self.live_bytes = 0
        self.lock = threading.Lock()

    def gone(self, shared, nbytes: int) -> None:
        self.released.append(nbytes)
        self.pool.give_back_later(shared)

    def drain(self) -> None:
        while True:
            try:
                nbytes = self.released.popleft()
            except IndexError:
                break
            with self.lock:
                self.live_bytes -= nbytes
        self.pool.drain()


_returns: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_returns_lock = threading.Lock()


def _returns_of(client) -> _Returns:
    with _returns_lock:
        r = _returns.get(client)
        if r is None:
            r = _returns[client] = _Returns(client.pool)
        return r


class OutputOwner:
    """Holds a shared output buffer; queued back to its pool when collected."""

    __slots__ = ("__weakref__",)

    def __init__(self, shared, nbytes: int, returns: _Returns):
        weakref.finalize(self, returns.gone, shared, nbytes)


def decode_in_service(client, plan, src: memoryview, kept: KeptRuns | None = None) -> DecodeOutput:
    """Decode ``plan``'s chunks in the service; see :func:`_decode_once`.

    A decode whose service was lost (found closed, died, or killed as hung:
    maybe for another reader's batch) is sent once more, to a fresh
    service; one the service failed (a GPU error) is not.

    Raises
    ------
    CorruptPageError, BackendUnavailableError, DecoderLost
    """
    try:
        return _decode_once(client, plan, src, kept)
    except DecoderLost as exc:
        if not exc.retryable:
            raise
        if kept is not None and kept.host_lacks:
            # The pages only the lost service held are not in src: pyarrow decodes.
            raise DecoderLost(f"{exc.reason} (pages it kept on the device went with it)") from None
        first = exc.reason
    try:
        out = _decode_once(client, plan, src, kept)
    except DecoderLost as exc:
        raise DecoderLost(f"{exc.reason} (sent again after: {first})") from None
    client.retried += 1
    return out


def _share(att, segment) -> None:
    try:
        att.share(segment)
    except OSError as exc:
        att.die(f"closed its connection ({exc})")
        raise _Lost(f"the GPU service's connection was closed ({exc})") from None


def _decode_once(client, plan, src: memoryview, kept: KeptRuns | None) -> DecodeOutput:
    """Decode ``plan``'s chunks from ``src`` (the batch's shared buffer) in the service.

    Parameters
    ----------
    client : ServiceClient
        An attached client; its connection carries the decode, its pool
        the output.
    plan : DecodePlan
        From :func:`dask_hwdecomp.gpudecode.plan.plan_batch`: ``chunks``,
        ``pages``, ``ranges``, ``data_bytes`` and ``page_location(page)``.
    src : memoryview
        The host buffer the plan's ranges read.
    kept : KeptRuns, optional
        The batch's runs whose outputs the service kept on the device: the
        measure names those that lie in ``src``, and the service reads
        their pages there rather than from ``src``.

    Raises
    ------
    CorruptPageError
        A page the kernels found invalid, named.
    BackendUnavailableError
        The service cannot run the GPU decoder.
    DecoderLost
        The service died, hung or failed on this decode.
    """
    returns = _returns_of(client)
    returns.drain()
    staged: list = []
    try:
        with timeline.span("decode_share_src", nbytes=len(src)):
            src_ref = client.shared_ref(src, staged, copy_in=True)
        att = client.connection()
        blob = wire.pack_plan(plan.ranges, plan.chunks, plan.pages)
        tokens = [] if kept is None or src_ref.staged is not None else kept.take(
            att, src_ref.segment.id, src_ref.offset, src_ref.nbytes)
        if kept is not None and kept.host_lacks and (src_ref.staged is not None or kept.others(att)):
            raise DecoderLost("pages the GPU service kept on the device are not in reach of this decode "
                              "(its connection was replaced)")
        measure_msg = wire.Measure(rid=0, src_seg=src_ref.segment.id, src_offset=src_ref.offset,
                                   src_nbytes=src_ref.nbytes, data_bytes=int(plan.data_bytes),
                                   nranges=len(plan.ranges), nchunks=len(plan.chunks), npages=len(plan.pages),
                                   kept=tokens)
        _share(att, src_ref.segment)
        with timeline.span("decode_ask_measure", nbytes=int(plan.data_bytes)):
            reply, rid = _ask(client, att, lambda rid: (_with_rid(measure_msg, rid), blob),
                              int(plan.data_bytes) + src_ref.nbytes)
        _raise_for(reply, plan, "measure")
        if not isinstance(reply, wire.Measured):
            raise DecoderLost(f"the GPU service answered a measure with {type(reply).__name__}")
        chunks = plan.chunks.copy()
        if len(reply.null_counts) != len(chunks) or len(reply.data_bytes) != len(chunks):
            raise DecoderLost("the GPU service measured another number of chunks")
        chunks["null_count"] = reply.null_counts
        chunks["data_bytes"] = reply.data_bytes
        nbytes = place_outputs(chunks)
        with timeline.span("decode_out_buffer", nbytes=nbytes):
            out = client.host_buffer(max(nbytes, 1))
        try:
            placed = wire.placements(chunks).tobytes()
            dst_ref = client.shared_ref(out.view, [], copy_in=False)  # lent by this pool: never staged
            _share(att, dst_ref.segment)
            write = wire.Write(rid=0, measure=rid, dst_seg=dst_ref.segment.id, dst_offset=dst_ref.offset,
                               dst_nbytes=nbytes)
            with timeline.span("decode_ask_write", nbytes=nbytes):
                reply, _ = _ask(client, att, lambda r: (_with_rid(write, r), placed), nbytes)
            _raise_for(reply, plan, "write")
            if not isinstance(reply, wire.Done):
                raise DecoderLost(f"the GPU service answered a write with {type(reply).__name__}")
        except BaseException:
            out.close()
            raise
        with returns.lock:
            pressed = returns.live_bytes + nbytes > client.pool.cap_bytes // ZERO_COPY_SHARE
            if not pressed:
                returns.live_bytes += nbytes
        if pressed:
            with timeline.span("decode_output_copy", nbytes=nbytes):
                view, owner = spares_for(client, client.pool.cap_bytes // ZERO_COPY_SHARE).take(nbytes)
                np.frombuffer(view, dtype=np.uint8)[:] = np.frombuffer(out.view, dtype=np.uint8, count=nbytes)
            out.close()
            return DecodeOutput(chunks, view, owner, True)
        view = out.view[:nbytes]
        return DecodeOutput(chunks, view, OutputOwner(out, nbytes, returns), False)
    finally:
        for buf in staged:
            buf.close()


def _with_rid(msg, rid: int):
    return dataclasses.replace(msg, rid=rid)


def _ask(client, att, make, nbytes: int):
    """Send one request of ``nbytes`` in and out; (reply, rid).

    A request past its deadline kills the service; that and a death are a
    retryable :class:`DecoderLost`.
    """
    box: dict = {}

    def made(rid: int):
        box["rid"] = rid
        return make(rid)

    try:
        flight = att.request(made)
        return flight.wait(nbytes, client.options.gpu_timeout_s), box["rid"]
    except Overdue as late:
        client.timeouts += 1
        att.kill(late.reason)
        raise _Lost(f"the GPU service {late.reason} on a decode; it was killed") from None
    except ServiceGone as gone:
        if not box:  # refused before sending: the connection was already gone
            raise _Lost(f"the GPU service was gone before the decode ({gone.reason})") from None
        raise _Lost(f"the GPU service died during a decode ({gone.reason})") from None
    except OSError as exc:
        att.die(f"closed its connection ({exc})")
        raise _Lost(f"the GPU service closed its connection during a decode ({exc})") from None


def _raise_for(reply, plan, step: str) -> None:
    if isinstance(reply, wire.Corrupt):
        if not 0 <= reply.index < len(plan.pages):
            raise HwdecompError(f"the GPU service named page {reply.index} of a decode of {len(plan.pages)}")
        raise wire.corrupt_error(reply, plan.page_location(reply.index))
    if isinstance(reply, wire.Refused):
        raise HwdecompError(f"the GPU service refused a decode {step}: {reply.reason}")
    if isinstance(reply, wire.Failed):
        if reply.error_type == BackendUnavailableError.__name__:
            raise BackendUnavailableError(reply.message)
        raise DecoderLost(f"the GPU service failed a decode {step} ({reply.error_type}: {reply.message}); "
                          "it exits and the next read starts a fresh one")
