"""``backend="auto"`` where a GPU backend runs: the way each piece takes, and what the report says.

The rule (:func:`dask_hwdecomp.routing.ways.choose`) has a test per case of
its table; the reads run the real page path over the engine stand-in in
this process (no GPU here), and check that a piece given to pyarrow never
reaches a GPU backend and that the report says which way it took and why.
"""

from __future__ import annotations

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dask_hwdecomp import Options, ReadReport, collect_reports, hwdecomp, read_table
from dask_hwdecomp.decompress.hardware import create_with
from dask_hwdecomp.format.structs import Codec
from dask_hwdecomp.jobs import Algo
from dask_hwdecomp.report import PYARROW_CHOSEN
from dask_hwdecomp.routing import registry
from dask_hwdecomp.routing import router as routing
from dask_hwdecomp.routing.router import pyarrow_reads
from dask_hwdecomp.routing.ways import PYARROW_FASTER, Way, choose, page_path_only

from standin_hwengine import StandinHwEngine

# The Parquet codecs pyarrow writes, by the name it takes.
WRITTEN = {"none": Codec.UNCOMPRESSED, "snappy": Codec.SNAPPY, "gzip": Codec.GZIP, "zstd": Codec.ZSTD,
           "lz4": Codec.LZ4_RAW, "brotli": Codec.BROTLI}
# A codec the sweep found GPU decompression with pyarrow decoding faster on, if any, and one it did not.
FASTER_ON_GPU = sorted(set(WRITTEN) - {k for k, c in WRITTEN.items() if c in PYARROW_FASTER})
SLOWER_ON_GPU = sorted(k for k, c in WRITTEN.items() if c in PYARROW_FASTER)


# -- the rule, case by case -----------------------------------------------------

@pytest.mark.parametrize("changes, why", [
    ({"backend": "hardware"}, "backend='hardware'"),
    ({"backend": "cpu"}, "backend='cpu'"),
    ({"decode": "gpu"}, "decode='gpu'"),
    ({"verify_checksums": True}, "verify_checksums=True"),
    ({"max_page_bytes": "64MiB"}, "max_page_bytes set"),
    ({"max_batch_bytes": "1GiB"}, "max_batch_bytes set"),
    ({}, None),
    ({"decode": "cpu"}, None),
    ({"decode": "auto", "batch_bytes": "64MiB"}, None),
])
def test_options_only_the_page_path_honours_keep_it(changes, why):
    assert page_path_only(Options(**changes)) == why


@pytest.mark.parametrize("codec", list(Codec))
def test_decode_auto_takes_the_gpu_decode_on_every_codec(codec):
    choice = choose(Options(decode="auto"), [codec, Codec.SNAPPY])
    assert choice.way is Way.GPU_DECODE and "faster than pyarrow's own read" in choice.reason


@pytest.mark.parametrize("codec", list(Codec))
def test_decode_cpu_takes_pyarrow_where_it_was_measured_faster(codec):
    choice = choose(Options(decode="cpu"), [codec])
    if codec in PYARROW_FASTER:
        assert choice.way is Way.PYARROW
        assert choice.reason.endswith(f"on {codec.name}")
    else:
        assert choice.way is Way.GPU_DECOMPRESSION


def test_one_slower_codec_gives_the_whole_piece_to_pyarrow():
    slower = sorted(PYARROW_FASTER)[0]
    choice = choose(Options(decode="cpu"), [*(c for c in Codec if c not in PYARROW_FASTER), slower, slower])
    assert choice.way is Way.PYARROW and choice.reason.endswith(f"on {slower.name}")


def test_an_unknown_codec_number_goes_to_pyarrow_with_decode_cpu():
    assert choose(Options(decode="cpu"), [99]).way is Way.PYARROW


@pytest.mark.parametrize("decode, way, asked", [("cpu", Way.GPU_DECOMPRESSION, "verify_checksums=True"),
                                                ("gpu", Way.GPU_DECODE, "decode='gpu'"),
                                                ("auto", Way.GPU_DECODE, "verify_checksums=True")])
def test_asked_options_win_over_the_measurements(decode, way, asked):
    options = Options(decode=decode, verify_checksums=True)
    choice = choose(options, list(PYARROW_FASTER) or [Codec.ZSTD])
    assert choice.way is way and choice.reason == f"asked for by {asked}"


def test_no_gpu_sends_the_whole_read_to_pyarrow_only_without_page_path_options(monkeypatch):
    monkeypatch.setattr(registry, "probe", lambda name: None if name == "cpu" else "no GPU (test)")
    assert pyarrow_reads(Options()) and pyarrow_reads(Options(decode="cpu"))
    assert not pyarrow_reads(Options(verify_checksums=True))
    assert not pyarrow_reads(Options(backend="cpu"))
    monkeypatch.setattr(registry, "probe", lambda name: None)
    assert not pyarrow_reads(Options(decode="cpu"))


# -- reads over the engine stand-in ---------------------------------------------

class _Counting:
    """The hardware backend over the engine stand-in, counting the jobs it is given."""

    def __init__(self):
        self.backend = create_with(StandinHwEngine(mask=7, max_length=4 << 20), Options(streams=1))
        self.jobs = 0
        self.algorithms = self.backend.algorithms

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def decompress(self, jobs, *args, **kwargs):
        self.jobs += len(jobs)
        return self.backend.decompress(jobs, *args, **kwargs)


@pytest.fixture
def gpu_here(monkeypatch):
    """A GPU backend that can run here: the engine stand-in, in process; yields it to count its jobs."""
    counting = _Counting()
    # The stand-in engine decodes Snappy, Deflate and LZ4; the rest go to the CPU pool, as without nvCOMP.
    monkeypatch.setitem(routing.ROUTES, "auto", {a: ("hardware", "cpu") if a in counting.algorithms else ("cpu",)
                                                 for a in Algo})
    real_probe, real_get = registry.probe, registry.get_backend
    monkeypatch.setattr(registry, "probe", lambda name: None if name in ("hardware", "cpu") else real_probe(name))
    monkeypatch.setattr(registry, "get_backend",
                        lambda name, opts: counting if name == "hardware" else real_get(name, opts))
    yield counting
    counting.backend.close()


def _write(tmp_path, compression: str, name: str = "t.parquet") -> str:
    rng = np.random.default_rng(3)
    n = 4000
    table = pa.table({"i": np.arange(n), "f": rng.random(n), "s": [f"k{i % 17}" for i in range(n)]})
    path = tmp_path / name
    pq.write_table(table, path, compression=compression, row_group_size=1000)
    return str(path)


@pytest.mark.parametrize("compression", SLOWER_ON_GPU)
def test_read_table_gives_pyarrow_a_file_it_reads_faster(tmp_path, gpu_here, compression):
    path = _write(tmp_path, compression)
    report = ReadReport()
    got = read_table(path, decode="cpu", report=report)
    assert got.equals(pq.read_table(path))
    assert gpu_here.jobs == 0
    assert {b for b, _ in report.by_backend} == {PYARROW_CHOSEN}
    assert report.backends == {WRITTEN[compression].name: [PYARROW_CHOSEN]}
    stats = report.by_backend[(PYARROW_CHOSEN, WRITTEN[compression].name)]
    footer = pq.read_metadata(path)
    assert stats.compressed_bytes == sum(footer.row_group(r).column(c).total_compressed_size
                                         for r in range(footer.num_row_groups) for c in range(3))
    whys = {why for (_c, where, why) in report.columns if where == "pyarrow"}
    assert whys == {choose(Options(decode="cpu"), [WRITTEN[compression]]).reason}
    assert {c for (c, _w, _why) in report.columns} == {"i", "f", "s"}
    assert report.columns[("i", "pyarrow", whys.pop())].rows == 4000
    assert f"on {PYARROW_CHOSEN}" in str(report)


@pytest.mark.parametrize("compression", FASTER_ON_GPU or ["snappy"])
def test_read_table_keeps_the_gpu_where_it_is_faster_or_asked(tmp_path, gpu_here, compression):
    path = _write(tmp_path, compression)
    options = {"decode": "cpu"} if FASTER_ON_GPU else {"decode": "cpu", "verify_checksums": True}
    report = ReadReport()
    assert read_table(path, report=report, **options).equals(pq.read_table(path))
    assert gpu_here.jobs > 0 and PYARROW_CHOSEN not in {b for b, _ in report.by_backend}


@pytest.mark.parametrize("compression", SLOWER_ON_GPU[:1])
def test_verify_checksums_keeps_a_slower_codec_on_the_page_path(tmp_path, gpu_here, compression):
    path = _write(tmp_path, compression)
    report = ReadReport()
    assert read_table(path, decode="cpu", verify_checksums=True, report=report).equals(pq.read_table(path))
    assert PYARROW_CHOSEN not in {b for b, _ in report.by_backend}


def test_row_groups_and_columns_of_a_chosen_file(tmp_path, gpu_here):
    path = _write(tmp_path, "zstd")
    report = ReadReport()
    got = read_table(path, decode="cpu", row_groups=[2, 0], columns=["s", "i"], report=report)
    assert got.equals(pq.ParquetFile(path).read_row_groups([2, 0], columns=["s", "i"]))
    assert {c for (c, _w, _why) in report.columns} == {"s", "i"}
    assert all(d.chunks == 2 and d.rows == 2000 for d in report.columns.values())


def test_dask_reads_mixed_files_each_its_way(tmp_path, gpu_here):
    # One directory, files of two codecs: with decode="cpu" the zstd file goes
    # to pyarrow and the snappy one to the GPU where the rule keeps it there.
    _write(tmp_path, "zstd", "a.parquet")
    _write(tmp_path, "snappy", "b.parquet")
    with dask.config.set(scheduler="sync"), collect_reports() as report:
        got = dd.read_parquet(str(tmp_path), engine=hwdecomp, hwdecomp_options={"decode": "cpu"}).compute()
    expected = dd.read_parquet(str(tmp_path), engine="pyarrow").compute()
    pd.testing.assert_frame_equal(got, expected)
    assert report.backends["ZSTD"] == [PYARROW_CHOSEN]
    snappy_gpu = Codec.SNAPPY not in PYARROW_FASTER
    assert report.backends["SNAPPY"] == (["hardware"] if snappy_gpu else [PYARROW_CHOSEN])
    assert (gpu_here.jobs > 0) == snappy_gpu
    zstd_why = choose(Options(decode="cpu"), [Codec.ZSTD]).reason
    assert any(why == zstd_why for (_c, _w, why) in report.columns)
