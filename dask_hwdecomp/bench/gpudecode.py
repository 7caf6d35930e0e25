"""The GPU decode kernels alone: GB/s of Arrow output with the files on the device.

Every uncompressed file of a dataset is planned on the host
(:func:`~dask_hwdecomp.gpudecode.plan.plan_file`) and the bytes of the
column chunks the GPU decodes are copied to the device once. A timed
repeat then runs, file after file, what a read batch runs on the GPU:
:func:`~dask_hwdecomp.gpudecode.runner.measure` (levels, value counts,
string lengths), :func:`~dask_hwdecomp.gpudecode.tables.place_outputs` on
the host, and :func:`~dask_hwdecomp.gpudecode.runner.write` into a device
output buffer allocated before the repeats. The device is synchronized
before and after each repeat. Excluded: the upload of the files and the
copy of the output to the host; included: the small copies of the CHUNK
and PAGE records the runner makes to and from the device (the host places
the outputs between the two phases, as in a read).

Then the same files are timed **merged**, as the GPU service decodes the
batches of reads that reach it together (:mod:`~dask_hwdecomp.gpudecode.merge`):
one device copy of every file's bytes, and per repeat one measure, the
host's placement of every file's outputs
(:func:`~dask_hwdecomp.gpudecode.merge.place_members`) and one write.

Output bytes are the Arrow buffers' bytes (validity bitmaps, values,
offsets, string data; without the alignment gaps between buffers), input
bytes those of the column chunks decoded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .stats import summarize

__all__ = ["unavailable", "measure_gpudecode", "arrow_output_bytes", "TIMING", "MERGED_TIMING"]

TIMING = ("measure + place_outputs + write per file, device synchronized around each repeat; files uploaded "
          "before, output not copied back")
MERGED_TIMING = "one measure + place_members + write of all the files merged into one batch"


def unavailable(allow_simulator: bool = False) -> str | None:
    """Why the kernels cannot be timed here (no numba-cuda, no CUDA device), or None.

    Parameters
    ----------
    allow_simulator : bool
        Accept numba's CUDA simulator as a device (tests: the figures then
        time Python, not a GPU).
    """
    try:
        from ..gpu.cuda_jit import cuda
    except Exception as exc:  # ImportError, or numba-cuda failing in its own import
        return f"numba-cuda cannot be imported ({type(exc).__name__}: {exc})"
    from numba import config

    if getattr(config, "ENABLE_CUDASIM", False):
        return None if allow_simulator else "numba's CUDA simulator is on (NUMBA_ENABLE_CUDASIM): no GPU to time"
    try:
        found = cuda.is_available()
    except Exception as exc:  # a driver that fails to initialise
        return f"numba-cuda cannot use the CUDA driver ({type(exc).__name__}: {exc})"
    return None if found else "no CUDA device (numba-cuda finds none)"


def arrow_output_bytes(chunks: np.ndarray) -> int:
    """Bytes of the Arrow buffers of measured CHUNK records, without alignment gaps."""
    from ..gpudecode.tables import OutKind, validity_bytes, values_bytes

    total = 0
    for c in chunks:
        if int(c["max_def"]) > 0:
            total += validity_bytes(int(c["num_rows"]))
        total += values_bytes(c)
        if int(c["kind"]) == OutKind.BYTES:
            total += int(c["data_bytes"])
    return total


@dataclass(frozen=True)
class _File:
    """One planned file with its chunks' bytes on the device, and its output buffer."""

    path: str
    chunks: np.ndarray
    pages: np.ndarray
    data: Any
    out: Any
    output_bytes: int
    measured: np.ndarray  # the chunks as measured (string bytes), which size the outputs


def _decode(f: _File, measure, write, place_outputs) -> int:
    """Measure, place and write one file on the device; its pages with an error."""
    m = measure(f.data, f.chunks, f.pages, stream=0)
    with m.state as state:
        placed = m.chunks.copy()
        place_outputs(placed)
        errors = write(state, placed, f.out, stream=0)
    return int(np.count_nonzero(errors) + np.count_nonzero(m.pages["error"]))


def measure_gpudecode(paths: Sequence[Path], repeats: int, tick: Callable[[], Any] | None = None,
                      allow_simulator: bool = False) -> dict:
    """Time the GPU decode kernels on ``paths`` (uncompressed Parquet files).

    Parameters
    ----------
    paths : sequence of path
        The files; all of them are held on the device at once.
    repeats : int
        Timed repeats, after one warm-up pass (compilation, allocation).
    tick : callable, optional
        Called after the warm-up and after each repeat (file by file, then merged).
    allow_simulator : bool
        Run under numba's CUDA simulator (tests).

    Returns
    -------
    dict
        ``files``, ``chunks``, ``pages``, ``input_bytes``, ``output_bytes``,
        summaries of ``seconds``, ``output_gbps`` and ``input_gbps`` (one
        value per repeat, all files, file by file), of ``merged_seconds``
        and ``merged_output_gbps`` (the files merged into one batch; or
        ``merged_error``, why that failed),
        ``gpu_columns`` and ``fallbacks`` (columns left to pyarrow, with the
        reason) of the first file, and ``timing`` and ``merged_timing``
        (what is timed).

    Raises
    ------
    RuntimeError
        No CUDA device (see :func:`unavailable`), no file, or a page the
        kernels report as corrupt.
    """
    why = unavailable(allow_simulator)
    if why is not None:
        raise RuntimeError(f"the GPU decode kernels cannot run: {why}")
    if not paths:
        raise RuntimeError("no Parquet file to decode")
    from ..gpu.cuda_jit import cuda
    from ..gpudecode.plan import plan_file
    from ..gpudecode.runner import measure, write
    from ..gpudecode.tables import place_outputs

    files: list[_File] = []
    gathered: list[np.ndarray] = []
    first = None
    for path in paths:
        buf = np.fromfile(path, np.uint8)
        plan = plan_file(buf, path=str(path))
        if first is None:
            first = plan
        gathered.append(plan.gather(buf))
        data = cuda.to_device(gathered[-1])
        # The output's size needs the measured records: measure once now.
        m = measure(data, plan.chunks, plan.pages, stream=0)
        with m.state:
            placed = m.chunks.copy()
            size = place_outputs(placed)
        files.append(_File(str(path), plan.chunks, plan.pages, data, cuda.device_array(size, np.uint8),
                           arrow_output_bytes(placed), m.chunks))
    output_bytes = sum(f.output_bytes for f in files)
    input_bytes = sum(int(f.data.shape[0]) for f in files)
    chunks = sum(len(f.chunks) for f in files)
    pages = sum(len(f.pages) for f in files)
    try:
        errors = sum(_decode(f, measure, write, place_outputs) for f in files)  # warm-up: compiles the kernels
        if errors:
            raise RuntimeError(f"the GPU decode kernels reported {errors} page error(s) in {len(files)} file(s)")
        if tick:
            tick()
        seconds = []
        for _ in range(repeats):
            cuda.synchronize()
            t0 = time.perf_counter()
            for f in files:
                _decode(f, measure, write, place_outputs)
            cuda.synchronize()
            seconds.append(time.perf_counter() - t0)
            if tick:
                tick()
        merged_seconds: list[float] = []
        merged_error = None
        try:
            merged_seconds = _time_merged(files, gathered, repeats, tick)
        except Exception as exc:  # (device memory, say) the file-by-file figures still count
            merged_error = f"{type(exc).__name__}: {exc}"
    finally:
        files.clear()  # the device memory goes back before the next part
        gathered.clear()
    assert first is not None
    return {
        "files": len(paths),
        "chunks": chunks,
        "pages": pages,
        "input_bytes": input_bytes,
        "output_bytes": output_bytes,
        "seconds": summarize(seconds),
        "output_gbps": summarize([output_bytes / 1e9 / s for s in seconds]),
        "input_gbps": summarize([input_bytes / 1e9 / s for s in seconds]),
        **({"merged_error": merged_error} if merged_error else {
            "merged_seconds": summarize(merged_seconds),
            "merged_output_gbps": summarize([output_bytes / 1e9 / s for s in merged_seconds])}),
        "gpu_columns": sorted(first.gpu_columns[0]),
        "fallbacks": dict(sorted(first.fallbacks[0].items())),
        "timing": TIMING,
        "merged_timing": MERGED_TIMING,
    }


def _time_merged(files: list[_File], gathered: list[np.ndarray], repeats: int,
                 tick: Callable[[], Any] | None) -> list[float]:
    """Seconds of each repeat decoding ``files`` merged into one batch (the kernels are warm by then).

    Raises
    ------
    RuntimeError
        A page the kernels report as corrupt.
    """
    from ..gpu.cuda_jit import cuda
    from ..gpudecode.merge import PlanRecords, merge_plans, place_members
    from ..gpudecode.runner import measure, write

    # The records each file measured alone: their string bytes size the output
    # (measure itself starts from zero).
    none = np.zeros((0, 3), np.int64)
    merged = merge_plans([PlanRecords(none, f.measured, f.pages, int(f.data.shape[0])) for f in files])
    host = np.zeros(max(1, merged.data_bytes), np.uint8)
    for g, base in zip(gathered, merged.data_base.tolist()):
        host[base : base + len(g)] = g
    data = cuda.to_device(host)
    out = cuda.device_array(max(1, int(place_members(merged, merged.chunks.copy())[-1])), np.uint8)
    seconds = []
    for _ in range(repeats):
        cuda.synchronize()
        t0 = time.perf_counter()
        m = measure(data, merged.chunks, merged.pages, stream=0)
        with m.state as state:
            placed = m.chunks.copy()
            if int(place_members(merged, placed)[-1]) > out.shape[0]:
                raise RuntimeError("the merged files measured more output than each file alone")
            errors = write(state, placed, out, stream=0)
        cuda.synchronize()
        seconds.append(time.perf_counter() - t0)
        if tick:
            tick()
        bad = int(np.count_nonzero(errors) + np.count_nonzero(m.pages["error"]))
        if bad:
            raise RuntimeError(f"the GPU decode kernels reported {bad} page error(s) in the merged files")
    return seconds
