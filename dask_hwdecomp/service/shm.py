"""Host memory shared with the GPU service, without copies.

A reading process (a worker, or any caller of ``read_table``) fetches file
bytes straight into buffers from a :class:`SharedPool`; the GPU service maps
the same memory and registers it as pinned, once per segment, so its copies
to and from the device run at pinned speed (about six times the pageable
speed; see :mod:`dask_hwdecomp.gpu.memory`).

A segment is an anonymous ``memfd`` (not a file in ``/dev/shm``, whose size
containers often cap at 64 MiB, and which any process could open by name)
mapped ``MAP_SHARED``. Its descriptor is passed to the service over the
service's socket (:class:`~dask_hwdecomp.service.wire.Share`), once per
connection; afterwards requests name it by id.

A segment's pages are allocated where it is made, in the reader's own
thread (:func:`populate`), not inside the service's registration: there
the kernel would allocate and zero every page under the driver's lock, so
registering a fresh segment runs at about 2 GB/s and slows the service's
copies to a fifth meanwhile, against about 21 GB/s for one already
populated (``benchmarks/register_cost.py`` on an H200).

Nothing here touches CUDA: the service passes its registration function in.
"""

from __future__ import annotations

import collections
import mmap
import os
import stat
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from .. import timeline
from ..gpu.pool import CappedPool, size_class

__all__ = ["SharedSegment", "SharedBuffer", "SharedPool", "SegmentMap", "populate"]

_PAGE = mmap.PAGESIZE


# madvise advice that allocates every page of a writable mapping (Linux 5.14).
_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)


def _pages(nbytes: int) -> int:
    return max(_PAGE, (nbytes + _PAGE - 1) // _PAGE * _PAGE)


def populate(mapping: mmap.mmap) -> None:
    """Allocate every page of ``mapping`` now, in this thread.

    ``madvise(MADV_POPULATE_WRITE)`` where the kernel has it, else a write
    of one byte a page (the mapping is fresh: its bytes are all zero).

    Raises
    ------
    MemoryError
        The pages cannot be allocated.
    """
    try:
        mapping.madvise(_MADV_POPULATE_WRITE)
        return
    except OSError as exc:
        import errno

        if exc.errno in (errno.ENOMEM, errno.EFAULT):
            raise MemoryError(f"cannot allocate {len(mapping)} bytes of shared host memory: {exc}") from None
    import numpy as np

    np.frombuffer(mapping, np.uint8)[::_PAGE] = 0


class SharedSegment:
    """One memfd mapped in this process; owned.

    Parameters
    ----------
    seg_id : int
        Unique within the pool (never reused).
    nbytes : int
        Rounded up to whole pages, all of them allocated here
        (:func:`populate`).

    Raises
    ------
    OSError
        The memfd cannot be created or sized.
    MemoryError
        Its pages cannot be allocated.
    """

    def __init__(self, seg_id: int, nbytes: int):
        self.id = seg_id
        self.nbytes = _pages(nbytes)
        self.fd = os.memfd_create(f"hwdecomp-{seg_id}", os.MFD_CLOEXEC)
        self._mmap: mmap.mmap | None = None
        try:
            os.ftruncate(self.fd, self.nbytes)
            self._mmap = mmap.mmap(self.fd, self.nbytes)
            populate(self._mmap)
        except BaseException:
            if self._mmap is not None:
                self._mmap.close()
            os.close(self.fd)
            raise
        self.view: memoryview = memoryview(self._mmap)
        import numpy as np

        self.address = int(np.frombuffer(self.view, dtype=np.uint8).ctypes.data)

    def close(self) -> None:
        """Close the fd and unmap (idempotent).

        Slices still held elsewhere (a pyarrow buffer over an image) keep the
        mapping alive: it is unmapped when the last of them is dropped.
        """
        if self.fd < 0:
            return
        fd, self.fd = self.fd, -1
        self.view.release()
        mapping, self._mmap = self._mmap, None
        try:
            if mapping is not None:
                mapping.close()
        except BufferError:
            pass  # exported slices remain; the mmap object unmaps when they go
        os.close(fd)


class SharedBuffer:
    """A slice of a shared segment lent by a :class:`SharedPool`.

    Attributes
    ----------
    view : memoryview
        Writable bytes, exactly the size asked for.
    segment : SharedSegment
    pinned : bool
        Always False here: the GPU service pins the segment in its own process.
    """

    pinned = False

    def __init__(self, pool: SharedPool, segment: SharedSegment, nbytes: int, keep: bool):
        self._pool = pool
        self.segment: SharedSegment | None = segment
        self._keep = keep
        self.view: memoryview | None = segment.view[:nbytes]

    def close(self) -> None:
        """Give the segment back to the pool (idempotent)."""
        segment, self.segment = self.segment, None
        if segment is None:
            return
        try:
            if self.view is not None:
                self.view.release()
        except BufferError:  # the caller still exports it (e.g. a numpy array)
            pass
        self.view = None
        self._pool._give_back(segment, self._keep)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class SharedPool(CappedPool):
    """A capped pool of shared segments, reused by size.

    Parameters
    ----------
    cap_bytes : int
        Most bytes kept in segments (lent and idle). Past the cap a request
        still gets a shared segment (the service must see it), freed when it
        is given back instead of kept; ``stats()["overflows"]`` counts them.
    on_free : callable, optional
        ``on_free(seg_id)`` after a segment is freed (the service unmaps it).
    """

    what = "shared host pool"

    def __init__(self, cap_bytes: int, on_free: Callable[[int], None] | None = None):
        super().__init__(cap_bytes)
        self.on_free = on_free
        self._lent: dict[int, SharedSegment] = {}
        self._next_id = 1
        # Buffers whose last user is gone, queued by :meth:`give_back_later`.
        self._returned: collections.deque = collections.deque()

    def give_back_later(self, buf: SharedBuffer) -> None:
        """Queue ``buf`` to be given back by the next :meth:`get` (or :meth:`drain`).

        Safe anywhere, also in a finalizer that the cyclic garbage collector
        runs inside the pool's own locked sections: it only appends.
        """
        self._returned.append(buf)

    def drain(self) -> None:
        """Give back every buffer queued by :meth:`give_back_later`."""
        while True:
            try:
                buf = self._returned.popleft()
            except IndexError:
                return
            buf.close()

    def _round(self, nbytes: int) -> int:
        return _pages(size_class(nbytes))

    def get(self, nbytes: int) -> SharedBuffer:
        """A buffer of ``nbytes`` in a shared segment.

        Raises
        ------
        MemoryError
            The segment cannot be created.
        RuntimeError
            The pool is closed.
        """
        self.drain()  # what the last read let go of is reused, not made anew
        seg, want, keep = self._take(nbytes)
        if seg is None:
            with self._lock:
                seg_id, self._next_id = self._next_id, self._next_id + 1
            try:
                with timeline.span("shared_segment", nbytes=want if keep else nbytes):
                    seg = SharedSegment(seg_id, want if keep else nbytes)
            except (OSError, MemoryError) as exc:
                self._create_failed(want, keep)
                raise MemoryError(f"cannot create a {want}-byte shared host segment: {exc}") from None
            self._created(keep)
        with self._lock:
            self._lent[seg.id] = seg
        return SharedBuffer(self, seg, nbytes, keep)

    def find(self, address: int, nbytes: int) -> tuple[SharedSegment, int] | None:
        """(segment, offset) of a lent segment holding ``[address, +nbytes)``, else None."""
        with self._lock:
            for seg in self._lent.values():
                off = address - seg.address
                if 0 <= off and off + nbytes <= seg.nbytes:
                    return seg, off
        return None

    def _give_back(self, seg: SharedSegment, keep: bool = True) -> None:
        with self._lock:
            self._lent.pop(seg.id, None)
        super()._give_back(seg, keep)

    def close(self) -> None:
        """Give back what is queued, then free idle segments (lent ones when given back)."""
        self.drain()
        super().close()

    def _destroy(self, seg: SharedSegment) -> None:
        seg.close()
        if self.on_free is not None:
            self.on_free(seg.id)


class SegmentMap:
    """The service's side: one connection's segments, mapped and registered once.

    Parameters
    ----------
    register : callable, optional
        ``register(address, nbytes)`` page-locks the mapping for the GPU and
        returns a handle with ``close()``, or None where the backend's
        copies need no page-locking; or no callable at all.
    """

    def __init__(self, register: Callable | None = None):
        self._register = register
        self._lock = threading.Lock()
        self._maps: dict[int, _Mapped] = {}
        self.registrations = 0
        self.registration_failures = 0
        self.register_s = 0.0  # seconds spent page-locking segments

    def add(self, seg_id: int, fd: int) -> None:
        """Map the segment whose descriptor came with a ``Share`` (the fd is closed here).

        Its size is the memfd's own, not what the client said. A segment that
        cannot be registered is used unpinned (copies run at pageable speed)
        and counted in ``registration_failures``.

        Raises
        ------
        OSError
            The descriptor cannot be mapped (not a shareable file).
        """
        with self._lock:
            known = seg_id in self._maps
        if known:  # ids are never reused: the same segment again
            os.close(fd)
            return
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size <= 0:
                raise OSError(f"segment {seg_id} is not a memory file")
            mm = mmap.mmap(fd, st.st_size)
        finally:
            os.close(fd)
        view = memoryview(mm)
        handle = None
        if self._register is not None:
            import numpy as np

            began = time.perf_counter()
            try:
                handle = self._register(int(np.frombuffer(view, np.uint8).ctypes.data), len(view))
                ended = time.perf_counter()
                if handle is not None:  # None: a backend whose copies need no page-locking
                    self.registrations += 1
                    self.register_s += ended - began
                    timeline.record("register", began, ended, nbytes=len(view), seg=seg_id)
            except Exception:  # still correct unpinned, only slower: counted, not fatal
                self.registration_failures += 1
        with self._lock:
            self._maps[seg_id] = _Mapped(mm, view, handle)

    def view(self, seg_id: int) -> memoryview:
        """The whole segment ``seg_id``.

        Raises
        ------
        KeyError
            No segment of that id was shared on this connection.
        """
        with self._lock:
            return self._maps[seg_id].view

    def forget(self, seg_id: int) -> None:
        """Unregister and unmap one segment (unknown ids are ignored)."""
        with self._lock:
            entry = self._maps.pop(seg_id, None)
        if entry is not None:
            entry.close()

    def __len__(self) -> int:
        return len(self._maps)

    @property
    def pinned_bytes(self) -> int:
        """Bytes of the mapped segments that are registered (page-locked) now."""
        with self._lock:
            return sum(len(m.view) for m in self._maps.values() if m.handle is not None)

    def close(self) -> None:
        """Unregister and unmap every segment."""
        with self._lock:
            entries, self._maps = list(self._maps.values()), {}
        for entry in entries:
            entry.close()


class _Mapped(NamedTuple):
    """A mapped segment, its whole view and its pinned registration (or None)."""

    mm: mmap.mmap
    view: memoryview
    handle: object

    def close(self) -> None:
        try:
            if self.handle is not None:
                self.handle.close()  # type: ignore[attr-defined]
        finally:
            self.view.release()
            try:
                self.mm.close()
            except BufferError:  # a request still holds a slice; unmapped when it drops it
                pass
