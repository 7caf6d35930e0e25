"""Options: an ``Options`` or a dict, byte sizes as strings, the environment, options in the graph."""

from __future__ import annotations

import warnings

import dask.dataframe as dd
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dask_hwdecomp
from dask_hwdecomp import LimitExceededError, Options, ReadReport, collect_reports, current_options, hwdecomp
from dask_hwdecomp.options import UnknownOptionWarning, parse_option_texts


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    p = tmp_path_factory.mktemp("options") / "data.parquet"
    pq.write_table(pa.table({"k": np.arange(5000), "s": [f"v{i % 7}" for i in range(5000)]}), p,
                   compression="snappy", row_group_size=1000)
    return str(p)


# --- byte sizes -----------------------------------------------------------------------------


def test_byte_sizes_take_strings():
    opts = Options(batch_bytes="64MiB", max_page_bytes="1MB", max_batch_bytes="1GiB")
    assert (opts.batch_bytes, opts.max_page_bytes, opts.max_batch_bytes) == (64 << 20, 1_000_000, 1 << 30)
    assert Options().replace(batch_bytes="2 kiB").batch_bytes == 2048
    with pytest.raises(ValueError, match="max_page_bytes"):
        Options(max_page_bytes="lots")


def test_byte_sizes_from_the_environment(monkeypatch):
    monkeypatch.setenv("HWDECOMP_MAX_PAGE_BYTES", "64MiB")
    monkeypatch.setenv("HWDECOMP_BATCH_BYTES", "1000")
    opts = current_options()
    assert (opts.max_page_bytes, opts.batch_bytes) == (64 << 20, 1000)
    monkeypatch.setenv("HWDECOMP_MAX_BATCH_BYTES", "a lot")
    with pytest.raises(ValueError, match="HWDECOMP_MAX_BATCH_BYTES"):
        current_options()


def test_options_written_as_text_parse_as_their_variables_do():
    typed = parse_option_texts({"streams": "8", "batch_bytes": "64MiB", "zstd_stream_walk": "off",
                                "batch_latency_ms": "0.5", "decode": "cpu"})
    assert typed == {"streams": 8, "batch_bytes": 64 << 20, "zstd_stream_walk": False, "batch_latency_ms": 0.5,
                     "decode": "cpu"}
    assert Options(**typed).streams == 8
    with pytest.raises(TypeError, match=r"stream \(did you mean streams\?\)"):
        parse_option_texts({"stream": "8"})
    with pytest.raises(ValueError, match="HWDECOMP_STREAMS"):
        parse_option_texts({"streams": "eight"})


# --- values of each option's kind -----------------------------------------------------------


@pytest.mark.parametrize("name", ["verify_checksums", "cpu_retry"])
@pytest.mark.parametrize("value", ["false", "no", "True", "", 0, 1, None], ids=repr)
def test_booleans_take_only_booleans(name, value):
    # "false" is true in Python: taken as it is, it turned the feature on.
    with pytest.raises(ValueError, match=f"{name} must be True or False"):
        Options(**{name: value})
    with pytest.raises(ValueError, match=name):
        Options().replace(**{name: value})


def test_numpy_booleans_and_integers_are_taken_as_python_s():
    opts = Options(verify_checksums=np.bool_(True), cpu_threads=np.int64(3), gpu_timeout_s=5)
    assert opts.verify_checksums is True
    assert type(opts.cpu_threads) is int and opts.cpu_threads == 3
    assert type(opts.gpu_timeout_s) is float and opts.gpu_timeout_s == 5.0


@pytest.mark.parametrize(
    "changes",
    [{"batch_latency_ms": "2"}, {"gpu_timeout_s": "60"}, {"batch_latency_ms": float("nan")}, {"streams": "4"},
     {"cpu_threads": 2.0}, {"gpu_timeout_s": True}, {"service_dir": 3}, {"backend": 3}],
    ids=str,
)
def test_other_options_take_values_of_their_kind(changes):
    with pytest.raises(ValueError, match=next(iter(changes))):
        Options(**changes)


def test_every_way_in_refuses_a_string_for_a_boolean(path):
    # Before, each of these read the file with CRC checks, as if True.
    with pytest.raises(ValueError, match="verify_checksums must be True or False"):
        dask_hwdecomp.read_table(path, verify_checksums="false")
    with pytest.raises(ValueError, match="verify_checksums must be True or False"):
        dask_hwdecomp.read_table(path, hwdecomp_options={"verify_checksums": "no"})
    with pytest.raises(ValueError, match="cpu_retry must be True or False"):
        with dask_hwdecomp.options(cpu_retry="false"):
            pass
    with pytest.raises(ValueError, match="verify_checksums must be True or False"):
        dd.read_parquet(path, engine=hwdecomp, hwdecomp_options={"verify_checksums": "false"})


def test_the_environment_still_takes_boolean_words(monkeypatch):
    monkeypatch.setenv("HWDECOMP_VERIFY_CHECKSUMS", "false")
    assert current_options().verify_checksums is False
    monkeypatch.setenv("HWDECOMP_VERIFY_CHECKSUMS", "yes")
    assert current_options().verify_checksums is True


# --- unknown names -------------------------------------------------------------------------


def test_a_misspelt_option_gets_the_closest_name_every_way_in(path):
    calls = {
        "Options": lambda: Options(backnd="cpu"),
        "replace": lambda: Options().replace(backnd="cpu"),
        "current_options": lambda: current_options(backnd="cpu"),
        "read_table keyword": lambda: dask_hwdecomp.read_table(path, backnd="cpu"),
        "read_table hwdecomp_options": lambda: dask_hwdecomp.read_table(path, hwdecomp_options={"backnd": "cpu"}),
        "dd.read_parquet": lambda: dd.read_parquet(path, engine=hwdecomp, hwdecomp_options={"backnd": "cpu"}),
        "options block": lambda: dask_hwdecomp.options(backnd="cpu").__enter__(),
    }
    for way, call in calls.items():
        with pytest.raises(TypeError, match=r"backnd \(did you mean backend\?\)") as info:
            call()
        assert "unknown hwdecomp option" in str(info.value), way


def test_a_name_like_no_option_lists_the_options():
    with pytest.raises(TypeError, match="zzzz; the options are backend, cpu_threads, "):
        Options(zzzz=1)


# --- unknown environment variables ----------------------------------------------------------


def test_unknown_variable_warns_once_with_the_closest_name(monkeypatch):
    monkeypatch.setenv("HWDECOMP_BACKNED", "cpu")
    with pytest.warns(UnknownOptionWarning, match="HWDECOMP_BACKNED.*did you mean HWDECOMP_BACKEND"):
        current_options()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownOptionWarning)
        current_options()  # once per process


def _variables_the_package_reads() -> set:
    """Every ``HWDECOMP_*`` name the package's source spells out as a string."""
    import re
    from pathlib import Path

    import dask_hwdecomp

    root = Path(dask_hwdecomp.__file__).parent
    return {m for f in root.rglob("*.py") for m in re.findall(r"[\"'](HWDECOMP_[A-Z0-9_]+)[\"']", f.read_text())}


def test_variables_that_are_not_options_do_not_warn(monkeypatch):
    # Each variable the package reads itself (the decoder's runners, the
    # timeline, nvCOMP's location, ...): setting it is no typo.
    names = _variables_the_package_reads()
    assert {"HWDECOMP_NVCOMP_LIB", "HWDECOMP_DECODE_RUNNERS", "HWDECOMP_TIMELINE"} <= names
    for name in names:
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("HWDECOMP_NVCOMP_LIB", "/nowhere/libnvcomp.so")
    monkeypatch.delenv("HWDECOMP_TIMELINE")  # it would write spans
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownOptionWarning)
        current_options()


# --- Options as hwdecomp_options ------------------------------------------------------------


def test_read_table_takes_an_options_object(path):
    report = ReadReport()
    got = dask_hwdecomp.read_table(path, hwdecomp_options=Options(backend="cpu"), report=report)
    assert got.equals(pq.read_table(path)) and report.backends == {"SNAPPY": ["cpu"]}
    with pytest.raises(LimitExceededError, match="max_page_bytes"):
        dask_hwdecomp.read_table(path, hwdecomp_options={"backend": "cpu", "max_page_bytes": "100B"})


def test_dask_takes_an_options_object(path):
    with collect_reports() as report:
        got = dd.read_parquet(path, engine=hwdecomp, hwdecomp_options=Options(backend="cpu")).compute()
    assert got.equals(dd.read_parquet(path, engine="pyarrow").compute())
    assert report.backends == {"SNAPPY": ["cpu"]}
    with pytest.raises(TypeError, match="Options or a dict"):
        dd.read_parquet(path, engine=hwdecomp, hwdecomp_options=[("backend", "cpu")])


def test_an_options_object_is_a_complete_set_but_for_the_machine_s_core_count():
    from dask_hwdecomp.options import as_option_dict

    given = as_option_dict(Options(backend="cpu"))
    assert given["backend"] == "cpu" and given["batch_bytes"] == Options().batch_bytes
    assert "cpu_threads" not in given  # the reading machine's default applies there
    assert as_option_dict(Options(cpu_threads=3))["cpu_threads"] == 3


# --- the options context travels with the graph ---------------------------------------------


def test_context_at_the_call_travels_with_the_graph(path):
    with dask_hwdecomp.options(backend="cpu", max_page_bytes="100B"):
        df = dd.read_parquet(path, engine=hwdecomp)
    with pytest.raises(LimitExceededError, match="max_page_bytes"):
        df.compute(scheduler="threads")  # outside the block: its options still apply
    with dask_hwdecomp.options(backend="cpu"):
        df = dd.read_parquet(path, engine=hwdecomp)
    with collect_reports() as report:
        df.compute(scheduler="sync")
    assert report.backends == {"SNAPPY": ["cpu"]}


def test_the_call_s_own_options_win_over_the_context(path):
    with dask_hwdecomp.options(backend="cpu", max_page_bytes="100B"):
        df = dd.read_parquet(path, engine=hwdecomp, hwdecomp_options={"max_page_bytes": "1MiB"})
    with collect_reports() as report:
        df.compute(scheduler="threads")
    assert report.backends == {"SNAPPY": ["cpu"]}


def test_pinned_bytes_is_a_byte_size_with_a_floor():
    from dask_hwdecomp.decompress.gpu_backend import pinned_cap

    assert Options(pinned_bytes="2 GiB").pinned_bytes == 2 << 30
    assert pinned_cap(Options(pinned_bytes="1 GiB")) == 1 << 30
    assert pinned_cap(Options()) >= 256 << 20  # 0: the default rule
    with pytest.raises(ValueError, match="pinned_bytes"):
        Options(pinned_bytes="1 MiB")
