"""What ``hwdecomp selfcheck`` checks on the engine, run against the stand-in.

Each check runs on a stand-in that keeps the contract (it passes) and on one
that breaks it the way the check is for (it fails): writes past an output,
size slots the engine does not write, and a failed operation the engine
does not report, in a batch merged from two callers.
"""

from __future__ import annotations

import pytest

from dask_hwdecomp.cli.selfcheck import _check_merged_failure
from dask_hwdecomp.decompress.hardware import create_with
from dask_hwdecomp.decompress.hwengine_check import check_engine
from dask_hwdecomp.options import Options

from standin_hwengine import StandinHwEngine


def _by_label(results):
    return {r.label: r for r in results}


def test_standin_hwengine_check_passes_on_the_contract():
    results = _by_label(check_engine(StandinHwEngine()))
    assert results["engine canaries"].ok, results["engine canaries"].detail
    assert results["engine size slots"].ok, results["engine size slots"].detail


def test_standin_hwengine_check_catches_writes_past_an_output():
    results = _by_label(check_engine(StandinHwEngine(misbehave="write_past")))
    assert not results["engine canaries"].ok
    assert "canary byte(s) overwritten" in results["engine canaries"].detail


@pytest.mark.parametrize("misbehave", ["no_slot", "claim_hint"])
def test_standin_hwengine_check_catches_stale_or_false_size_slots(misbehave):
    # no_slot: the slots were filled with the right sizes first; only the
    # zeroing before the call keeps them from passing.
    results = _by_label(check_engine(StandinHwEngine(misbehave=misbehave)))
    assert not results["engine size slots"].ok


def test_standin_hwengine_check_with_one_algorithm():
    results = _by_label(check_engine(StandinHwEngine(mask=2, max_length=1 << 20)))
    assert all(r.ok for r in results.values())


def _merging(engine):
    return create_with(engine, Options(streams=1, batch_latency_ms=3000.0))


def test_standin_hwengine_selfcheck_merged_batch_with_a_failed_page():
    with _merging(StandinHwEngine()) as b:
        ok, note = _check_merged_failure(b)
    assert ok and note.endswith("in one batch"), note


def test_standin_hwengine_selfcheck_merged_batch_catches_an_unreported_failure():
    # The engine records the hint for the failed operation: the page is not
    # named, and the selfcheck says so.
    with _merging(StandinHwEngine(misbehave="claim_hint")) as b:
        ok, note = _check_merged_failure(b)
    assert not ok and "truncated page" in note


def test_selfcheck_hwengine_rows_say_why_without_an_engine():
    # The engine checks run in a child process; here it finds no engine and says why.
    from dask_hwdecomp.cli.selfcheck import _check_engine_contract
    from dask_hwdecomp.decompress.hardware import probe

    (row,) = _check_engine_contract()
    assert row[:3] == ("engine contract", "hardware", False)
    assert row[3] == probe()

