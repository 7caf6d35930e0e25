"""The CUDA decompression engine as a launcher: one engine call per GPU call.

:class:`HardwareLauncher` plugs into a :class:`~dask_hwdecomp.gpu.stream_runner.StreamRunner`.
Per GPU call (one stream): inputs go to the device (memory from the
HW_DECOMPRESS pool), one host params array of 64-byte records is filled (one
per page: sizes, pointers, the algorithm bit, and a device u32 for the
actual size), the size slots are zeroed, **one** engine call is queued for
the whole call, then the actual sizes and the outputs come back and the
stream is synchronised once. Each backend gets the bitstream it takes: a
Snappy page goes to the engine without its length preamble (``src`` past
it, ``srcNumBytes`` less it), as NVIDIA's nvCOMP and XGBoost submit it.

The engine has no per-page status: with the slots zeroed first, a slot that
does not hold the page header's size marks a failed operation (a slot the
engine left alone reads 0, never a size from an earlier call), and inputs
are checked on the host first (corrupt input is undefined behaviour on the
engine). A call the driver rejects for one operation (the classic entry
point's error index) is made again without it. ``dstNumBytes`` is only a
hint to the engine, so a failed operation may have written past its output:
the stream runner (``gpu/stream_runner.py``) keeps the result slots before the data and guard
space of the maximum length after it, and runs a call with a failure again
without the failed pages before any caller's output is trusted.

The driver object (:class:`dask_hwdecomp.gpu.hwengine.EngineDriver`) is
injectable, so CI runs this module against a stand-in of the documented
contract on host memory (``tests/standin_hwengine.py``).
"""

from __future__ import annotations

import numpy as np

from ..jobs import ALGOS
from .hwengine import ALGO_BIT, EngineCallError
from .stream_runner import Prepared

# Each bitstream's code (its place in ALGOS) to the engine's algorithm bit (0: not the engine's).
_BITS = np.array([ALGO_BIT.get(a, 0) for a in ALGOS], dtype=np.int32)

__all__ = ["HardwareLauncher", "usable_length"]

_MAX_REJECTED = 8  # operations one launch leaves out before the call's error counts as general


def usable_length(max_length: int) -> int:
    """Largest page output whose valid input also fits ``max_length``.

    Snappy expands worst (``32 + n + n/6``); LZ4 and stored deflate less.
    """
    return max(0, (max_length - 32) * 6 // 7)


class HardwareLauncher:
    """Plugs the engine call into a :class:`~dask_hwdecomp.gpu.stream_runner.StreamRunner`.

    Parameters
    ----------
    driver : EngineDriver or stand-in
        Provides ``mask``, ``max_length``, ``params_dtype``, ``htod``,
        ``dtoh``, ``memset_d32`` and ``batch_decompress(params, stream)``.
    """

    # dstNumBytes is a hint, not a bound: a failed operation may write past
    # its output. Guard: the engine's maximum length per operation.
    contains_failures = False
    # The engine's documented contract does not promise the check: the
    # backend checks Zstd content checksums on the host.
    verifies_zstd_checksum = False

    def __init__(self, driver):
        self.driver = driver
        self.algorithms = frozenset(a for a, bit in ALGO_BIT.items() if driver.mask & bit)
        self.max_input_bytes = driver.max_length
        self.max_job_bytes = usable_length(driver.max_length)
        self.guard_bytes = driver.max_length

    def input_align(self, algo) -> int:
        return 1

    def order(self, algo) -> int:
        return 0  # one call takes every algorithm

    @staticmethod
    def status_text(status: int) -> str:
        return f"the engine call failed with CUresult {status} for this operation"

    def prepare(self, rows: np.ndarray, stream) -> Prepared:
        n = len(rows)
        return Prepared(device_bytes=4 * n + 256, host_bytes=4 * n, state=rows)

    def launch(self, rows, stream, src_ptrs, dst_ptrs, scratch: int, host):
        n = len(rows)
        skip = rows["preamble"].astype(np.uint64)
        params = np.zeros(n, dtype=self.driver.params_dtype)
        params["src_num_bytes"] = rows["src_size"].astype(np.uint64) - skip
        params["dst_num_bytes"] = rows["dst_size"]
        params["dst_act_bytes"] = scratch + 4 * np.arange(n, dtype=np.int64)
        params["src"] = (src_ptrs + skip).astype(np.int64)
        params["dst"] = dst_ptrs.astype(np.int64)
        params["algo"] = _BITS[rows["algo"]]
        # A slot the engine does not write (a failed operation) must not
        # keep a size from an earlier call.
        self.driver.memset_d32(scratch, 0, n, stream)
        submitted: list[np.ndarray] = []
        rejected = self._submit(params, stream, submitted)
        host_ptr, host_view = host
        self.driver.dtoh(host_ptr, scratch, 4 * n, stream)

        def collect():
            # The params arrays are referenced here so they live until after the sync.
            assert len(params) == n and submitted
            actual = np.frombuffer(host_view, dtype=np.uint32, count=n).astype(np.uint64)
            status = np.zeros(n, dtype=np.int32)
            for k, code in rejected.items():
                status[k] = code or -1
            return actual, status

        return collect

    def _submit(self, params: np.ndarray, stream, submitted: list) -> dict[int, int]:
        """Call the engine; an operation the driver names is left out and the rest resubmitted.

        Returns ``{operation: CUresult}`` of the operations left out.

        Raises
        ------
        EngineCallError
            A general error, or one the entry point does not tie to an operation.
        """
        live = np.arange(len(params))
        rejected: dict[int, int] = {}
        while len(live):
            submitted.append(params if len(live) == len(params) else params[live])
            try:
                self.driver.batch_decompress(submitted[-1], stream)
                return rejected
            except EngineCallError as exc:
                # Past a few operations the error is not about one of them.
                if exc.index is None or not 0 <= exc.index < len(live) or len(rejected) >= _MAX_REJECTED:
                    raise
                rejected[int(live[exc.index])] = exc.code
                live = np.delete(live, exc.index)
        submitted.append(params)  # nothing left to submit
        return rejected
