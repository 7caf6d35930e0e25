"""The service process's own settings, read from its environment."""

from __future__ import annotations

import pytest

from dask_hwdecomp.service.main import SWITCH_INTERVAL_ENV, switch_interval_from_env


@pytest.mark.parametrize(("value", "seconds"), [(None, None), ("", None), ("0.0005", 0.0005), (" 1e-4 ", 1e-4)])
def test_the_switch_interval_comes_from_the_environment(monkeypatch, value, seconds):
    if value is None:
        monkeypatch.delenv(SWITCH_INTERVAL_ENV, raising=False)
    else:
        monkeypatch.setenv(SWITCH_INTERVAL_ENV, value)
    assert switch_interval_from_env() == seconds


@pytest.mark.parametrize("value", ["0", "1", "fast", "-0.001", "nan"])
def test_a_switch_interval_out_of_range_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv(SWITCH_INTERVAL_ENV, value)
    with pytest.raises(ValueError, match=SWITCH_INTERVAL_ENV):
        switch_interval_from_env()
