"""Checks of the decompression engine's contract that only a run on it can make.

``hwdecomp selfcheck`` runs :func:`main` in a child process where the engine
exists (a fault there costs only the child) and reads its JSON lines; CI runs
:func:`check_engine` against the engine stand-in, including stand-ins that
break the contract on purpose, to show each check catches what it is for:

* **canaries**: every output sits between
  :data:`~dask_hwdecomp.gpu.hwengine_canaries.GAP` bytes of a canary pattern;
  after the call each output must equal the CPU's and every canary byte
  must be intact (an operation that writes past its output, or a slot that
  lands in one, shows here);
* **size slots**: the slots are first filled with the right sizes, then
  zeroed as the hardware backend does before each call; every successful
  operation must then record its size, and an operation given a truncated
  input (the last one of the call) must not read as its full size.

The truncated operation's own output and what it writes after it are not
judged (``dstNumBytes`` is only a hint); how far it wrote is reported. The
call itself, laid out on the device, is
:func:`~dask_hwdecomp.gpu.hwengine_canaries.run_canary_call`; this module makes
the pages and judges what came back.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..format.codecs import preamble_of
from ..gpu.hwengine import ALGO_BIT
from ..gpu.hwengine_canaries import CANARY, CanaryCall, CanaryOp, run_canary_call
from ..gpu.hwengine_launcher import usable_length
from ..jobs import Algo

__all__ = ["CheckResult", "check_engine", "main"]


@dataclass(frozen=True)
class CheckResult:
    """One row of the selfcheck table."""

    label: str
    ok: bool
    detail: str


class _Page(NamedTuple):
    """A test page: its bitstream, compressed body and the data it decodes to."""

    algo: Algo
    body: bytes
    data: bytes


def _pages(algos, sizes, seed: int) -> list[_Page]:
    from .samples import compress_page, sample_payload

    rng = np.random.default_rng(seed)
    out = []
    for k, size in enumerate(sizes):
        algo = algos[k % len(algos)]
        data = sample_payload(size, rng)
        body = compress_page(algo, data)
        out.append(_Page(algo, body, data))
    return out



def check_engine(driver, sizes=(1, 100, 4096, 65_536, 300_000), seed: int = 0) -> list[CheckResult]:
    """Run one engine call laid out for the checks; their results.

    Parameters
    ----------
    driver : EngineDriver or stand-in
        ``mask``, ``max_length``, ``params_dtype``, ``new_stream``,
        ``alloc_device``, ``htod``, ``dtoh``, ``memset_d32``,
        ``batch_decompress``, ``synchronize``.
    """
    algos = [a for a, bit in ALGO_BIT.items() if driver.mask & bit]
    if not algos:
        return [CheckResult("engine contract", False, f"algorithm mask {driver.mask} decodes nothing")]
    top = max(1, usable_length(driver.max_length))  # the largest page the backend sends
    pages = _pages(algos, [min(s, top) for s in sizes] * len(algos), seed)
    # The last page is the failing one: its input loses its second half.
    last = pages[-1]
    pages[-1] = last._replace(body=last.body[: max(preamble_of(last.algo, last.body) + 1, len(last.body) // 2)])
    ops = [CanaryOp(page.algo, page.body, preamble_of(page.algo, page.body), len(page.data)) for page in pages]
    call = run_canary_call(driver, ops)
    expected = np.array([len(page.data) for page in pages], dtype=np.uint32)
    return _judge(pages, call, expected)


def _judge(pages: list[_Page], call: CanaryCall, expected: np.ndarray) -> list[CheckResult]:
    n = len(pages)
    back, dst_off, out_start, out_end = call.back, call.dst_offsets, call.out_start, call.out_end
    actual = back[call.slots : call.slots + 4 * n].view(np.uint32)
    canary = np.frombuffer(np.uint32(CANARY).tobytes(), dtype=np.uint8)
    wrong, stray = [], []
    judged_end = dst_off[-1]  # the truncated page's output and beyond are not judged
    inside = np.zeros(out_end - out_start, dtype=bool)
    for k in range(n - 1):
        start = dst_off[k]
        data = pages[k].data
        if bytes(back[start : start + len(data)]) != data:
            wrong.append(k)
        inside[start - out_start : start - out_start + len(data)] = True
    region = back[out_start:judged_end]
    pattern = np.resize(canary, out_end - out_start)[: judged_end - out_start]
    touched = np.nonzero((region != pattern) & ~inside[: judged_end - out_start])[0]
    for i in touched[:5]:
        stray.append(int(i) + out_start)
    results = [CheckResult(
        "engine canaries", not wrong and not len(touched),
        f"{n - 1} outputs equal the CPU's, every canary byte intact" if not wrong and not len(touched) else
        f"{len(wrong)} output(s) differ from the CPU's (first: operation {wrong[0] if wrong else '-'}); "
        f"{len(touched)} canary byte(s) overwritten (first at offsets {stray})",
    )]
    bad_slots = [k for k in range(n - 1) if actual[k] != expected[k]]
    hidden = actual[n - 1] == expected[n - 1]
    tail = back[dst_off[-1] : out_end]
    pattern_tail = np.resize(canary, out_end - out_start)[dst_off[-1] - out_start :]
    changed = np.nonzero(tail != pattern_tail)[0]
    reach = int(changed[-1]) + 1 if len(changed) else 0
    results.append(CheckResult(
        "engine size slots", not bad_slots and not hidden,
        (f"{n - 1} slots zeroed then set to their sizes; the truncated input reads {int(actual[n - 1])} "
         f"of {int(expected[n - 1])} bytes (it wrote {reach} bytes at its output, hint {int(expected[n - 1])})")
        if not bad_slots and not hidden else
        f"{len(bad_slots)} slot(s) do not hold their operation's size (first: operation "
        f"{bad_slots[0] if bad_slots else '-'}: {int(actual[bad_slots[0]]) if bad_slots else '-'})"
        + ("; the truncated input's slot reads its full size" if hidden else ""),
    ))
    return results


def main(argv=None) -> int:
    """``python -m dask_hwdecomp.decompress.hwengine_check``: one JSON line per check.

    Runs on device 0's engine; exits 2 when there is none.
    """
    from ..gpu.device import Device
    from ..gpu.hwengine import EngineDriver
    from .hardware import probe

    reason = probe()
    if reason is not None:
        print(json.dumps({"label": "engine contract", "ok": False, "detail": reason}))
        return 2
    device = Device(0)
    try:
        device.activate()
        driver = EngineDriver(device, pool_bytes=64 << 20)
        try:
            results = check_engine(driver)
        finally:
            driver.close()
    finally:
        device.close()
    for r in results:
        print(json.dumps(r.__dict__))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
