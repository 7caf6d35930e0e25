"""The messages between a reading process and the GPU service.

A message is a frame on a Unix stream socket: a fixed header (the lengths
of its two parts and how many file descriptors ride with it), a JSON object
naming the message's ``kind`` and its fields, and a binary part (jobs and
protected ranges as int64 arrays, for :class:`Run` only). File descriptors
(shared memory segments, :class:`Share`) travel as ``SCM_RIGHTS`` with the
frame's first byte: memory is passed by descriptor, never by a name another
process could guess.

Nothing received is executed: no pickle, every frame is bounded before it
is read, every message is checked against its record (the field names, and
each value's type) and every job against the buffers it names
(:func:`unpack_jobs`). A frame that fails is a :class:`WireError`, which the
service logs and refuses.
"""

from __future__ import annotations

import array
import dataclasses
import json
import os
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..errors import BackendUnavailableError, ChecksumError, CorruptPageError, HwdecompError, PageLocation
from ..gpu.errors import CudaError, NvcompError
from ..gpudecode.tables import CHUNK, PAGE
from ..jobs import ALGOS, JOB_FIELDS, Job, JobTable, as_table

__all__ = [
    "WireError", "FrameError", "Message", "send", "receive", "pack_jobs", "pack_protect", "unpack_jobs",
    "pack_device_only", "unpack_device_only", "ranges_fit", "JOB_FIELDS", "MESSAGES",
    "Attach", "Share", "Forget", "Run", "Measure", "Write", "Discard", "Drop", "StatsRequest", "Stop",
    "Hello", "Unavailable", "Started", "Done", "Measured", "Corrupt", "Failed", "Stats", "Refused",
    "pack_plan", "unpack_plan", "placements", "unpack_placements", "corrupt_error", "failure_error",
]

_HEADER = struct.Struct("<IQI")  # JSON bytes, binary bytes, file descriptors
MAX_JSON_BYTES = 1 << 20
MAX_BLOB_BYTES = 1 << 30
MAX_FDS = 8


_U32 = 1 << 32


class WireError(HwdecompError):
    """A message that is malformed, of an unknown kind, or names what it may not."""


class FrameError(WireError):
    """A frame out of bounds: the stream cannot be trusted after it (close it)."""


# -- the records -------------------------------------------------------------

_Scalar = (int, float, str, bool, type(None))


@dataclass(frozen=True)
class Message:
    """Base of every message; ``kind`` is the class name on the wire."""

    kinds: ClassVar[dict[str, type[Message]]] = {}

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        Message.kinds[cls.__name__] = cls

    def to_json(self) -> dict:
        return {"kind": type(self).__name__, **dataclasses.asdict(self)}


# A field's annotation -> the Python types its JSON value may have.
_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,), "str": (str,), "bool": (bool,), "dict": (dict,), "list[int]": (list,), "list[str]": (list,),
    "int | None": (int, type(None)),
}
# A list field's annotation -> the type of every item.
_ITEMS: dict[str, type] = {"list[int]": int, "list[str]": str}


def _types(cls: type[Message]) -> dict[str, tuple[type, ...]]:
    return {f.name: _TYPES[str(f.type)] for f in dataclasses.fields(cls)}


def _item_types(cls: type[Message]) -> dict[str, type]:
    return {f.name: _ITEMS[str(f.type)] for f in dataclasses.fields(cls) if str(f.type) in _ITEMS}


@dataclass(frozen=True)
class Attach(Message):
    """Client to service, first: use hosted backend ``backend`` with these options."""

    backend: str
    options: dict
    pid: int


@dataclass(frozen=True)
class Share(Message):
    """Client to service: segment ``seg_id`` (its descriptor rides with the frame)."""

    seg_id: int
    nbytes: int


@dataclass(frozen=True)
class Forget(Message):
    """Client to service: segment ``seg_id`` was freed; unmap it."""

    seg_id: int


@dataclass(frozen=True)
class Run(Message):
    """Client to service: decompress ``njobs`` jobs (binary part) from src to dst.

    ``keep``: also keep the outputs on the device for a decode of them
    (the :class:`Done` names them). The binary part is the jobs, then
    ``nprotect`` protected ranges, then ``ndevice`` ranges of ``dst`` that
    only the decode reads (:func:`unpack_device_only`): where the outputs
    are kept, their bytes there are not copied back.
    """

    rid: int
    src_seg: int
    src_offset: int
    src_nbytes: int
    dst_seg: int
    dst_offset: int
    dst_nbytes: int
    njobs: int
    nprotect: int
    keep: bool
    ndevice: int = 0


@dataclass(frozen=True)
class Measure(Message):
    """Client to service: upload column chunks and measure their decoding (GPU decoder).

    The binary part is ``nranges`` upload ranges (int64 rows of source
    offset, bytes, offset in the device copy), then ``nchunks`` CHUNK and
    ``npages`` PAGE records (:mod:`dask_hwdecomp.gpudecode.tables`).
    ``kept`` names runs whose outputs the service kept on the device
    (:class:`Done`): the decode reads their pages there, and they are
    dropped after it.
    """

    rid: int
    src_seg: int
    src_offset: int
    src_nbytes: int
    data_bytes: int
    nranges: int
    nchunks: int
    npages: int
    kept: list[int]


@dataclass(frozen=True)
class Write(Message):
    """Client to service: write the Arrow buffers of measured decode ``measure`` into dst.

    The binary part is one int64 row per chunk: ``out_valid``,
    ``out_values``, ``out_data``.
    """

    rid: int
    measure: int
    dst_seg: int
    dst_offset: int
    dst_nbytes: int


@dataclass(frozen=True)
class Discard(Message):
    """Client to service: drop measured decode ``measure`` without writing it."""

    measure: int


@dataclass(frozen=True)
class Drop(Message):
    """Client to service: the outputs of these runs kept on the device are not needed any more."""

    kept: list[int]


@dataclass(frozen=True)
class StatsRequest(Message):
    """Client to service: the counters of the service and of the attached backend."""

    rid: int


@dataclass(frozen=True)
class Stop(Message):
    """Client to service: finish what runs, then exit (``hwdecomp service stop``)."""

    reason: str


@dataclass(frozen=True)
class Hello(Message):
    """Service to client: the attached backend's capabilities."""

    name: str
    algorithms: list[str]
    max_job_bytes: int | None
    overwrites_gaps: bool
    service_pid: int


@dataclass(frozen=True)
class Unavailable(Message):
    """Service to client: the backend cannot be created."""

    error_type: str
    message: str


@dataclass(frozen=True)
class Started(Message):
    """Service to client: request ``rid`` is taken up (by the backend's batcher or the decoder).

    Its deadline counts from here (:mod:`~dask_hwdecomp.service.deadline`):
    ``ahead`` bytes (in and out) of requests taken up before it are not yet
    answered, every client's; ``bytes_per_s`` is the rate the service
    grants (0: none known, only ``gpu_timeout_s`` bounds the request).
    """

    rid: int
    ahead: int
    bytes_per_s: int


@dataclass(frozen=True)
class Done(Message):
    """Service to client: run ``rid`` finished; ``redone`` pages were redone on the CPU.

    ``kept``: the name of its outputs kept on the device (a :class:`Run`
    that asked to keep them), or -1 where none were kept.
    """

    rid: int
    redone: int
    kept: int


@dataclass(frozen=True)
class Measured(Message):
    """Service to client: the measure ``rid`` (per chunk null counts and string bytes)."""

    rid: int
    null_counts: list[int]
    data_bytes: list[int]


@dataclass(frozen=True)
class Corrupt(Message):
    """Service to client: job ``index`` of run ``rid`` failed."""

    rid: int
    index: int
    error_type: str
    message: str


@dataclass(frozen=True)
class Failed(Message):
    """Service to client: run ``rid`` failed as a whole (the service then exits)."""

    rid: int
    error_type: str
    message: str
    code: int
    name: str


@dataclass(frozen=True)
class Stats(Message):
    """Service to client: ``{counter: number}``."""

    rid: int
    values: dict


@dataclass(frozen=True)
class Refused(Message):
    """Service to client: a message failed validation (``rid`` -1 if it had none)."""

    rid: int
    reason: str


MESSAGES = dict(Message.kinds)
# field name -> accepted Python types (bool is never an int here)
_FIELD_TYPES = {name: _types(cls) for name, cls in MESSAGES.items()}
_ITEM_TYPES = {name: _item_types(cls) for name, cls in MESSAGES.items()}


def _decode(obj: Any) -> Message:
    if not isinstance(obj, dict):
        raise WireError("a message is not a JSON object")
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in MESSAGES:
        raise WireError(f"unknown message kind {kind!r}")
    cls = MESSAGES[kind]
    types = _FIELD_TYPES[kind]
    fields = {k: v for k, v in obj.items() if k != "kind"}
    if set(fields) != set(types):
        raise WireError(f"{kind} has fields {sorted(fields)}, expected {sorted(types)}")
    for name, value in fields.items():
        accepted = types[name]
        if isinstance(value, bool) and bool not in accepted:
            raise WireError(f"{kind}.{name} is a boolean")
        if not isinstance(value, accepted):
            raise WireError(f"{kind}.{name} is a {type(value).__name__}")
        if isinstance(value, dict) and not all(
                isinstance(k, str) and isinstance(v, _Scalar) for k, v in value.items()):
            raise WireError(f"{kind}.{name} holds more than names and plain values")
        if isinstance(value, list):
            item = _ITEM_TYPES[kind][name]
            if not all(isinstance(v, item) and not isinstance(v, bool) for v in value):
                raise WireError(f"{kind}.{name} holds other than {'integers' if item is int else 'strings'}")
    return cls(**fields)


# -- frames ------------------------------------------------------------------

def send(sock: socket.socket, msg: Message, blob: bytes | memoryview = b"", fds: Sequence[int] = ()) -> None:
    """Send one frame (callers serialise concurrent senders).

    Raises
    ------
    OSError
        The peer is gone.
    """
    body = json.dumps(msg.to_json(), separators=(",", ":")).encode()
    head = _HEADER.pack(len(body), len(blob), len(fds)) + body
    if fds:
        sent = sock.sendmsg([head], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        if sent < len(head):
            sock.sendall(head[sent:])
    else:
        sock.sendall(head)
    if len(blob):
        sock.sendall(blob)


def _exactly(sock: socket.socket, n: int) -> bytearray:
    out = bytearray(n)
    view = memoryview(out)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError("the peer closed the connection")
        got += k
    return out


def receive(sock: socket.socket) -> tuple[Message, bytes, list[int]]:
    """One frame: (message, binary part, received descriptors, owned by the caller).

    Raises
    ------
    EOFError
        The peer closed the connection between frames.
    WireError
        The message is invalid (descriptors that came with it are closed);
        a :class:`FrameError` when the frame itself is out of bounds, after
        which the stream cannot be trusted: close the connection.
    """
    fds = array.array("i")
    head, anc, _, _ = sock.recvmsg(_HEADER.size, socket.CMSG_SPACE(MAX_FDS * fds.itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    received = list(fds)
    try:
        if not head:
            raise EOFError("the peer closed the connection")
        if len(head) < _HEADER.size:
            head += _exactly(sock, _HEADER.size - len(head))
        njson, nblob, nfds = _HEADER.unpack(head)
        if njson > MAX_JSON_BYTES or nblob > MAX_BLOB_BYTES or nfds > MAX_FDS:
            raise FrameError(f"a frame of {njson} + {nblob} bytes and {nfds} descriptors is out of bounds")
        if nfds != len(received):
            raise FrameError(f"a frame announced {nfds} descriptors and carried {len(received)}")
        body = bytes(_exactly(sock, njson))
        blob = bytes(_exactly(sock, nblob)) if nblob else b""
        try:
            obj = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise WireError(f"a message is not JSON: {exc}") from None
        return _decode(obj), blob, received
    except BaseException:
        for fd in received:
            _close(fd)
        raise


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


# -- jobs ----------------------------------------------------------------------

def pack_jobs(jobs: Sequence[Job] | JobTable) -> bytes:
    """Jobs as an (n, 10) int64 array of :data:`JOB_FIELDS`; a CRC absent is -1."""
    return as_table(jobs).to_bytes()


def pack_protect(ranges: Sequence[tuple[int, int]]) -> bytes:
    """Protected ``dst`` ranges as an (n, 2) int64 array."""
    return np.asarray(ranges, dtype=np.int64).reshape(-1, 2).tobytes()


def unpack_jobs(run: Run, blob: bytes) -> tuple[JobTable, np.ndarray]:
    """The jobs and protected ranges of a :class:`Run`, every one checked.

    The jobs are a :class:`~dask_hwdecomp.jobs.JobTable` viewing ``blob``
    (no copy, no record per job); each job's location is its index in the
    caller's list (``page``): an error the service raises carries the index
    back and the caller names the page. The ranges are an (n, 2) int64 array.

    Raises
    ------
    WireError
        The binary part has the wrong size, or a job or range reaches out of
        the buffers the run names, or holds an impossible value.
    """
    if run.njobs < 0 or run.nprotect < 0 or run.ndevice < 0:
        raise WireError("negative counts")
    want = 8 * (run.njobs * len(JOB_FIELDS) + 2 * run.nprotect + 2 * run.ndevice)
    if len(blob) != want:
        raise WireError(f"a run of {run.njobs} jobs and {run.nprotect} + {run.ndevice} ranges carried "
                        f"{len(blob)} bytes, not {want}")
    jobs = JobTable.from_bytes(blob, run.njobs)
    ranges = np.frombuffer(blob, dtype=np.int64, count=2 * run.nprotect, offset=jobs.rows.nbytes).reshape(-1, 2)
    src_n, dst_n = run.src_nbytes, run.dst_nbytes
    if len(jobs):
        r = jobs.rows
        a, so, ss, do, ds = r["algo"], r["src_offset"], r["src_size"], r["dst_offset"], r["dst_size"]
        crc, pre, po, ps, pcrc = r["crc32"], r["preamble"], r["page_crc_offset"], r["page_crc_size"], r["page_crc"]
        checks = {
            "an unknown bitstream": (a < 0) | (a >= len(ALGOS)),
            "a source range outside the source buffer": (so < 0) | (ss < 0) | (so > src_n - ss),
            "an output range outside the destination buffer": (do < 0) | (ds < 0) | (do > dst_n - ds),
            "an impossible CRC-32": (crc < -1) | (crc >= _U32) | (pcrc < -1) | (pcrc >= _U32),
            "a preamble longer than its input": (pre < 0) | (pre > ss),
            "a page CRC range outside the source buffer": (pcrc >= 0) & ((po < 0) | (ps < 0) | (po > src_n - ps)),
        }
        for what, bad in checks.items():
            if bad.any():
                raise WireError(f"job {int(np.argmax(bad))} has {what}")
    if len(ranges) and ((ranges[:, 0] < 0) | (ranges[:, 1] < ranges[:, 0]) | (ranges[:, 1] > dst_n)).any():
        raise WireError("a protected range lies outside the destination buffer")
    return jobs, ranges


def pack_device_only(ranges: np.ndarray) -> bytes:
    """A run's device-only ``dst`` ranges (sorted, disjoint (start, end) rows) as an (n, 2) int64 array."""
    return np.ascontiguousarray(ranges, dtype=np.int64).reshape(-1, 2).tobytes()


def unpack_device_only(run: Run, blob: bytes) -> np.ndarray:
    """The device-only ``dst`` ranges of a :class:`Run` whose blob :func:`unpack_jobs` checked.

    Raises
    ------
    WireError
        A range lies outside the destination buffer, or the ranges are not
        sorted and disjoint.
    """
    at = 8 * (run.njobs * len(JOB_FIELDS) + 2 * run.nprotect)
    ranges = np.frombuffer(blob, dtype=np.int64, count=2 * run.ndevice, offset=at).reshape(-1, 2)
    if not ranges_fit(ranges, run.dst_nbytes):
        raise WireError("the device-only ranges are not sorted, disjoint ranges of the destination buffer")
    return ranges


def ranges_fit(ranges: np.ndarray, nbytes: int) -> bool:
    """Whether (start, end) int64 rows are sorted, disjoint ranges of a buffer of ``nbytes``."""
    r = np.asarray(ranges, np.int64).reshape(-1, 2)
    return not (len(r) and ((r[:, 0] < 0) | (r[:, 1] < r[:, 0]) | (r[:, 1] > nbytes)
                            | np.r_[False, r[1:, 0] < r[:-1, 1]]).any())


# -- decode plans and their placement ------------------------------------------

def pack_plan(ranges: np.ndarray, chunks: np.ndarray, pages: np.ndarray) -> bytes:
    """The binary part of a :class:`Measure`: upload ranges, then CHUNK and PAGE records."""
    return np.ascontiguousarray(ranges, dtype=np.int64).tobytes() + chunks.tobytes() + pages.tobytes()


def unpack_plan(msg: Measure, blob: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The upload ranges (n, 3), CHUNK and PAGE records of a :class:`Measure` (copies).

    Raises
    ------
    WireError
        Counts and the binary part disagree.
    """
    if min(msg.nranges, msg.nchunks, msg.npages) < 0:
        raise WireError("negative counts")
    want = 24 * msg.nranges + CHUNK.itemsize * msg.nchunks + PAGE.itemsize * msg.npages
    if len(blob) != want:
        raise WireError(f"a plan of {msg.nranges} ranges, {msg.nchunks} chunks and {msg.npages} pages "
                        f"carried {len(blob)} bytes, not {want}")
    ranges = np.frombuffer(blob, dtype=np.int64, count=3 * msg.nranges).reshape(-1, 3)
    at = ranges.nbytes
    chunks = np.frombuffer(blob, dtype=CHUNK, count=msg.nchunks, offset=at).copy()
    pages = np.frombuffer(blob, dtype=PAGE, count=msg.npages, offset=at + chunks.nbytes).copy()
    return ranges, chunks, pages


def placements(chunks: np.ndarray) -> np.ndarray:
    """Where each chunk's outputs go, as a :class:`Write` carries them: int64 rows of valid, values, data."""
    return np.stack([chunks["out_valid"], chunks["out_values"], chunks["out_data"]], axis=1).astype(np.int64)


def unpack_placements(blob: bytes, nchunks: int) -> np.ndarray:
    """The placements a :class:`Write` carries for ``nchunks`` measured chunks.

    Raises
    ------
    WireError
        The binary part is not one row per chunk.
    """
    if len(blob) != 24 * nchunks:
        raise WireError(f"a placement of {len(blob)} bytes for {nchunks} chunks")
    return np.frombuffer(blob, dtype=np.int64).reshape(-1, 3)


# -- replies as exceptions -----------------------------------------------------

_ERRORS: dict[str, type[HwdecompError]] = {
    c.__name__: c for c in (CorruptPageError, ChecksumError, CudaError, NvcompError, BackendUnavailableError,
                            HwdecompError)}


def corrupt_error(reply: Corrupt, location: PageLocation | None) -> CorruptPageError:
    """The exception a :class:`Corrupt` reply stands for, naming the page at ``location``."""
    exc_type = _ERRORS.get(reply.error_type, CorruptPageError)
    if not issubclass(exc_type, CorruptPageError):
        exc_type = CorruptPageError
    return exc_type(reply.message, location)


def failure_error(reply: Failed) -> HwdecompError:
    """The exception a :class:`Failed` reply stands for: its type, code and name as the service raised it."""
    exc_type = _ERRORS.get(reply.error_type)
    if exc_type is CudaError:
        return CudaError(reply.message, code=reply.code, name=reply.name)
    if exc_type is not None:
        return exc_type(reply.message)
    return HwdecompError(f"{reply.error_type}: {reply.message}")
