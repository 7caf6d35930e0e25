"""One engine call laid out for the engine selfcheck: canaries around outputs, size slots to watch.

The layout on the device, in one allocation: the inputs (each at a
:data:`~dask_hwdecomp.gpu.staging.DEVICE_ALIGN` boundary), then the outputs,
each :data:`GAP` bytes after the one before, in a region filled with the
:data:`CANARY` pattern that runs the engine's maximum length past the last
output (room for the stray writes of an operation given a truncated input),
then one u32 size slot per operation. The slots are first loaded with the
right sizes (as an earlier call would leave them) and then zeroed, as the
``hardware`` backend does before each call; the whole allocation comes back
after the call. Judging what came back is the selfcheck's part
(:mod:`dask_hwdecomp.decompress.hwengine_check`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ..jobs import Algo
from ..rounding import round_up
from .hwengine import ALGO_BIT
from .staging import DEVICE_ALIGN

__all__ = ["GAP", "CANARY", "CanaryOp", "CanaryCall", "run_canary_call"]

GAP = 256  # canary bytes between two outputs
CANARY = 0xA5A5A5A5  # the u32 pattern of the canary region


class CanaryOp(NamedTuple):
    """One operation of the call."""

    algo: Algo
    body: bytes  # the stored bitstream (a Snappy page with its length preamble)
    skip: int  # leading bytes of ``body`` the engine does not take (the preamble)
    size: int  # the output size: the hint, and what a size slot must read


class CanaryCall(NamedTuple):
    """The call's device allocation as it came back, and where things sat in it."""

    back: np.ndarray  # every byte of the allocation after the call (uint8)
    dst_offsets: list[int]  # each operation's output
    out_start: int  # the canary region: the outputs and the gaps around them
    out_end: int
    slots: int  # the first u32 size slot


def run_canary_call(driver, ops: Sequence[CanaryOp]) -> CanaryCall:
    """Run ``ops`` in one engine call laid out as the module docstring says.

    Parameters
    ----------
    driver : EngineDriver or stand-in
        ``max_length``, ``params_dtype``, ``new_stream``, ``alloc_device``,
        ``htod``, ``dtoh``, ``memset_d32``, ``batch_decompress``, ``synchronize``.

    Raises
    ------
    CudaError
    """
    n = len(ops)
    src_off, pos = [], 0
    for op in ops:
        src_off.append(pos)
        pos = round_up(pos + len(op.body), DEVICE_ALIGN)
    dst_off, dpos = [], pos + GAP
    for op in ops:
        dst_off.append(dpos)
        dpos = round_up(dpos + op.size, DEVICE_ALIGN) + GAP
    out_start, out_end = pos, dpos + driver.max_length  # room for a truncated input's stray writes
    slots = round_up(out_end, DEVICE_ALIGN)
    total = slots + 4 * n
    stream = driver.new_stream()
    mem = driver.alloc_device(total, stream)
    try:
        base = mem.ptr
        staging = np.zeros(total, dtype=np.uint8)
        for op, off in zip(ops, src_off):
            staging[off : off + len(op.body)] = np.frombuffer(op.body, dtype=np.uint8)
        # The right sizes, as an earlier call would leave them.
        staging[slots:] = np.array([op.size for op in ops], dtype=np.uint32).view(np.uint8)
        driver.htod(base, staging.ctypes.data, total, stream)
        driver.memset_d32(base + out_start, CANARY, (out_end - out_start) // 4, stream)
        driver.memset_d32(base + slots, 0, n, stream)  # as the hardware backend does before each call
        params = np.zeros(n, dtype=driver.params_dtype)
        for k, op in enumerate(ops):
            params[k]["src"] = base + src_off[k] + op.skip
            params[k]["src_num_bytes"] = len(op.body) - op.skip
            params[k]["dst"] = base + dst_off[k]
            params[k]["dst_num_bytes"] = op.size
            params[k]["dst_act_bytes"] = base + slots + 4 * k
            params[k]["algo"] = ALGO_BIT[op.algo]
        driver.batch_decompress(params, stream)
        back = np.zeros(total, dtype=np.uint8)
        driver.dtoh(back.ctypes.data, base, total, stream)
        driver.synchronize(stream)
    finally:
        mem.close()
        stream.close()
    return CanaryCall(back, dst_off, out_start, out_end, slots)
