"""Fuzzing the read path with mutated files of every codec.

Each mutant must give either one of the project's exceptions or a table equal
to pyarrow's; never another exception type, rows where pyarrow refuses the
file, a crash, a hang or unbounded memory. Cases run in a child process
(timeout per case, RLIMIT_AS). CI runs a fixed, seeded sequence for a bounded
time; ``-m slow`` runs it for longer. The number of cases run is printed in
the terminal summary.
"""

from __future__ import annotations

import os
import random
import time
import tracemalloc

import cramjam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dask_hwdecomp
from dask_hwdecomp import CorruptPageError, HwdecompError, LimitExceededError
from dask_hwdecomp.format.structs import Codec, PageHeader
from dask_hwdecomp.format.thrift import T, encode_struct

from fuzzing import MUTATORS, Harness, file_map
from helpers import FUZZ_STATS, PYARROW_ERRORS, corpus_root
from rewrite import compress_values, gzip_members, hadoop_lz4, rewrite_pages

CORPUS_SEEDS = [
    "data/hadoop_lz4_compressed.parquet",
    "data/non_hadoop_lz4_compressed.parquet",
    "data/concatenated_gzip_members.parquet",
    "data/datapage_v2_empty_datapage.snappy.parquet",
    "data/page_v2_empty_compressed.parquet",
    "data/rle-dict-snappy-checksum.parquet",
    "data/datapage_v2.snappy.parquet",
    "data/nested_maps.snappy.parquet",
    "data/byte_stream_split.zstd.parquet",
    "data/delta_length_byte_array.parquet",
]


def _seed_table(n: int = 200) -> pa.Table:
    rng = np.random.default_rng(3)
    f = rng.normal(size=n)
    f[::11] = np.nan
    return pa.table(
        {
            "i": pa.array(rng.integers(-1 << 40, 1 << 40, n)),
            "s": pa.array([f"v{i % 9}" if i % 4 else None for i in range(n)]),
            "l": pa.array([[i, None] if i % 3 else None for i in range(n)], pa.list_(pa.int32())),
            "st": pa.array([{"a": i, "b": str(i)} if i % 5 else None for i in range(n)]),
            "f": pa.array(f),
            "b": pa.array(rng.integers(0, 2, n).astype(bool)),
        }
    )


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """Small valid files: every codec × page version (dictionary on and off), corpus files, hand-built pages."""
    d = tmp_path_factory.mktemp("fuzz-seeds")
    table = _seed_table()
    out = []
    for codec in ("none", "snappy", "gzip", "lz4", "zstd", "brotli"):
        for version in ("1.0", "2.0"):
            for dictionary in (True, False):
                p = d / f"{codec}-v{version[0]}-{'dict' if dictionary else 'plain'}.parquet"
                pq.write_table(table, p, compression=codec, data_page_version=version, use_dictionary=dictionary,
                               row_group_size=100, data_page_size=400, write_batch_size=40)
                out.append(p)
    plain2 = d / "none-v2-plain.parquet"
    plain1 = d / "none-v1-plain.parquet"
    for name, src, codec, compress in [
        ("gzip-members-v1", plain1, Codec.GZIP, gzip_members(3)),
        ("gzip-members-v2", plain2, Codec.GZIP, gzip_members(2, filename="x", comment=True)),
        ("lz4-hadoop-v1", plain1, Codec.LZ4, hadoop_lz4(3)),
        ("snappy-v2-stored", plain2, Codec.SNAPPY, lambda b: bytes(cramjam.snappy.compress_raw(b))),
    ]:
        p = d / f"{name}.parquet"
        rewrite_pages(src, p, compress_values(compress, v2_uncompressed=lambda pg: pg.page.ordinal % 3 == 0), codec=codec)
        out.append(p)
    root = corpus_root()
    out += [root / s for s in CORPUS_SEEDS if (root / s).exists()]
    return [(p, file_map(p)) for p in out]


def _fuzz(seeds, tmp_path, *, seconds: float, max_cases: int, offset: int, name: str):
    harness = Harness(tmp_path, timeout=10.0, memory_limit=3 << 30, warm=seeds[0][0])
    names = sorted(MUTATORS)
    started = time.monotonic()
    i = 0
    try:
        while i < max_cases and time.monotonic() - started < seconds:
            path, fm = seeds[i % len(seeds)]
            mutator = names[(i // len(seeds)) % len(names)]
            rnd = random.Random(offset + i)
            data = MUTATORS[mutator](fm, rnd)
            harness.run(data, f"{mutator}:{path.name}:{offset + i}")
            i += 1
    finally:
        harness.close()
    r = harness.results
    elapsed = time.monotonic() - started
    FUZZ_STATS.append(f"{name}: {r.summary()} in {elapsed:.1f}s; per mutator: {dict(sorted(r.by_mutator.items()))}"
                      + (f"; pyarrow itself crashed/hung on {len(r.oracle_trouble)}" if r.oracle_trouble else "")
                      + f"; our error where pyarrow reads, by cause: {dict(sorted(r.stricter.items()))}")
    print(FUZZ_STATS[-1])
    if r.failures:
        keep = tmp_path / "failures"
        keep.mkdir(exist_ok=True)
        lines = []
        for label, verdict, detail, data in r.failures[:30]:
            (keep / (label.replace(":", "_") + ".parquet")).write_bytes(data)
            lines.append(f"{verdict} {label}: {detail}")
        pytest.fail(f"{len(r.failures)} of {r.cases} mutants failed (saved under {keep}):\n" + "\n".join(lines))
    assert r.cases >= min(max_cases, 200), f"only {r.cases} cases ran in {seconds}s"
    return r


def test_fuzz(seeds, tmp_path):
    """Bounded for CI: a fixed sequence of mutants, at most ~30 s (2,118 cases ran in 20 s alone on 2 cores)."""
    seconds = float(os.environ.get("HWDECOMP_FUZZ_SECONDS", "30"))
    _fuzz(seeds, tmp_path, seconds=seconds, max_cases=3000, offset=0, name="fuzz (CI)")


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_fuzz_long(seeds, tmp_path):
    seconds = float(os.environ.get("HWDECOMP_FUZZ_SECONDS", "900"))
    _fuzz(seeds, tmp_path, seconds=seconds, max_cases=10**7, offset=10**6, name="fuzz (slow)")


# --- targeted hostile cases ---------------------------------------------------------------------


def _claim_big_first_page(src, dst, size: int) -> None:
    """Rewrite ``src`` with the first data page of the first chunk claiming ``size`` bytes.

    Offsets and sizes are rewritten consistently, so only the claim is wrong.
    """
    done = []

    def transform(p):
        if not done and p.page.page_type in (0, 3):
            p.header[PageHeader.uncompressed_page_size] = (T.I32, size)
            done.append(p.page.ordinal)
        return p.header, p.body

    rewrite_pages(src, dst, transform)
    assert done


@pytest.mark.parametrize("codec", ["zstd-v1-plain", "snappy-v2-plain", "brotli-v1-dict", "gzip-v1-plain"])
def test_two_gib_page_fails_fast_without_allocating(seeds, tmp_path, codec):
    """A header claiming a 2**31-byte page is refused before anything that size is allocated."""
    path, _ = next(s for s in seeds if s[0].stem == codec)
    bad = tmp_path / "big.parquet"
    _claim_big_first_page(path, bad, (1 << 31) - 1)
    for opts, option in [
        ({}, "max_page_bytes"),
        # with the page cap raised, the batch cap (or a check of the frame) still holds
        ({"max_page_bytes": 1 << 32, "max_batch_bytes": 1 << 30}, "max_batch_bytes"),
    ]:
        tracemalloc.start()
        t0 = time.perf_counter()
        try:
            with pytest.raises(HwdecompError) as info:
                dask_hwdecomp.read_table(bad, backend="cpu", **opts)
        finally:
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        assert time.perf_counter() - t0 < 5
        assert peak < 64 << 20, f"peak {peak} bytes traced"
        assert str(bad) in str(info.value)
        if isinstance(info.value, LimitExceededError):
            assert option in str(info.value)
        else:  # the page's own bytes contradict the claim (snappy preamble, stored size)
            assert info.value.location is not None and info.value.location.page is not None


def test_batch_cap_names_the_option(seeds):
    path, _ = seeds[0]
    with pytest.raises(LimitExceededError, match="max_batch_bytes") as info:
        dask_hwdecomp.read_table(path, backend="cpu", max_batch_bytes=1000)
    assert str(path) in str(info.value)
    pq.read_table(path)  # a valid file: the cap, not the file, refused it


@pytest.mark.parametrize("seed", ["gzip-v1-plain", "gzip-members-v1", "gzip-members-v2"])
def test_gzip_crc_mismatch_is_refused(seeds, tmp_path, seed):
    """pyarrow (zlib) refuses a gzip member whose CRC-32 does not match: so must we."""
    path, fm = next(s for s in seeds if s[0].stem == seed)
    gz = [p for p in fm.pages if b"\x1f\x8b\x08" in fm.data[p.body_start : p.body_end]]  # compressed pages
    page = max(gz, key=lambda p: p.body_end - p.body_start)
    data = bytearray(fm.data)
    data[page.body_end - 8] ^= 0x01  # CRC-32 of the last member
    bad = tmp_path / "crc.parquet"
    bad.write_bytes(bytes(data))
    with pytest.raises(PYARROW_ERRORS):
        pq.read_table(bad)
    with pytest.raises(CorruptPageError, match="CRC|gzip"):
        dask_hwdecomp.read_table(bad, backend="cpu")


# --- regressions found by the fuzzer ----------------------------------------------------------

from dask_hwdecomp import CorruptMetadataError, HwdecompFallbackWarning  # noqa: E402
from dask_hwdecomp.format.structs import ColumnChunk, ColumnMetaData, FileMetaData, RowGroup  # noqa: E402

from fuzzing import _with_footer  # noqa: E402


def _edited_footer(fm, edit) -> bytes:
    meta = fm.footer.copy()
    groups = [g.copy() for g in meta.get_value(FileMetaData.row_groups)[1]]
    cols = [c.copy() for c in groups[0].get_value(RowGroup.columns)[1]]
    md = cols[0].get_value(ColumnChunk.meta_data).copy()
    edit(meta, groups[0], cols[0], md)
    cols[0][ColumnChunk.meta_data] = (T.STRUCT, md)
    groups[0][RowGroup.columns] = (T.LIST, (T.STRUCT, cols))
    meta[FileMetaData.row_groups] = (T.LIST, (T.STRUCT, groups))
    return _with_footer(fm, meta)


def _refused_by_both(tmp_path, data: bytes, err=HwdecompError, *, oracle=True):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(data)
    if oracle:
        with pytest.raises(PYARROW_ERRORS):
            pq.read_table(bad)
    with pytest.raises(err) as info:
        dask_hwdecomp.read_table(bad, backend="cpu")
    assert str(bad) in str(info.value)
    return info.value


def test_page_past_the_declared_chunk_end_is_refused(seeds, tmp_path):
    """Only parquet-mr < 1.2.9 gets Arrow's 100 bytes of slack (PARQUET-816)."""
    _, fm = next(s for s in seeds if s[0].stem == "lz4-v1-dict")

    def shrink(meta, rg, chunk, md):
        md[ColumnMetaData.total_compressed_size] = (T.I64, md.get_value(ColumnMetaData.total_compressed_size) - 2)

    exc = _refused_by_both(tmp_path, _edited_footer(fm, shrink), CorruptMetadataError)
    assert "runs past the column chunk" in str(exc)


def test_row_count_beyond_the_values_is_refused(seeds, tmp_path):
    """A row group claiming 2**34 rows made pyarrow try to allocate 16 GiB.

    pyarrow itself is not asked here: on this file it allocates until killed.
    """
    _, fm = next(s for s in seeds if s[0].stem == "zstd-v2-dict")

    def rows(meta, rg, chunk, md):
        rg[RowGroup.num_rows] = (T.I64, 1 << 34)

    t0 = time.perf_counter()
    exc = _refused_by_both(tmp_path, _edited_footer(fm, rows), CorruptMetadataError, oracle=False)
    assert "17179869184 rows" in str(exc) and time.perf_counter() - t0 < 5


@pytest.mark.parametrize("field", ["row_groups", "file_offset"])
def test_missing_required_footer_field_is_refused(seeds, tmp_path, field):
    """The footer is rewritten for pyarrow; a required field it lacks must not be healed."""
    _, fm = next(s for s in seeds if s[0].stem == "snappy-v1-dict")

    def drop(meta, rg, chunk, md):
        if field == "file_offset":
            chunk[ColumnChunk.file_offset] = (T.I16, 4)  # wrong type: pyarrow skips it
    data = _edited_footer(fm, drop)
    if field == "row_groups":
        meta = fm.footer.copy()
        meta[6] = meta.pop(FileMetaData.row_groups)  # as a flipped field id did
        data = _with_footer(fm, meta)
    exc = _refused_by_both(tmp_path, data, CorruptMetadataError)
    assert field in str(exc)


@pytest.mark.parametrize("codec", [3, 8, 99, -1])
def test_unknown_codec_goes_to_pyarrow(seeds, tmp_path, codec):
    """An all-null v2 chunk has nothing to decompress, but pyarrow still refuses its codec."""
    _, fm = next(s for s in seeds if s[0].stem == "snappy-v2-dict")

    def set_codec(meta, rg, chunk, md):
        md[ColumnMetaData.codec] = (T.I32, codec)

    bad = tmp_path / "codec.parquet"
    bad.write_bytes(_edited_footer(fm, set_codec))
    with pytest.raises(Exception) as theirs:
        pq.read_table(bad)
    with pytest.warns(HwdecompFallbackWarning, match="codec"):
        with pytest.raises(type(theirs.value), match="codec|LZO"):
            dask_hwdecomp.read_table(bad, backend="cpu")


def test_crc_of_another_type_is_skipped(seeds, tmp_path):
    """verify_checksums raised TypeError on a crc field that is not an i32."""
    path, _ = next(s for s in seeds if s[0].stem == "none-v1-plain")

    def crc_binary(p):
        p.header[PageHeader.crc] = (T.BINARY, b"junk")
        return p.header, p.body

    bad = tmp_path / "crc.parquet"
    rewrite_pages(path, bad, crc_binary)
    want = pq.read_table(bad, page_checksum_verification=True)
    from helpers import assert_tables_equal

    assert_tables_equal(dask_hwdecomp.read_table(bad, backend="cpu", verify_checksums=True), want)


# --- the verdict: our error where pyarrow reads passes only for a listed cause ---------------

from fuzzing import stricter_cause  # noqa: E402


def test_stricter_causes_match_by_type_and_message():
    cause = stricter_cause("CorruptMetadataError: file 'x', row group 0, column 'a': "
                           "row group declares 100 rows but the pages of the column chunk hold 99 values")
    assert cause is not None and cause.name == "row count above the values"
    # the same words under another exception type, or another message, are no listed cause
    assert stricter_cause("CorruptPageError: row group declares 100 rows but the pages of the column chunk hold 99 values") is None
    assert stricter_cause("CorruptMetadataError: file 'x': file does not end in PAR1") is None


def test_a_new_stricter_case_fails_the_verdict(seeds, tmp_path, monkeypatch):
    """A valid file refused for a reason outside the list is a failure, not a pass."""
    path, _ = next(s for s in seeds if s[0].stem == "zstd-v1-plain")
    monkeypatch.setenv("HWDECOMP_MAX_PAGE_BYTES", "16")  # reaches the child: every page is "too big"
    harness = Harness(tmp_path, timeout=30.0, memory_limit=3 << 30)
    try:
        verdict = harness.run(path.read_bytes(), f"unmutated:{path.name}:0")
    finally:
        harness.close()
    assert verdict == "FAIL-stricter-than-pyarrow"
    assert "max_page_bytes" in harness.results.failures[0][2]


@pytest.mark.parametrize("where", ["footer", "page header"])
def test_stop_byte_with_a_high_nibble_reads_as_pyarrow(seeds, tmp_path, where):
    """A field header of type 0 ends the struct whatever its high nibble, as Apache Thrift reads it.

    A flipped bit there used to make this reader refuse files pyarrow reads whole.
    """
    from helpers import assert_tables_equal

    path, fm = next(s for s in seeds if s[0].stem == "snappy-v1-dict")
    data = bytearray(fm.data)
    if where == "footer":
        stop = fm.footer_start + len(encode_struct(fm.footer)) - 1  # FileMetaData's own STOP
    else:
        stop = fm.pages[0].body_start - 1  # the first page header's STOP
    assert data[stop] == 0
    data[stop] = 0x30
    bad = tmp_path / "stop.parquet"
    bad.write_bytes(bytes(data))
    assert_tables_equal(dask_hwdecomp.read_table(bad, backend="cpu"), pq.read_table(bad))
    assert_tables_equal(pq.read_table(bad), pq.read_table(path))


@pytest.mark.parametrize("num_values", [950, 999, 1001, 5000, 10])
def test_chunk_value_count_in_the_metadata_is_not_trusted(tmp_path, num_values):
    """pyarrow reads pages until the chunk's bytes end or the metadata's count is reached.

    A count above the pages' (1001, 5000) or inside the last page (950, 999)
    reads the true table, here as with pyarrow; one that stops the pages
    short of the row group's rows (10) makes pyarrow return 100 of 1000
    rows, and this reader refuse the file.
    """
    from helpers import assert_tables_equal

    table = pa.table({"a": list(range(1000))})
    src = tmp_path / "src.parquet"
    pq.write_table(table, src, compression="snappy", use_dictionary=False, data_page_size=500, write_batch_size=100)
    fm = file_map(src)
    assert len(fm.pages) == 10

    def count(meta, rg, chunk, md):
        md[ColumnMetaData.num_values] = (T.I64, num_values)

    bad = tmp_path / "count.parquet"
    bad.write_bytes(_edited_footer(fm, count))
    theirs = pq.read_table(bad)
    if num_values >= 901:
        assert_tables_equal(theirs, table)
        assert_tables_equal(dask_hwdecomp.read_table(bad, backend="cpu"), table)
    else:
        assert theirs.num_rows == 100
        with pytest.raises(CorruptMetadataError, match="declares 1000 rows but the pages of the column chunk hold 100"):
            dask_hwdecomp.read_table(bad, backend="cpu")


@pytest.mark.parametrize("extra", ["into the footer", "past the file"])
def test_chunk_declared_into_the_footer(seeds, tmp_path, extra):
    """pyarrow refuses a chunk running past the end of the file, not one running into the footer."""
    from helpers import assert_tables_equal

    path, fm = next(s for s in seeds if s[0].stem == "snappy-v1-plain")
    meta = fm.footer.copy()
    groups = [g.copy() for g in meta.get_value(FileMetaData.row_groups)[1]]
    cols = [c.copy() for c in groups[-1].get_value(RowGroup.columns)[1]]
    md = cols[-1].get_value(ColumnChunk.meta_data).copy()  # the chunk right before the footer
    start = min(x for x in (md.get_value(ColumnMetaData.data_page_offset),
                            md.get_value(ColumnMetaData.dictionary_page_offset)) if x)
    assert start + md.get_value(ColumnMetaData.total_compressed_size) == fm.footer_start
    size = fm.footer_start - start + (10 if extra == "into the footer" else len(fm.data))
    md[ColumnMetaData.total_compressed_size] = (T.I64, size)
    cols[-1][ColumnChunk.meta_data] = (T.STRUCT, md)
    groups[-1][RowGroup.columns] = (T.LIST, (T.STRUCT, cols))
    meta[FileMetaData.row_groups] = (T.LIST, (T.STRUCT, groups))
    bad = tmp_path / "grown.parquet"
    bad.write_bytes(_with_footer(fm, meta))
    if extra == "into the footer":
        assert_tables_equal(dask_hwdecomp.read_table(bad, backend="cpu"), pq.read_table(bad))
        assert_tables_equal(pq.read_table(bad), pq.read_table(path))
    else:
        exc = _refused_by_both(tmp_path, bad.read_bytes(), CorruptMetadataError)
        assert "runs past the end of the file" in str(exc)


# --- Thrift read as pyarrow's generated code reads it ------------------------------------------


def test_page_header_field_of_another_type_is_refused_as_by_pyarrow(seeds, tmp_path):
    """compressed_page_size typed i16: Thrift's generated reader skips it, then lacks it.

    This reader used to take any integer type and return rows for files
    pyarrow refuses.
    """
    from dask_hwdecomp.format.thrift import Struct  # noqa: F401  (the header is a Struct)

    _, fm = next(s for s in seeds if s[0].stem == "lz4-v1-plain")
    page = fm.pages[0]
    header = page.header.copy()
    header[PageHeader.compressed_page_size] = (T.I16, header.get_value(PageHeader.compressed_page_size))
    encoded = encode_struct(header)
    assert len(encoded) == page.body_start - page.header_start  # only the type nibble differs
    data = fm.data[: page.header_start] + encoded + fm.data[page.body_start :]
    exc = _refused_by_both(tmp_path, data, CorruptMetadataError)
    assert "compressed_page_size has thrift type 4" in str(exc)


def test_footer_list_of_a_damaged_element_type_reads_as_pyarrow(seeds, tmp_path):
    """A list header declaring doubles where parquet.thrift has i32 (encodings): pyarrow reads i32s."""
    import re

    from helpers import assert_tables_equal

    path, fm = next(s for s in seeds if s[0].stem == "snappy-v1-dict")
    footer = bytearray(fm.data[fm.footer_start :])
    # ColumnMetaData: field 1 (type, i32), then field 2 (encodings, list<i32>)
    m = re.search(rb"\x15[\x00-\x0e]\x19([\x15\x25\x35\x45])", bytes(footer))
    assert m is not None
    footer[m.start(1)] = (footer[m.start(1)] & 0xF0) | T.DOUBLE
    bad = tmp_path / "elem.parquet"
    bad.write_bytes(fm.data[: fm.footer_start] + bytes(footer))
    want = pq.read_table(bad)
    assert_tables_equal(want, pq.read_table(path))
    assert_tables_equal(dask_hwdecomp.read_table(bad, backend="cpu"), want)


def test_optional_footer_field_of_another_type_is_skipped_as_by_pyarrow(seeds, tmp_path):
    from dask_hwdecomp.format.thrift import Struct

    from helpers import assert_tables_equal

    path, fm = next(s for s in seeds if s[0].stem == "snappy-v2-plain")

    def struct_offset(meta, rg, chunk, md):
        md[ColumnMetaData.dictionary_page_offset] = (T.STRUCT, Struct())

    bad = tmp_path / "dictoff.parquet"
    bad.write_bytes(_edited_footer(fm, struct_offset))
    want = pq.read_table(bad)
    assert_tables_equal(want, pq.read_table(path))
    assert_tables_equal(dask_hwdecomp.read_table(bad, backend="cpu"), want)


def test_page_of_an_unknown_type_is_skipped_as_by_pyarrow(seeds, tmp_path):
    """pyarrow skips a page of a type Parquet does not define, and so does this reader.

    A data page so retyped leaves its column short of values: pyarrow then
    finds columns of unequal length, this reader a row group its pages do
    not fill; neither stops at the type itself.
    """
    _, fm = next(s for s in seeds if s[0].stem == "lz4-v1-plain")
    page = fm.pages[0]
    header = page.header.copy()
    header[PageHeader.type] = (T.I32, 7)
    data = fm.data[: page.header_start] + encode_struct(header) + fm.data[page.body_start :]
    exc = _refused_by_both(tmp_path, data, CorruptMetadataError)
    assert "rows but the pages of the column chunk hold" in str(exc) and "page type" not in str(exc)


@pytest.mark.parametrize("field", ["compressed_page_size", "uncompressed_page_size"])
def test_page_size_of_another_thrift_type_is_refused(seeds, tmp_path, field):
    """A bit flip turned an i32 size into an i16: pyarrow's Thrift reader skips it and then
    misses the required field. The rewritten header wrote it back as an i32, so rows came
    back where pyarrow refuses the file."""
    _, fm = next(s for s in seeds if s[0].stem == "lz4-v1-plain")
    page = fm.pages[0]
    header = page.header.copy()
    fid = getattr(PageHeader, field)
    header[fid] = (T.I16, header.get_value(fid))
    encoded = encode_struct(header)
    assert len(encoded) == page.body_start - page.header_start
    data = fm.data[: page.header_start] + encoded + fm.data[page.body_start :]
    exc = _refused_by_both(tmp_path, data, CorruptMetadataError)
    assert f"{field} has thrift type 4" in str(exc) and exc.location.page == 0
