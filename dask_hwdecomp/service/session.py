"""One reading process's connection, as the GPU service serves it.

A :class:`Session` reads the client's messages on a thread of its own,
checks each (:mod:`~dask_hwdecomp.service.wire`), maps the segments the
client shares, and runs each decompression (``Run``) and each decode
(``Measure`` then ``Write``) on a thread of its own, so that a long request
holds up none behind it. It says when it takes a request up
(:class:`~dask_hwdecomp.service.wire.Started`) and answers each with one
reply. A request that fails as a whole is reported, and the service exits:
its CUDA context cannot be trusted after it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import timeline
from ..errors import BackendUnavailableError, CorruptPageError
from ..gpudecode.checks import PlanError, check_plan
from ..gpudecode.tables import PageError
from . import wire
from .kept import RunKeeper
from .shm import SegmentMap
from .sockets import Peer

__all__ = ["Session", "MAX_PENDING_DECODES"]

logger = logging.getLogger(__name__)


# Measured decodes a client may leave waiting for their writes: each holds
# device memory until written or discarded.
MAX_PENDING_DECODES = 64


@dataclass(eq=False)
class Session:
    """One client: its reader thread, its segments, its runs in flight.

    ``service`` is the :class:`~dask_hwdecomp.service.server.Service` that
    accepted it: the backends, the decoder, the queue and the counters it
    shares with every other session.
    """

    service: Any
    sock: socket.socket
    peer: Peer
    key: tuple | None = None
    backend: Any = None
    segments: SegmentMap = field(default_factory=SegmentMap)
    rate: int = 0  # bytes a second its requests' deadlines grant (Service.deadline_rate)
    runs: set = field(default_factory=set)
    decodes: dict = field(default_factory=dict)  # measure rid -> PendingDecode
    send_lock: threading.Lock = field(default_factory=threading.Lock)
    lock: threading.Lock = field(default_factory=threading.Lock)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._serve, name=f"hwdecomp-client-{self.peer.pid}", daemon=True)
        self.thread.start()

    def send(self, msg: wire.Message) -> None:
        try:
            with self.send_lock:
                wire.send(self.sock, msg)
        except OSError:
            pass  # the client is gone; its reader loop ends on EOF

    def hang_up(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass

    def join(self) -> None:
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join()

    def _refuse(self, rid: int, reason: str) -> None:
        self.service.counters.refused += 1
        logger.warning("refused a message from pid %d: %s", self.peer.pid, reason)
        self.send(wire.Refused(rid=rid, reason=reason))

    def _serve(self) -> None:
        try:
            if self._attach():
                self._loop()
        finally:
            with self.lock:
                runs = list(self.runs)
            for t in runs:
                t.join()
            with self.lock:
                pending, self.decodes = list(self.decodes.values()), {}
            for p in pending:
                p.close()
            self.service.kept.drop(self)
            self.segments.close()
            self.sock.close()
            self.service.detach(self.key, self)

    def _attach(self) -> bool:
        try:
            msg, _, fds = wire.receive(self.sock)
        except (EOFError, OSError):
            return False
        except wire.WireError as exc:
            self._refuse(-1, str(exc))
            return False
        for fd in fds:
            os.close(fd)
        if isinstance(msg, wire.StatsRequest):  # hwdecomp service status
            self.send(wire.Stats(rid=msg.rid, values=self.service.stats()))
            return False
        if isinstance(msg, wire.Stop):  # hwdecomp service stop
            self.service.stop(f"asked by pid {self.peer.pid}: {msg.reason}")
            return False
        if not isinstance(msg, wire.Attach):
            self._refuse(-1, f"the first message must be Attach, not {type(msg).__name__}")
            return False
        try:
            self.key, self.backend = self.service.attach(msg.backend, dict(msg.options))
        except wire.WireError as exc:
            self._refuse(-1, str(exc))
            return False
        except BaseException as exc:  # the factory failed: the client raises it
            logger.warning("backend %s cannot be created: %s: %s", msg.backend, type(exc).__name__, exc)
            self.send(wire.Unavailable(error_type=type(exc).__name__, message=str(exc)))
            return False
        if msg.options.get("decode", "cpu") != "cpu":
            self.service.warm_decoder_once()
        b = self.backend
        self.rate = self.service.deadline_rate(b)
        self.segments = SegmentMap(b.register_host)
        self.send(wire.Hello(name=b.name, algorithms=sorted(a.value for a in b.algorithms),
                             max_job_bytes=b.max_job_bytes, overwrites_gaps=bool(b.overwrites_gaps),
                             service_pid=os.getpid()))
        return True

    def _loop(self) -> None:
        while True:
            try:
                msg, blob, fds = wire.receive(self.sock)
            except (EOFError, OSError):
                return
            except wire.FrameError as exc:
                self._refuse(-1, str(exc))
                return
            except wire.WireError as exc:
                self._refuse(-1, str(exc))
                continue
            if isinstance(msg, wire.Share):
                if len(fds) != 1:
                    for fd in fds:
                        os.close(fd)
                    self._refuse(-1, f"Share carried {len(fds)} descriptors, not 1")
                    continue
                try:
                    self.segments.add(msg.seg_id, fds[0])
                except OSError as exc:
                    self._refuse(-1, f"segment {msg.seg_id} cannot be mapped: {exc}")
                continue
            for fd in fds:
                os.close(fd)
            if isinstance(msg, wire.Run):
                self._start_run(msg, blob)
            elif isinstance(msg, wire.Measure):
                self._start(msg.rid, self._measure, msg, blob)
            elif isinstance(msg, wire.Write):
                self._start(msg.rid, self._write, msg, blob)
            elif isinstance(msg, wire.Discard):
                with self.lock:
                    pending = self.decodes.pop(msg.measure, None)
                if pending is not None:
                    pending.close()
            elif isinstance(msg, wire.Drop):
                self.service.kept.drop(self, msg.kept)
            elif isinstance(msg, wire.Forget):
                self.segments.forget(msg.seg_id)
            elif isinstance(msg, wire.StatsRequest):
                self.send(wire.Stats(rid=msg.rid, values=self._stats()))
            elif isinstance(msg, wire.Stop):
                self.service.stop(f"asked by pid {self.peer.pid}: {msg.reason}")
            else:
                self._refuse(-1, f"a client may not send {type(msg).__name__}")

    def _view(self, seg: int, offset: int, nbytes: int) -> memoryview:
        whole = self.segments.view(seg)
        if offset < 0 or nbytes < 0 or offset + nbytes > len(whole):
            raise wire.WireError(f"range {offset}+{nbytes} is outside segment {seg} of {len(whole)} bytes")
        return whole[offset : offset + nbytes]

    def _start_run(self, run: wire.Run, blob: bytes) -> None:
        try:
            src = self._view(run.src_seg, run.src_offset, run.src_nbytes)
            dst = self._view(run.dst_seg, run.dst_offset, run.dst_nbytes)
        except KeyError as exc:
            self._refuse(run.rid, f"run {run.rid} names segment {exc.args[0]}, which was not shared")
            return
        except wire.WireError as exc:
            self._refuse(run.rid, f"run {run.rid}: {exc}")
            return
        # Unpacked on the run's thread: a job table of thousands of pages
        # takes milliseconds the connection's next messages need not wait.
        self._spawn(self._unpack_and_run, (run, blob, src, dst), f"hwdecomp-run-{self.peer.pid}-{run.rid}")

    def _unpack_and_run(self, run: wire.Run, blob: bytes, src: memoryview, dst: memoryview) -> None:
        try:
            jobs, protect = wire.unpack_jobs(run, blob)
            device_only = wire.unpack_device_only(run, blob)
        except wire.WireError as exc:
            self._refuse(run.rid, f"run {run.rid}: {exc}")
            with self.lock:
                self.runs.discard(threading.current_thread())
            return
        self.service.counters.runs += 1
        self._run(run, jobs, src, dst, protect, device_only)

    def _spawn(self, target, args: tuple, name: str) -> None:
        """Run ``target(*args)`` on a thread of its own, joined before the connection closes."""
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self.lock:
            self.runs.add(t)
        t.start()

    def _fail_and_exit(self, rid: int, exc: BaseException, what: str) -> None:
        """Report ``rid`` failed as a whole, then exit: the CUDA context cannot be trusted."""
        self.send(wire.Failed(rid=rid, error_type=type(exc).__name__, message=str(exc),
                              code=int(getattr(exc, "code", -1)), name=str(getattr(exc, "name", ""))))
        logger.error("a %s failed as a whole (%s: %s): exiting, the context cannot be trusted",
                     what, type(exc).__name__, exc)
        logging.shutdown()
        os._exit(3)

    @contextmanager
    def _taken_up(self, rid: int, queue: str, nbytes: int) -> Iterator[None]:
        """Tell the client ``rid`` is taken up (its deadline starts); count it in ``queue`` until the block ends."""
        ahead = self.service.take_up(queue, nbytes)
        try:
            self.send(wire.Started(rid=rid, ahead=ahead, bytes_per_s=self.rate))
            yield
        finally:
            self.service.put_down(queue, nbytes)

    def _keeper(self, run: wire.Run, device_only) -> RunKeeper | None:
        """Where ``run``'s outputs are kept on the device: when asked, by a backend that can, for a decoder.

        ``device_only``: the ranges of the run's ``dst`` whose kept bytes
        are not copied back.
        """
        if not run.keep or not self.backend.keeps_outputs:
            return None
        try:
            decoder = self.service.decoder()
        except BackendUnavailableError:
            return None
        return RunKeeper(self.service.kept, decoder.device_block, device_only)

    def _run(self, run: wire.Run, jobs, src: memoryview, dst: memoryview, protect, device_only) -> None:
        rid = run.rid
        keeper = self._keeper(run, device_only)
        kw: dict[str, Any] = {} if keeper is None else {"keep": keeper}
        began, cpu = time.perf_counter(), timeline.thread_cpu()
        try:
            self.service.wait_for_run_steps()
            with self._taken_up(rid, "run", int(jobs.rows["src_size"].sum() + jobs.rows["dst_size"].sum())):
                redone = self.backend.decompress(jobs, src, dst, protect=protect, **kw)
        except CorruptPageError as exc:
            if keeper is not None:
                keeper.release_all()
            index = exc.location.page if exc.location is not None else None
            if index is None:  # not tied to a job: the batch as a whole
                self.send(wire.Failed(rid=rid, error_type=type(exc).__name__, message=exc.reason, code=-1, name=""))
            else:
                self.send(wire.Corrupt(rid=rid, index=int(index), error_type=type(exc).__name__, message=exc.reason))
        except BaseException as exc:  # the batch failed as a whole
            self._fail_and_exit(rid, exc, "batch")
        else:
            token = -1
            if keeper is not None and keeper.pages:
                token = self.service.kept.put(self, run.dst_seg, run.dst_offset, keeper.pages)
            self.send(wire.Done(rid=rid, redone=int(redone or 0), kept=token))
        finally:
            timeline.record("run", began, time.perf_counter(), cpu, pid=self.peer.pid, jobs=len(jobs),
                            nbytes=len(dst))
            with self.lock:
                self.runs.discard(threading.current_thread())

    # -- the GPU decoder ------------------------------------------------------

    def _start(self, rid: int, work, msg, blob: bytes) -> None:
        self._spawn(self._decode_guarded, (rid, work, msg, blob), f"hwdecomp-decode-{self.peer.pid}-{rid}")

    def _decode_guarded(self, rid: int, work, msg, blob: bytes) -> None:
        try:
            work(msg, blob)
        except (KeyError, wire.WireError, PlanError) as exc:
            what = f"names segment {exc.args[0]}, which was not shared" if isinstance(exc, KeyError) else str(exc)
            self._refuse(rid, f"decode {rid}: {what}")
        except BackendUnavailableError as exc:
            self.send(wire.Failed(rid=rid, error_type=type(exc).__name__, message=str(exc), code=-1, name=""))
        except BaseException as exc:  # a GPU failure
            self._fail_and_exit(rid, exc, "decode")
        finally:
            with self.lock:
                self.runs.discard(threading.current_thread())

    def _corrupt(self, rid: int, pages) -> bool:
        bad = np.flatnonzero(pages["error"])
        if not len(bad):
            return False
        i = int(bad[0])
        code = int(pages["error"][i])
        name = PageError(code).name if code in PageError._value2member_map_ else str(code)
        self.send(wire.Corrupt(rid=rid, index=i, error_type="CorruptPageError",
                               message=f"the GPU decoder found it invalid ({name})"))
        return True

    def _measure(self, msg: wire.Measure, blob: bytes) -> None:
        with timeline.span("measure", pid=self.peer.pid, nbytes=msg.data_bytes):
            self._measure_now(msg, blob)

    def _measure_now(self, msg: wire.Measure, blob: bytes) -> None:
        from ..gpudecode.hosted import DecodeRequest
        from ..gpudecode.merge import PlanRecords

        try:
            kept = self.service.kept.take(self, msg.kept, msg.src_seg, msg.src_offset, msg.src_nbytes)
        except KeyError as exc:
            raise wire.WireError(str(exc.args[0])) from None
        try:
            decoder = self.service.decoder()
            src = self._view(msg.src_seg, msg.src_offset, msg.src_nbytes)
            ranges, chunks, pages = wire.unpack_plan(msg, blob)
            check_plan(ranges, chunks, pages, msg.data_bytes, msg.src_nbytes)
            with self.lock:
                if len(self.decodes) >= MAX_PENDING_DECODES:
                    raise wire.WireError(f"more than {MAX_PENDING_DECODES} measured decodes wait for their write")
            self.service.warm_decoder_once()  # a no-op once started, as it is when a decoding client attaches
            self.service.wait_until_warm()
            with self._taken_up(msg.rid, "decode", msg.data_bytes + msg.src_nbytes):
                pending = decoder.decode(DecodeRequest(src, PlanRecords(ranges, chunks, pages, msg.data_bytes),
                                                       tuple(kept)))
        finally:  # read (the decode's stream synchronised) or not at all
            self.service.kept.release(kept)
        if self._corrupt(msg.rid, pending.pages):
            pending.close()
            return
        with self.lock:
            self.decodes[msg.rid] = pending
        self.send(wire.Measured(rid=msg.rid, null_counts=[int(x) for x in pending.chunks["null_count"]],
                                data_bytes=[int(x) for x in pending.chunks["data_bytes"]]))

    def _write(self, msg: wire.Write, blob: bytes) -> None:
        with self.lock:
            pending = self.decodes.pop(msg.measure, None)
        if pending is None:
            raise wire.WireError(f"no measured decode {msg.measure} waits for a write")
        try:
            dst = self._view(msg.dst_seg, msg.dst_offset, msg.dst_nbytes)
            chunks = pending.chunks
            placed = wire.unpack_placements(blob, len(chunks))
            if msg.dst_nbytes != pending.nbytes or not np.array_equal(placed, wire.placements(chunks)):
                raise wire.WireError("a placement other than place_outputs' of the measured chunks "
                                     f"({msg.dst_nbytes} bytes; the decode wrote {pending.nbytes})")
            with self._taken_up(msg.rid, "decode", msg.dst_nbytes), \
                    timeline.span("write", pid=self.peer.pid, nbytes=msg.dst_nbytes):
                pending.copy_to(dst)
            self.send(wire.Done(rid=msg.rid, redone=0, kept=-1))
        finally:
            pending.close()

    def _stats(self) -> dict:
        out: dict[str, Any] = {}
        # The backend's own pinned pool is unused here: buffers are the clients'.
        out.update({k: v for k, v in self.backend.stats().items() if not k.startswith("pinned_")})
        out["mapped_segments"] = len(self.segments)
        out["host_registrations"] = self.segments.registrations
        out["host_registration_failures"] = self.segments.registration_failures
        out["host_register_s"] = round(self.segments.register_s, 6)
        out.update(self.service.stats())
        return {k: v for k, v in out.items() if isinstance(v, (int, float, str, bool))}
