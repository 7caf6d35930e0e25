"""Fewer GIL hand-offs in the GPU service: calls inside one held context, the switch interval knob (CI, no GPU)."""

from __future__ import annotations

import threading

import pytest

from dask_hwdecomp.gpu.batcher import Batcher
from dask_hwdecomp.gpu.cuda_jit import held_context

from pagegen import make_part


class _HoldingOps:
    """Ops with ``held``: marks the calling thread as inside it while ``fn`` runs."""

    def __init__(self):
        self.inside = threading.local()
        self.held_calls = 0

    def activate(self) -> None:
        pass

    def held(self, fn, *args):
        self.held_calls += 1
        self.inside.flag = True
        try:
            return fn(*args)
        finally:
            self.inside.flag = False


class _Runner:
    """Records, per call, whether it ran inside the ops' ``held``."""

    def __init__(self, ops):
        self.ops = ops
        self.inside: list[bool] = []

    def run(self, call):
        self.inside.append(getattr(self.ops.inside, "flag", False))
        return [[] for _ in call]

    def stats(self):
        return {}

    def close(self):
        pass


def test_every_call_of_the_batcher_runs_inside_the_ops_held_context():
    ops = _HoldingOps()
    runner = _Runner(ops)
    batcher = Batcher([runner], ops, budget_bytes=1 << 20, latency_s=0.0)
    try:
        for k in range(3):
            assert batcher.run([make_part(k)]) == [[]]
    finally:
        batcher.close()
    assert runner.inside == [True, True, True]
    assert ops.held_calls == 3


def test_an_error_inside_the_held_context_reaches_the_caller_and_leaves_it():
    ops = _HoldingOps()

    class Failing(_Runner):
        def run(self, call):
            super().run(call)
            raise RuntimeError("the call failed")

    runner = Failing(ops)
    batcher = Batcher([runner], ops, budget_bytes=1 << 20, latency_s=0.0)
    try:
        with pytest.raises(RuntimeError, match="the call failed"):
            batcher.run([make_part(0)])
    finally:
        batcher.close()
    assert runner.inside == [True]


def test_held_context_calls_the_function_with_its_arguments():
    assert held_context(lambda a, b=0: a * 10 + b, 4, b=2) == 42
    with pytest.raises(ValueError, match="bad"):
        held_context(lambda: (_ for _ in ()).throw(ValueError("bad")))


@pytest.mark.parametrize(("value", "seconds"), [(None, None), ("", None), ("0.2", 0.0002), (" 5 ", 0.005)])
def test_the_service_switch_interval_comes_from_the_environment(monkeypatch, value, seconds):
    from dask_hwdecomp.service.main import SWITCH_ENV, switch_interval_from_env

    if value is None:
        monkeypatch.delenv(SWITCH_ENV, raising=False)
    else:
        monkeypatch.setenv(SWITCH_ENV, value)
    assert switch_interval_from_env() == seconds


@pytest.mark.parametrize("value", ["0", "1000", "fast", "-1"])
def test_a_switch_interval_out_of_range_is_refused_by_name(monkeypatch, value):
    from dask_hwdecomp.service.main import SWITCH_ENV, switch_interval_from_env

    monkeypatch.setenv(SWITCH_ENV, value)
    with pytest.raises(ValueError, match=SWITCH_ENV):
        switch_interval_from_env()
