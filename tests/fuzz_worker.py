"""Child process of the fuzz harness (tests/fuzzing.py): reads cases, answers verdicts.

Protocol, one JSON object per line: the parent sends ``{"path": ..., "backend": ...}``
(and optionally ``"options"``, further ``read_table`` keywords);
the child answers ``{"stage": "ours"}`` and ``{"stage": "pyarrow"}`` as it
starts each read (so that a crash or hang is attributed to the right
reader), then ``{"verdict": ..., "detail": ...}``. The address space is
limited (RLIMIT_AS) so that unbounded allocation shows as a MemoryError or
a dead child instead of swapping the machine.
"""

from __future__ import annotations

import json
import re
import resource
import sys
import warnings

import pyarrow as pa
import pyarrow.parquet as pq

import dask_hwdecomp
from dask_hwdecomp import CorruptFileError, HwdecompError, HwdecompFallbackWarning
from dask_hwdecomp.readpath import batch

from helpers import tables_equal


def _send(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _memory_error(exc: BaseException | None) -> bool:
    while exc is not None:
        if isinstance(exc, (MemoryError, pa.ArrowMemoryError)):
            return True
        exc = exc.__cause__
    return False


def run_case(path: str, backend: str, options: dict | None = None) -> dict:
    _send({"stage": "ours"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got, ours = dask_hwdecomp.read_table(path, backend=backend, **(options or {})), None
        except Exception as exc:  # classified below: the point of the test
            got, ours = None, exc
    fell_back = any(issubclass(w.category, HwdecompFallbackWarning) for w in caught)
    _send({"stage": "pyarrow"})
    try:
        want, theirs = pq.read_table(path), None
    except Exception as exc:
        want, theirs = None, exc
    verdict = _verdict(got, ours, fell_back, want, theirs)
    verdict["pyarrow"] = None if theirs is None else _describe(theirs)
    return verdict


def _verdict(got, ours, fell_back, want, theirs) -> dict:
    if _memory_error(ours):
        return {"verdict": "FAIL-memory", "detail": repr(ours)}
    if ours is not None:
        if isinstance(ours, HwdecompError):
            if theirs is None:
                return {"verdict": "ok-our-error-pyarrow-reads", "detail": _describe(ours)}
            if not _catches_as_pyarrow(ours, theirs):
                return {"verdict": "FAIL-not-caught-as-pyarrow",
                        "detail": f"{_describe(ours)}; pyarrow: {_describe(theirs)}"}
            return {"verdict": "ok-our-error", "detail": _describe(ours)}
        if fell_back and theirs is not None and type(ours) is type(theirs) and str(ours) == str(theirs):
            return {"verdict": "ok-as-pyarrow", "detail": repr(ours)[:200]}
        return {"verdict": "FAIL-foreign-exception", "detail": f"{type(ours).__module__}.{type(ours).__name__}: {str(ours)[:300]}"}
    if theirs is not None:
        return {"verdict": "FAIL-rows-where-pyarrow-refuses", "detail": f"pyarrow: {type(theirs).__name__}: {str(theirs)[:300]}"}
    why = tables_equal(got, want)
    if why is not None:
        return {"verdict": "FAIL-different-table", "detail": why[:300]}
    return {"verdict": "ok-equal", "detail": ""}


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[-300:]}"


# The classes a handler written for pyarrow names: where pyarrow raised one
# of them, ours must be one too.
_PYARROW_CLASSES = (pa.ArrowNotImplementedError, pa.ArrowInvalid, OSError)


def _catches_as_pyarrow(ours: BaseException, theirs: BaseException) -> bool:
    """Would ``except <pyarrow's class>`` catch ours too?

    Where pyarrow stops at a feature it does not implement (a damaged schema
    type, say) and this reader at corrupt bytes found first, the two name
    different faults of the same mutant: ours need not be pyarrow's class.
    """
    if isinstance(theirs, pa.ArrowNotImplementedError) and isinstance(ours, CorruptFileError):
        return True
    wanted = [c for c in _PYARROW_CLASSES if isinstance(theirs, c)]
    return all(isinstance(ours, c) for c in wanted[:1])


def main() -> None:
    # The mutants must go through the compiled scan and layout (which hand
    # what they refuse to the Python reference), as every read does.
    if not batch.FAST_SCAN:
        raise SystemExit("fuzz worker: the compiled scan is switched off")
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    warm = sys.argv[2] if len(sys.argv) > 2 else None
    if warm:  # start thread pools and allocators before the limit is set
        dask_hwdecomp.read_table(warm, backend="cpu")
        pq.read_table(warm)
    if limit:
        vm = int(re.search(r"VmSize:\s+(\d+) kB", open("/proc/self/status").read()).group(1)) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + limit, vm + limit))
    _send({"ready": True})
    for line in sys.stdin:
        case = json.loads(line)
        _send(run_case(case["path"], case.get("backend", "cpu"), case.get("options")))


if __name__ == "__main__":
    main()
