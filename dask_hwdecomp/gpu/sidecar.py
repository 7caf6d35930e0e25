"""The GPU sidecar: the process that owns a worker's CUDA context.

nvCOMP 6.0's Snappy and Zstd decoders can take a CUDA context down on a
corrupt page whose framing is valid (an illegal address, or a hang), and a
poisoned context is lost for the rest of its process. So the process that
reads Parquet never creates one: it starts this module as a child
(``python -m dask_hwdecomp.gpu.sidecar FD``, a fresh interpreter, never a
fork) and talks to it over the socket ``FD``
(:class:`dask_hwdecomp.decompress.isolated.IsolatedBackend` is the other end).

The child creates the real backend (``module:function(options)``, e.g.
``dask_hwdecomp.decompress.nvcomp:create``), says hello with its
capabilities, then serves: one reader thread receives requests, and each
``run`` gets a thread of its own, so concurrent callers of the parent reach
the backend's batcher together and are merged into one GPU call. Page bytes
are read from and written to the parent's shared segments in place
(:class:`~dask_hwdecomp.gpu.shm.SegmentMap`, registered as pinned once).

A batch-level failure (a CUDA error) is reported and the child exits: after
an illegal address nothing on the context can be trusted. The parent also
kills the child when it dies or hangs, and starts a fresh one.
"""

from __future__ import annotations

import importlib
import os
import pickle
import sys
import threading
from multiprocessing.connection import Connection

import numpy as np

from ..errors import CorruptPageError
from .shm import SegmentMap
from .wire import unpack_jobs

__all__ = ["serve", "main"]


class _Server:
    def __init__(self, conn: Connection, backend, segments: SegmentMap):
        self.conn = conn
        self.backend = backend
        self.segments = segments
        self._send_lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()

    def send(self, msg) -> None:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        with self._send_lock:
            self.conn.send_bytes(data)

    def _view(self, segs: dict, ref) -> memoryview:
        seg_id, offset, nbytes = ref
        fd, seg_bytes = segs[seg_id]
        return self.segments.view(seg_id, fd, seg_bytes)[offset : offset + nbytes]

    def run(self, rid, segs, src_ref, dst_ref, protect, jobs_bytes) -> None:
        try:
            segs = {s: (fd, n) for s, fd, n in segs}
            src = self._view(segs, src_ref)
            dst = self._view(segs, dst_ref)
            jobs = unpack_jobs(jobs_bytes)
            if getattr(self.backend, "overwrites_gaps", False):
                ranges = [tuple(r) for r in np.frombuffer(protect, dtype=np.int64).reshape(-1, 2).tolist()]
                redone = self.backend.decompress(jobs, src, dst, protect=ranges)
            else:
                redone = self.backend.decompress(jobs, src, dst)
        except CorruptPageError as exc:
            index = exc.location.page if exc.location is not None else None
            if index is None:  # not tied to a job: the batch as a whole
                self.send(("error", rid, type(exc).__name__, exc.reason, -1, ""))
            else:
                self.send(("corrupt", rid, index, type(exc).__name__, exc.reason))
        except BaseException as exc:  # the batch failed as a whole: report, then die
            self.send(("error", rid, type(exc).__name__, str(exc),
                       int(getattr(exc, "code", -1)), str(getattr(exc, "name", ""))))
            os._exit(3)  # nothing on this context can be trusted any more
        else:
            self.send(("ok", rid, int(redone or 0)))
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def stats(self, rid) -> None:
        out = {}
        stats = getattr(self.backend, "stats", None)
        if stats is not None:
            # The backend's own pinned pool is unused here: buffers are the parent's.
            out.update({k: v for k, v in stats().items() if not k.startswith("pinned_")})
        out["mapped_segments"] = len(self.segments)
        out["host_registrations"] = self.segments.registrations
        out["host_registration_failures"] = self.segments.registration_failures
        out["pid"] = os.getpid()
        self.send(("stats", rid, out))

    def loop(self) -> None:
        while True:
            try:
                msg = pickle.loads(self.conn.recv_bytes())
            except (EOFError, OSError):
                os._exit(0)  # the parent is gone: nothing to hand results to
            kind = msg[0]
            if kind == "run":
                t = threading.Thread(target=self.run, args=msg[1:], name=f"hwdecomp-req-{msg[1]}", daemon=True)
                with self._lock:
                    self._threads.add(t)
                t.start()
            elif kind == "stats":
                self.stats(msg[1])
            elif kind == "forget":
                self.segments.forget(msg[1])
            elif kind == "close":
                return

    def drain(self) -> None:
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join()


def _load(factory: str):
    module, _, func = factory.partition(":")
    return getattr(importlib.import_module(module), func)


def serve(conn: Connection) -> int:
    """Run the sidecar protocol on ``conn`` until the parent closes it.

    Returns
    -------
    int
        The exit status (0: closed cleanly, 2: the backend could not be created).
    """
    init = pickle.loads(conn.recv_bytes())
    factory, options, parent_pid = init["factory"], init["options"], init["parent_pid"]
    try:
        backend = _load(factory)(options)
    except BaseException as exc:  # reported to the parent, which raises it
        conn.send_bytes(pickle.dumps(("unavailable", type(exc).__name__, str(exc))))
        return 2
    segments = SegmentMap(parent_pid, getattr(backend, "register_host", None))
    server = _Server(conn, backend, segments)
    server.send(("hello", backend.name, sorted(a.value for a in backend.algorithms),
                 backend.max_job_bytes, bool(getattr(backend, "overwrites_gaps", False))))
    server.loop()
    server.drain()
    try:
        segments.close()
    finally:
        backend.close()
    return 0


def main(argv=None) -> int:
    """Entry point: ``python -m dask_hwdecomp.gpu.sidecar FD``."""
    argv = sys.argv[1:] if argv is None else argv
    conn = Connection(int(argv[0]))
    return serve(conn)


if __name__ == "__main__":
    sys.exit(main())
