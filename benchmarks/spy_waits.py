"""Where the GPU service's threads wait: a py-spy native profile's samples, by thread role and by wait.

Usage::

    python benchmarks/spy_waits.py SPY.txt [--top 12]

``run-h200-profile.sh native`` records the service with ``py-spy record
--idle --threads --native --format raw``: every thread at every sample,
idle or not, with its native frames. Each stack is given a role from its
Python frames (the decoder's runner, the decompression dispatchers, the
request threads, the decoder's copy threads, other) and one state from
its frames, tried in this order:

- ``gil``: acquiring the GIL (``take_gil``, or ``PyEval_RestoreThread`` /
  ``PyEval_AcquireThread`` when ``take_gil`` is inlined, or the condition
  wait inside it, ``pthread_cond_timedwait``, where libpython is stripped);
- ``lock``: waiting on a Python lock, condition or event
  (``PyThread_acquire_lock``, ``lock_PyThread_acquire_lock``);
- ``driver``: inside ``libcuda`` (a driver call, the GIL released);
- ``nvcomp``: inside ``libnvcomp`` outside the driver;
- ``compiled``: in compiled code of the package (numba ``nogil`` functions
  have no frames of their own; a native frame under a Python frame that is
  neither of the above);
- ``python``: running Python (no native frame below the innermost Python
  frame but the interpreter's).

Printed per role: its samples, the share of each state, and for ``gil``
and ``driver`` the Python frames they were called from most.
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

# By the thread's name (py-spy's ``thread (id): name`` root frame), else by a Python frame.
ROLES = (
    ("runner", ("hwdecomp-decoder-0", "hwdecomp-decoder-1", "HostedDecoder._serve")),
    ("copier", ("hwdecomp-decoder-copy", "_copy_on_this_thread")),
    ("dispatcher", ("hwdecomp-stream-", "Batcher._serve")),
    ("request", ("hwdecomp-run-", "Session._decode_guarded", "Session._run")),
    ("session", ("hwdecomp-client-", "Session._serve", "Session._loop")),
)
# CPython's GIL waits in ``take_gil`` on a condition variable with a timeout
# (the switch interval); with libpython's symbols stripped, as in the device
# image, ``pthread_cond_timedwait`` is the frame that shows it. Python's own
# locks wait on semaphores (``sem_clockwait``, futexes), never there.
_GIL = ("take_gil", "PyEval_RestoreThread", "PyEval_AcquireThread", "_PyEval_AcquireLock", "pthread_cond_timedwait")
_LOCK = ("PyThread_acquire_lock", "lock_PyThread_acquire_lock", "acquire_timed")
_INTERPRETER = ("libpython", "python3", "_PyEval", "PyObject_", "_PyObject_", "PyFunction_", "method_vectorcall",
                "cfunction_", "slot_tp_", "_Py", "Py", "ceval", "vectorcall")


def _python_frame(frame: str) -> bool:
    """Whether a raw py-spy frame is a Python frame (``name (file.py:line)``)."""
    return ".py:" in frame


def role_of(frames: list[str]) -> str:
    """The thread role of one stack, from its Python frames."""
    for role, marks in ROLES:
        if any(m in frames[0] for m in marks):
            return role
    for role, marks in ROLES:
        if any(m in f for f in frames[1:] for m in marks):
            return role
    return "other"


def state_of(frames: list[str]) -> tuple[str, str]:
    """(state, the innermost Python frame) of one stack, outermost frame first."""
    python = [i for i, f in enumerate(frames) if _python_frame(f)]
    caller = frames[python[-1]] if python else "-"
    below = frames[python[-1] + 1:] if python else frames
    text = ";".join(below)
    if any(m in text for m in _GIL):
        return "gil", caller
    if any(m in text for m in _LOCK):
        return "lock", caller
    if "libcuda" in text:
        return "driver", caller
    if "nvcomp" in text:
        return "nvcomp", caller
    if any(not any(m in f for m in _INTERPRETER) for f in below):
        return "compiled", caller
    return "python", caller


def summarise(lines: list[str]) -> dict:
    """Per role: samples by state, and the callers of each state."""
    out: dict = collections.defaultdict(lambda: {"states": collections.Counter(),
                                                 "callers": collections.defaultdict(collections.Counter)})
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        role = role_of(frames)
        state, caller = state_of(frames)
        out[role]["states"][state] += int(count)
        out[role]["callers"][state][caller] += int(count)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("profile", type=Path)
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args(argv)
    roles = summarise(args.profile.read_text(errors="replace").splitlines())
    for role, data in sorted(roles.items(), key=lambda kv: -sum(kv[1]["states"].values())):
        total = sum(data["states"].values())
        shares = ", ".join(f"{s} {100 * n / total:.1f} %" for s, n in data["states"].most_common())
        print(f"{role}: {total} samples: {shares}")
        for state in ("gil", "driver", "lock", "compiled", "python"):
            callers = data["callers"].get(state)
            if not callers:
                continue
            print(f"  {state}, called from:")
            for caller, n in callers.most_common(args.top):
                print(f"    {100 * n / total:5.1f} % {caller[:150]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
