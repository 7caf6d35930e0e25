"""How long the GPU service may take over one request before it counts as hung.

One rule for every request a reader sends the service (a decompression
run, a decode's measure and write). Its clock starts when the service
*takes the request up* (:class:`~dask_hwdecomp.service.wire.Started`: a
decompression handed to its backend's batcher, a decode handed to the
decoder once it is created and warm), not when the reader sent it: the
time the service spends before that (page-locking new segments, creating
a backend or the decoder, compiling kernels) is no sign of a hang. From
then on the request is given

    ``FLOOR_S + wait_s + (ahead + nbytes) / bytes_per_s``

where ``nbytes`` are its own bytes in and out, ``ahead`` those of every
request the service had taken up and not yet answered (any client's: the
batcher and the decoder serve them in arrival order, so a request waits
for the work queued before it), and ``wait_s`` how long the batcher may
hold a part for others to join (``batch_latency_ms``). ``bytes_per_s`` is
the service's: :data:`GPU_BYTES_PER_S` on a GPU; a service without one
knows no rate and gives 0, leaving only the upper bound. ``gpu_timeout_s``
bounds it all: no request waits longer than that from when it was sent,
taken up or not.

The floor also covers what the queue's order does not say: the parts of
later requests its GPU call merges (at most ``batch_bytes`` of output, 256
MiB by default: a quarter of a second at the granted rate), the plans the
decoder's run merges with it (at most 512 MiB of upload), and requests
taken up at the same moment reaching the batcher in another order (on the
H200, a request overtaken by a whole burst of 16 tasks of 150 MB waits
0.3 s more).

The figures: on the H200 the service decompresses 7.1 to 7.6 GB/s of
output host to host on gzip, its slowest codec, and up to 29 GB/s on
snappy (1 MiB pages, the default 4 streams and 256 MiB calls;
``benchmarks/results/2026-11-30-h200-service-before-after/sweep.md``; calls
of 64 pages still made 2.8 GB/s of gzip), and decodes about 20 GB/s of
Arrow output. :data:`GPU_BYTES_PER_S` grants an eighth of the slowest, in
and out counted, so that a busy GPU (another process's kernels, a shared
PCIe link) does not trip it: 16 tasks of 100 MB of output (about 150 MB in
and out each) sent at once are given 1.1 s (the first) to 3.2 s (the last,
2.25 GB ahead of it), though at 8 GB/s the last is done after 0.3 s; and a
one-page batch that hangs is taken for hung after a second.
"""

from __future__ import annotations

__all__ = ["FLOOR_S", "GPU_BYTES_PER_S", "deadline_s"]

# Every request may take this long, however small: the service's Python
# for one request (thread, batcher, copies, answer) is milliseconds.
FLOOR_S = 1.0
# Bytes in and out a second a GPU service is granted (see the module docstring).
GPU_BYTES_PER_S = 1 << 30


def deadline_s(nbytes: int, bytes_per_s: float, limit_s: float, wait_s: float = 0.0) -> float:
    """Seconds a request may take from when the service took it up (see the module docstring).

    Parameters
    ----------
    nbytes : int
        The request's bytes in and out, plus those the service had taken
        up before it and not yet answered (``ahead``).
    bytes_per_s : float
        The rate the service grants; 0 or less: none is known.
    limit_s : float
        ``gpu_timeout_s``, the upper bound.
    wait_s : float
        How long the batcher may hold the request's parts for others.

    Returns
    -------
    float
        At most ``limit_s``; ``limit_s`` where no rate is known.
    """
    if bytes_per_s <= 0:
        return limit_s
    return min(limit_s, FLOOR_S + wait_s + max(nbytes, 0) / bytes_per_s)
