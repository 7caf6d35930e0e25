"""The compiled page scan and layout against the Python reference.

The reference is ``scan_chunk`` + ``page_header`` + ``plan_body`` (and
``build_layout`` for whole images). The kernel may answer OK (then every
page, rewritten header and job must equal the reference's), ERROR (the
reference must raise) or FALLBACK (valid but unusual bytes, handed to the
reference). Checked on the generated matrix, the corpus, random page
sequences with hostile headers, and through ``read_table``.
"""

from __future__ import annotations

import struct
import tracemalloc

import cramjam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.local import LocalFileSystem
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dask_hwdecomp
from dask_hwdecomp.errors import HwdecompError, PageLocation
from dask_hwdecomp.format.codecs import plan_body, preamble_of
from dask_hwdecomp.format.fastlayout import ALGOS, ChunkSpec, FileSpec, lay_out_batch, reference_layout
from dask_hwdecomp.format.footer import parse_footer
from dask_hwdecomp.format.layout import page_header
from dask_hwdecomp.format.pages import DECODED_PAGE_TYPES, ChunkRange, chunk_range, scan_chunk
from dask_hwdecomp.format.scan_kernels import (
    C_STATUS,
    P_BSTART,
    P_COMPRESSED,
    P_CRC,
    P_CSIZE,
    P_HASCRC,
    P_HLEN,
    P_HOFF,
    P_HSTART,
    P_JHI,
    P_JLO,
    P_LEVELS,
    P_TYPE,
    P_USIZE,
    scan_chunks,
)
from dask_hwdecomp.format.structs import Codec, PageHeader
from dask_hwdecomp.format.thrift import Limits, RawStruct, Struct, T, encode_struct
from dask_hwdecomp.format.thrift_kernels import ERROR, FALLBACK, OK
from dask_hwdecomp.jobs import JobTable
from dask_hwdecomp.readpath.fetch import Range, fetch_into

from corruption import varint
from helpers import assert_tables_equal
from rewrite import rewrite_pages

MAX_PAGE = 1 << 30


def _kernel(src: np.ndarray, base: int, rng: ChunkRange, max_page_bytes: int = MAX_PAGE, num_rows=None):
    cres, pages, jobs, blob = scan_chunks(
        src, np.array([base], np.int64), np.array([rng.length], np.int64), np.array([rng.codec], np.int64),
        np.array([rng.num_values], np.int64), np.array([-1 if num_rows is None else num_rows], np.int64),
        max_page_bytes, Limits.max_string, Limits.max_depth,
    )
    return int(cres[0, C_STATUS]), pages, jobs, blob


def _reference(src: np.ndarray, base: int, rng: ChunkRange, max_page_bytes: int = MAX_PAGE, num_rows=None):
    """(pages, headers, jobs) as the Python path computes them, or the exception it raises."""
    view = memoryview(src)
    try:
        found = scan_chunk(view[base : base + rng.length], rng, PageLocation(), max_page_bytes=max_page_bytes,
                           keep_crc=True, num_rows=num_rows)
        rows, headers, jobs = [], [], []
        for page in found:
            rows.append((page.page_type, page.header_start, page.body_start, page.body_size,
                         page.uncompressed_size, page.levels_size, int(page.compressed),
                         int(page.crc is not None), page.crc or 0))
            if page.page_type not in DECODED_PAGE_TYPES:
                headers.append(None)
                jobs.append([])
                continue
            headers.append(page_header(page))
            spans = []
            if page.compressed:
                value = base + page.body_start + page.levels_size
                body = view[value : base + page.body_start + page.body_size]
                for sp in plan_body(rng.codec, body, page.uncompressed_size - page.levels_size, PageLocation()):
                    assert sp.preamble == preamble_of(sp.algo, view[value + sp.src_offset :
                                                                   value + sp.src_offset + sp.src_size])
                    spans.append((ALGOS.index(sp.algo), value + sp.src_offset, sp.src_size, sp.dst_offset,
                                  sp.dst_size, -1 if sp.crc32 is None else sp.crc32, sp.preamble))
            jobs.append(spans)
        return rows, headers, jobs
    except HwdecompError as exc:
        return exc


_PAGE_COLUMNS = [P_TYPE, P_HSTART, P_BSTART, P_CSIZE, P_USIZE, P_LEVELS, P_COMPRESSED,
                 P_HASCRC, P_CRC]


def compare(src: np.ndarray, base: int, rng: ChunkRange, max_page_bytes: int = MAX_PAGE, num_rows=None) -> int:
    """Run both on one chunk; assert they agree; the kernel's status."""
    status, pages, jobs, blob = _kernel(src, base, rng, max_page_bytes, num_rows)
    ref = _reference(src, base, rng, max_page_bytes, num_rows)
    if isinstance(ref, Exception):
        assert status != OK, f"the kernel accepts what the reference refuses: {ref}"
        return status
    assert status != ERROR, "the kernel refuses what the reference accepts"
    if status == FALLBACK:
        return status
    rows, headers, ref_jobs = ref
    assert [tuple(r) for r in pages[:, _PAGE_COLUMNS].tolist()] == rows
    for p, (header, spans) in enumerate(zip(headers, ref_jobs)):
        if header is not None:
            off, n = pages[p, P_HOFF], pages[p, P_HLEN]
            assert bytes(blob[off : off + n]) == header, f"page {p}: rewritten header differs"
        got = [tuple(j) for j in jobs[pages[p, P_JLO] : pages[p, P_JHI]].tolist()]
        assert got == spans, f"page {p}: jobs differ"
    return status


def _chunks(path):
    data = np.frombuffer(bytearray(path.read_bytes()), np.uint8)
    footer = parse_footer(memoryview(data), len(data), str(path))
    for rg in range(footer.num_row_groups):
        for chunk in footer.column_chunks(rg):
            yield data, chunk_range(chunk, footer.footer_offset, PageLocation(), pad=footer.pads_column_chunks)


# --- the matrix and the corpus ------------------------------------------------------------


def test_matrix_kernel_equals_reference(matrix_files):
    seen = 0
    for f in matrix_files:
        for data, rng in _chunks(f.path):
            assert compare(data, rng.start, rng) == OK, f"{f.id}: kernel did not take a chunk pyarrow wrote"
            seen += 1
    assert seen > 500


def test_corpus_kernel_equals_reference(corpus):
    statuses = {OK: 0, ERROR: 0, FALLBACK: 0}
    for path in sorted(corpus.rglob("*.parquet")):
        try:
            chunks = list(_chunks(path))
        except HwdecompError:
            continue  # footer refused: no chunk to scan (any other exception is a bug of ours)
        for data, rng in chunks:
            statuses[compare(data, rng.start, rng)] += 1
    assert statuses[OK] > 1000
    # every writer in the corpus encodes page headers as the reference re-encodes them
    assert statuses[FALLBACK] == 0, statuses


def _batch(paths, columns=None):
    """Source buffer and FileSpecs of whole files (every chunk fetched)."""
    from dask_hwdecomp.readpath.plan import Piece, plan_piece

    fs = LocalFileSystem()
    parts, files, pos = [], [], 0
    for path in paths:
        plan = plan_piece(fs, Piece(str(path)), columns)
        data = path.read_bytes()
        specs = []
        for c in plan.chunks:
            specs.append(ChunkSpec(c.row_group, c.column, c.rng, c.where, pos + c.rng.start))
        parts.append(data)
        files.append(FileSpec(plan.footer, plan.row_groups, specs))
        pos += len(data)
    return bytearray(b"".join(parts)), files


def _images(layout, src):
    dst = bytearray(layout.size)
    layout.fill(memoryview(dst), memoryview(src))
    return dst


@pytest.mark.parametrize("codec", ["snappy", "gzip", "zstd", "brotli", "lz4"])
def test_matrix_images_equal_reference(matrix_files, codec):
    """Compressed files: the same jobs and, around their outputs, the same image bytes."""
    paths = [f.path for f in matrix_files if f.codec == codec]
    src, files = _batch(paths)
    fast = lay_out_batch(memoryview(src), files, max_page_bytes=MAX_PAGE, verify_checksums=True)
    ref = reference_layout(memoryview(src), files, max_page_bytes=MAX_PAGE, verify_checksums=True)
    assert fast.fast and not ref.fast
    assert fast.images == ref.images
    assert list(fast.jobs) == ref.jobs
    # the table numbers pages as the records' locations do (reports count pages by it)
    assert np.array_equal(fast.jobs.pages, JobTable.from_jobs(ref.jobs).pages)
    assert _images(fast, src) == _images(ref, src)


def test_row_group_subsets_and_repeats_equal_reference(matrix_files):
    f = next(m for m in matrix_files if m.id == "zstd-v2-dict")
    src, files = _batch([f.path], columns=["int32_none", "struct_some", "map_all"])
    files = [FileSpec(files[0].footer, [2, 0, 2], files[0].chunks)]
    fast = lay_out_batch(memoryview(src), files, max_page_bytes=MAX_PAGE, verify_checksums=False)
    ref = reference_layout(memoryview(src), files, max_page_bytes=MAX_PAGE, verify_checksums=False)
    assert fast.fast and fast.images == ref.images and list(fast.jobs) == ref.jobs
    assert _images(fast, src) == _images(ref, src)


# --- UNCOMPRESSED chunks pass through ---------------------------------------------------------


def test_uncompressed_chunks_are_copied_verbatim(tmp_path, matrix_source):
    """Headers (CRCs included) are not rewritten: the image holds the file's chunk bytes."""
    path = tmp_path / "crc.parquet"
    pq.write_table(matrix_source, path, compression="none", write_page_checksum=True, data_page_size=2000,
                   data_page_version="2.0")
    src, files = _batch([path])
    layout = lay_out_batch(memoryview(src), files, max_page_bytes=MAX_PAGE, verify_checksums=True)
    assert layout.fast and not layout.jobs
    image = bytes(_images(layout, src))[: layout.images[0].size]
    footer = parse_footer(image, len(image), "image")
    copied = 0
    for ch in files[0].chunks:
        rng = ch.rng
        new = chunk_range(footer.column_chunks(files[0].row_groups.index(ch.row_group))[ch.column],
                          footer.footer_offset, PageLocation())
        assert image[new.start : new.start + new.length] == bytes(src[ch.src_base : ch.src_base + rng.length])
        copied += 1
    assert copied > 50
    got = pq.read_table(pa.BufferReader(image), page_checksum_verification=True)
    assert_tables_equal(got, pq.read_table(path))


# --- page CRCs and Snappy preambles in the jobs ------------------------------------------------


def _crc_file(tmp_path, source, codec, version):
    path = tmp_path / f"crc-{codec}-{version}.parquet"
    pq.write_table(source, path, compression=codec, write_page_checksum=True, data_page_size=2000,
                   data_page_version=version, row_group_size=len(source) // 2)
    return path


@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("codec", ["none", "snappy", "gzip", "zstd", "lz4", "brotli"])
def test_page_crcs_and_preambles_equal_reference(tmp_path, matrix_source, codec, version):
    """Every Job field (page_crc, preamble, crc32 included), with and without verify_checksums,
    a row group laid out twice in a row included."""
    path = _crc_file(tmp_path, matrix_source, codec, version)
    src, files = _batch([path])
    f = files[0]
    for row_groups in (f.row_groups, [f.row_groups[0]] * 2):
        spec = [FileSpec(f.footer, row_groups, f.chunks)]
        for verify in (True, False):
            fast = lay_out_batch(memoryview(src), spec, max_page_bytes=MAX_PAGE, verify_checksums=verify)
            ref = reference_layout(memoryview(src), spec, max_page_bytes=MAX_PAGE, verify_checksums=verify)
            assert fast.fast
            assert list(fast.jobs) == ref.jobs
            if codec == "none":  # copied as stored (see test_uncompressed_chunks_are_copied_verbatim)
                got = pq.read_table(pa.BufferReader(bytes(_images(fast, src))[: fast.images[0].size]))
                want = pq.read_table(pa.BufferReader(bytes(_images(ref, src))[: ref.images[0].size]))
                assert_tables_equal(got, want)
            else:
                assert fast.images == ref.images
                assert _images(fast, src) == _images(ref, src)
            with_crc = [j for j in fast.jobs if j.page_crc is not None]
            assert bool(with_crc) == (verify and codec != "none")
            if codec == "snappy":
                assert all(j.preamble > 0 for j in fast.jobs)


@pytest.mark.parametrize("codec", ["none", "snappy", "gzip", "zstd"])
def test_reads_with_checksums_take_the_compiled_path(tmp_path, matrix_source, monkeypatch, codec):
    """read_table with verify_checksums lays out sound files without the reference."""
    from dask_hwdecomp.format import fastlayout

    def no_reference(*args, **kwargs):
        raise AssertionError("the reference laid out a sound file")

    monkeypatch.setattr(fastlayout, "reference_layout", no_reference)
    for version in ("1.0", "2.0"):
        path = _crc_file(tmp_path, matrix_source, codec, version)
        got = dask_hwdecomp.read_table(path, backend="cpu", verify_checksums=True)
        assert_tables_equal(got, pq.read_table(path))


@pytest.mark.parametrize("codec", ["none", "snappy"])
def test_a_damaged_page_under_its_crc_is_the_reference_error(tmp_path, matrix_source, monkeypatch, codec):
    """Uncompressed pages are checked at layout, compressed ones where they are decoded: the same error."""
    from dask_hwdecomp.errors import ChecksumError
    from dask_hwdecomp.readpath import batch

    path = _crc_file(tmp_path, matrix_source, codec, "1.0")
    data = bytearray(path.read_bytes())
    _, rng = next(_chunks(path))
    page = scan_chunk(memoryview(data)[rng.start : rng.start + rng.length], rng, PageLocation(),
                      max_page_bytes=MAX_PAGE)[-1]
    data[rng.start + page.body_start + page.body_size - 1] ^= 0x01
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(bytes(data))
    src, files = _batch([bad])
    fast = lay_out_batch(memoryview(src), files, max_page_bytes=MAX_PAGE, verify_checksums=False)
    assert fast.fast  # unchecked, the kernel takes it
    errors = []
    for fast_scan in (True, False):
        monkeypatch.setattr(batch, "FAST_SCAN", fast_scan)
        with pytest.raises(ChecksumError) as exc:
            dask_hwdecomp.read_table(bad, backend="cpu", verify_checksums=True)
        errors.append(str(exc.value))
    assert errors[0] == errors[1]


def test_fallback_chunks_keep_crcs_and_preambles(tmp_path, matrix_source):
    """Chunks the kernel hands to the reference (a list in a header) give the same jobs too."""
    src_path = _crc_file(tmp_path, matrix_source.select(["int32_none", "string_some"]), "snappy", "1.0")
    dst = tmp_path / "list.parquet"
    done = []

    def add(p):
        if not done:
            p.header[42] = (T.LIST, (T.I32, [1, 2, 3]))
            done.append(1)
        return p.header, p.body

    rewrite_pages(src_path, dst, add)
    statuses = [compare(data, rng.start, rng) for data, rng in _chunks(dst)]
    assert FALLBACK in statuses and OK in statuses
    src, files = _batch([dst])
    fast = lay_out_batch(memoryview(src), files, max_page_bytes=MAX_PAGE, verify_checksums=True)
    ref = reference_layout(memoryview(src), files, max_page_bytes=MAX_PAGE, verify_checksums=True)
    assert fast.fast and list(fast.jobs) == ref.jobs and _images(fast, src) == _images(ref, src)
    assert any(j.page_crc is not None for j in fast.jobs) and all(j.preamble for j in fast.jobs)


def test_corpus_batches_equal_reference(corpus):
    """Whole files of every writer in the corpus, checksums verified: the same jobs (page_crc and
    preamble included), the same images, the same error where the reference raises one."""
    from dask_hwdecomp.errors import ChecksumError

    laid = crcs = refused = 0
    for path in sorted(corpus.rglob("*.parquet")):
        try:
            src, files = _batch([path])
        except HwdecompError:
            continue  # footer or plan refused: nothing to lay out (any other exception is a bug of ours)
        results = []
        for fn in (lay_out_batch, reference_layout):
            try:
                results.append(fn(memoryview(src), files, max_page_bytes=MAX_PAGE, verify_checksums=True))
            except HwdecompError as exc:
                results.append(exc)
        fast, ref = results
        if isinstance(ref, Exception):
            assert type(fast) is type(ref) and str(fast) == str(ref), path.name
            refused += isinstance(ref, ChecksumError)
            continue
        assert not isinstance(fast, Exception), f"{path.name}: {fast}"
        assert list(fast.jobs) == ref.jobs, path.name
        if all(ch.rng.codec != 0 for ch in files[0].chunks):
            assert fast.images == ref.images and _images(fast, src) == _images(ref, src), path.name
        laid += 1
        crcs += sum(j.page_crc is not None for j in fast.jobs)
    assert laid > 50 and crcs > 0 and refused > 0, (laid, crcs, refused)


# --- unusual but valid headers: kept, through the reference ------------------------------------


def _plain_file(tmp_path):
    path = tmp_path / "plain.parquet"
    t = pa.table({"i": np.arange(500), "s": [f"x{i % 7}" for i in range(500)]})
    pq.write_table(t, path, compression="snappy", data_page_size=500, write_batch_size=50)
    return path


def test_unknown_header_fields_are_kept(tmp_path):
    """An unknown scalar and struct field: the kernel keeps them; an unknown list: the reference does."""
    src_path = _plain_file(tmp_path)
    for name, extra, expect in [
        ("scalar", {40: (T.BINARY, b"unknown"), 41: (T.STRUCT, Struct({1: (T.I64, -5)}))}, OK),
        ("list", {42: (T.LIST, (T.I32, [1, 2, 3]))}, FALLBACK),
    ]:
        dst = tmp_path / f"{name}.parquet"

        def add(p, extra=extra):
            p.header.update(extra)
            return p.header, p.body

        rewrite_pages(src_path, dst, add)
        statuses = {compare(data, rng.start, rng) for data, rng in _chunks(dst)}
        assert statuses == {expect}, name
        src, files = _batch([dst])
        fast = lay_out_batch(memoryview(src), files, max_page_bytes=MAX_PAGE, verify_checksums=False)
        ref = reference_layout(memoryview(src), files, max_page_bytes=MAX_PAGE, verify_checksums=False)
        assert list(fast.jobs) == ref.jobs and _images(fast, src) == _images(ref, src)
        image = bytes(_images(fast, src))
        if name == "scalar":
            assert b"\x07unknown" in image  # the field survived the rewrite
        assert_tables_equal(dask_hwdecomp.read_table(dst, backend="cpu"), pq.read_table(dst))


def _raw_chunk(headers_and_bodies, codec=0, num_values=None):
    blob = b"".join(h + b for h, b in headers_and_bodies)
    src = np.frombuffer(bytearray(blob), np.uint8)
    nv = num_values if num_values is not None else 10 * len(headers_and_bodies)
    return src, ChunkRange(0, len(blob), len(blob), codec, nv, Struct())


def _dp(size, nv=10, extra=b""):
    """A DATA_PAGE header by hand: type 0, sizes, data_page_header{num_values, encodings}."""
    def zz(n):
        return (n << 1) ^ (n >> 63)

    v = varint
    sub = bytes([0x15]) + v(zz(nv)) + bytes([0x15, 0, 0x15, 0, 0x15, 0, 0])
    return bytes([0x15]) + v(0) + bytes([0x15]) + v(zz(size)) + bytes([0x15]) + v(zz(size)) + bytes([0x2C]) + sub + extra + b"\x00"


@pytest.mark.parametrize("name, header", [
    ("non-minimal varint", bytes([0x15, 0x80, 0x00, 0x15, 0x14, 0x15, 0x14, 0x2C, 0x15, 0x14, 0, 0])),
    ("fields out of order", bytes([0x25, 0x14, 0x05, 0x02, 0x00, 0x25, 0x14, 0x2C, 0x15, 0x14, 0, 0])),
    ("repeated field", bytes([0x15, 0x00, 0x15, 0x14, 0x05, 0x04, 0x14, 0x15, 0x14, 0x2C, 0x15, 0x14, 0, 0])),
])
def test_unusual_encodings_go_to_the_reference(name, header):
    """Valid Thrift a byte copy would not re-encode as the reference does: FALLBACK, and the same image."""
    src, rng = _raw_chunk([(header, bytes(10))])
    assert compare(src, 0, rng) == FALLBACK
    ref = _reference(src, 0, rng)
    assert not isinstance(ref, Exception), ref


def test_hand_made_header_is_taken():
    src, rng = _raw_chunk([(_dp(10), bytes(10)), (_dp(3, 5), bytes(3))], num_values=15)
    assert compare(src, 0, rng) == OK


def test_stop_with_a_high_nibble_ends_the_header():
    """As Apache Thrift reads it: the kernel takes it, and rewrites a plain STOP as the reference does."""
    header = bytearray(_dp(10))
    header[-1] = 0x30
    src, rng = _raw_chunk([(bytes(header), bytes(10))])
    assert compare(src, 0, rng) == OK


_NESTED = _dp(10, extra=bytes([0x3C]) + b"\x1c" * 3 + b"\x18\x05hello\x00" + b"\x00" * 3)  # field 8 nested 4 deep


@pytest.mark.parametrize("stop", [
    ("data_page_header", 15), ("statistics, 4 deep", -5), ("3 deep", -4), ("2 deep", -3), ("field 8", -2),
    ("page header", -1),
])
def test_stop_with_a_high_nibble_at_any_depth(stop):
    """Structs kept as bytes (raw, lazily skipped) keep the damaged STOP, as in the reference;
    re-encoded ones (the page header) get a plain STOP."""
    header = bytearray(_NESTED)
    assert header[stop[1]] == 0
    header[stop[1]] = 0xA0
    src, rng = _raw_chunk([(bytes(header), bytes(10))])
    assert compare(src, 0, rng) == OK


def test_stop_with_a_high_nibble_in_a_rewritten_v2_header():
    """The v2 header is re-encoded (is_compressed false added): its STOP too."""
    sub = bytes([0x15, 20, 0x15, 0, 0x15, 20, 0x15, 0, 0x15, 0, 0x15, 0, 0x90])
    header = bytes([0x15, 6, 0x15, 20, 0x15, 20, 0x5C]) + sub + b"\x00"
    src, rng = _raw_chunk([(header, bytes(10))])
    assert compare(src, 0, rng) == OK
    _, pages, _, blob = _kernel(src, 0, rng)
    rewritten = bytes(blob[pages[0, P_HOFF] : pages[0, P_HOFF] + pages[0, P_HLEN]])
    assert b"\x90" not in rewritten and rewritten.endswith(b"\x12\x00\x00")  # is_compressed false, STOPs


@pytest.mark.parametrize("num_values, num_rows, ok", [
    (15, 15, True), (5, 10, True),  # the walk stops once the chunk's count is reached
    (5, 15, False),  # ... here after the first page, short of the row group's rows
    (100, 15, True),  # a count above the pages': pyarrow reads on to the chunk's end
    (15, 16, False), (100, 16, False),  # pages short of the row group's rows
    (5, None, True),
])
def test_value_counts_as_the_reference(num_values, num_rows, ok):
    src, rng = _raw_chunk([(_dp(10), bytes(10)), (_dp(3, 5), bytes(3))], num_values=num_values)
    assert compare(src, 0, rng, num_rows=num_rows) == (OK if ok else ERROR)


@pytest.mark.parametrize("ptype", [1, 4, 1000])
def test_pages_not_decoded_are_walked_over(ptype):
    """An index page or a type Parquet does not define: sizes unchecked but against the chunk, left out."""
    skipped = bytearray(_dp(60))  # above max_page_bytes, which only pages decoded must respect
    skipped[1] = ptype << 1 if ptype < 64 else 0
    if ptype >= 64:  # a two-byte varint
        skipped = bytes([0x15]) + bytes([(ptype << 1) & 0x7F | 0x80, (ptype << 1) >> 7]) + bytes(skipped[2:])
    src, rng = _raw_chunk([(bytes(skipped), bytes(60)), (_dp(10), bytes(10))], num_values=10)
    assert compare(src, 0, rng, max_page_bytes=20, num_rows=10) == OK
    _, pages, _, _ = _kernel(src, 0, rng, 20, 10)
    assert pages[0, P_TYPE] == ptype and pages[0, P_HLEN] == 0


# --- random page sequences, hostile headers ----------------------------------------------------

_CODECS = [Codec.UNCOMPRESSED, Codec.SNAPPY, Codec.GZIP, Codec.LZ4, Codec.ZSTD, Codec.BROTLI, Codec.LZ4_RAW]


def _compress(codec, data: bytes) -> bytes:
    if codec == Codec.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == Codec.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == Codec.LZ4:
        block = bytes(cramjam.lz4.compress_block(data, store_size=False))
        return struct.pack(">II", len(data), len(block)) + block
    if codec == Codec.LZ4_RAW:
        return bytes(cramjam.lz4.compress_block(data, store_size=False))
    if codec == Codec.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    if codec == Codec.BROTLI:
        return bytes(cramjam.brotli.compress(data))
    return data


_INTS = st.one_of(st.integers(0, 300), st.sampled_from([-1, 1 << 31, (1 << 31) - 1, 1 << 40, -(1 << 63)]))


@st.composite
def page(draw, codec):
    # 1 is an index page; 4, 7 and 1000 are types Parquet does not define (skipped)
    ptype = draw(st.sampled_from([0, 0, 0, 3, 3, 2, 1, 4, 7, 1000]))
    payload = draw(st.binary(max_size=60))
    v2_stored = ptype == 3 and draw(st.booleans())
    levels = draw(st.binary(max_size=6)) if ptype == 3 else b""
    stored = payload if v2_stored or codec == 0 else _compress(codec, payload)
    if draw(st.integers(0, 7)) == 0:  # a cut body: a Snappy block of only its preamble, a short frame
        stored = stored[: draw(st.integers(0, 3))]
    body = levels + stored
    usize = len(levels) + len(payload)
    h = Struct({
        PageHeader.type: (T.I32, ptype),
        PageHeader.uncompressed_page_size: (T.I32, usize),
        PageHeader.compressed_page_size: (T.I32, len(body)),
    })
    nv = draw(st.integers(0, 20))
    sub = Struct({1: (T.I32, nv), 2: (T.I32, 0)})
    if ptype == 3:
        sub = Struct({1: (T.I32, nv), 2: (T.I32, 0), 3: (T.I32, nv), 4: (T.I32, 0),
                      5: (T.I32, len(levels) // 2), 6: (T.I32, len(levels) - len(levels) // 2)})
        if v2_stored:
            sub[7] = (T.BOOL, False)
        elif draw(st.booleans()):
            sub[7] = (T.BOOL, True)
        if draw(st.booleans()):
            sub[8] = (T.STRUCT, RawStruct(encode_struct(Struct({1: (T.BINARY, b"mx"), 3: (T.I64, 4)}))))
    # unknown fields, kept by the rewrite: any id (negative and long-form ones too), scalars and structs
    for target in (h, sub):
        for fid, (ttype, value) in draw(st.dictionaries(
            st.one_of(st.integers(9, 40), st.integers(-(1 << 15), (1 << 15) - 1)),
            st.one_of(st.tuples(st.just(T.I64), st.integers(-(1 << 63), (1 << 63) - 1)),
                      st.tuples(st.just(T.BINARY), st.binary(max_size=8)),
                      st.tuples(st.just(T.DOUBLE), st.floats(allow_nan=False)),
                      st.tuples(st.just(T.BOOL), st.booleans()),
                      st.tuples(st.just(T.STRUCT), st.just(Struct({2: (T.I16, -3), 5: (T.BINARY, b"z")})))),
            max_size=2)).items():
            if fid not in range(1, 9):
                target[fid] = (ttype, value)
    h[{0: 5, 3: 8, 2: 7}.get(ptype, 5)] = (T.STRUCT, sub)
    if draw(st.booleans()):
        h[PageHeader.crc] = (T.I32, draw(st.integers(-(1 << 31), (1 << 31) - 1)))
    # hostile edits: a field changed, dropped or retyped
    for _ in range(draw(st.integers(0, 2))):
        fid = draw(st.sampled_from([1, 2, 3, 4, 5, 7, 8, 9, 30]))
        how = draw(st.sampled_from(["int", "drop", "bool", "binary", "i64", "i16", "byte"]))
        if how == "drop":
            h.pop(fid, None)
        elif how == "int":
            h[fid] = (T.I32, max(-(1 << 31), min((1 << 31) - 1, draw(_INTS))))
        elif how == "i64":
            h[fid] = (T.I64, draw(st.integers(-(1 << 63), (1 << 63) - 1)))
        elif how == "i16":
            h[fid] = (T.I16, draw(st.integers(-(1 << 15), (1 << 15) - 1)))
        elif how == "byte":
            h[fid] = (T.BYTE, draw(st.integers(-128, 127)))
        elif how == "bool":
            h[fid] = (T.BOOL, draw(st.booleans()))
        else:
            h[fid] = (T.BINARY, draw(st.binary(max_size=5)))
    encoded = bytearray(encode_struct(h))
    if draw(st.integers(0, 5)) == 0:  # a STOP with a high nibble ends the header all the same
        encoded[-1] = draw(st.integers(1, 15)) << 4
    for _ in range(draw(st.integers(0, 2)) if draw(st.integers(0, 3)) == 0 else 0):
        i = draw(st.integers(0, len(encoded) - 1))
        encoded[i] = draw(st.integers(0, 255))
    return bytes(encoded), body, nv


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.sampled_from(_CODECS).flatmap(lambda c: st.tuples(
    st.just(c), st.lists(page(c), min_size=1, max_size=5), st.integers(-3, 3), st.integers(0, 3),
    st.one_of(st.none(), st.integers(-3, 3), st.just(1 << 40)))))
def test_random_page_sequences(case):
    """Chunk metadata counts above and below the pages', and row groups of more or fewer rows."""
    codec, pages, nv_delta, cut, rows_delta = case
    blob = b"".join(h + b for h, b, _ in pages)
    if cut == 0:
        blob = blob[: max(0, len(blob) - 1 - len(blob) // 7)]
    src = np.frombuffer(bytearray(b"\x00" * 3 + blob), np.uint8)
    total = sum(p[2] for p in pages)
    nv = max(0, total + nv_delta)
    rows = None if rows_delta is None else max(0, total + rows_delta)
    rng = ChunkRange(3, len(blob), len(blob), int(codec), nv, Struct())
    for max_page in (MAX_PAGE, 40):
        compare(src, 3, rng, max_page, rows)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120), st.sampled_from(_CODECS), st.integers(0, 50))
def test_random_bytes(data, codec, nv):
    src = np.frombuffer(bytearray(data), np.uint8)
    compare(src, 0, ChunkRange(0, len(data), len(data), int(codec), nv, Struct()))


def test_limits_are_those_of_the_reference(monkeypatch):
    """Nesting deeper than max_depth (in a skipped statistics struct) and max_string, monkeypatched."""
    stats = b"\x18\x05hello\x00"
    header = _dp(10, extra=bytes([0x3C]) + b"\x1c" * 3 + stats + b"\x00" * 3)  # field 8 struct, nested
    src, rng = _raw_chunk([(header, bytes(10))])
    assert compare(src, 0, rng) == OK
    monkeypatch.setattr(Limits, "max_string", 4)
    assert compare(src, 0, rng) == ERROR
    monkeypatch.setattr(Limits, "max_string", 1 << 30)
    monkeypatch.setattr(Limits, "max_depth", 4)
    assert compare(src, 0, rng) == ERROR


# --- errors through read_table: the same as the reference path ---------------------------------


@pytest.mark.parametrize("edit", ["usize", "num_values", "type", "unknown type", "crc type"])
def test_errors_are_the_reference_errors(tmp_path, monkeypatch, edit):
    """The same exception, message and location with the compiled path as with the reference.

    A page of an unknown type is skipped (as pyarrow skips it): its column
    then holds fewer values than the row group's rows, an error of the
    chunk. A crc of another Thrift type is skipped; a size of another type
    is refused.
    """
    from dask_hwdecomp.readpath import batch

    src_path = _plain_file(tmp_path)
    dst = tmp_path / "bad.parquet"
    done = []

    def transform(p):
        if not done and p.page.page_type == 0:
            if edit == "num_values":
                sub = p.header.get_value(PageHeader.data_page_header).copy()
                sub[1] = (T.I32, -1)
                p.header[PageHeader.data_page_header] = (T.STRUCT, sub)
            elif edit == "crc type":
                p.header[PageHeader.crc] = (T.I64, 5)
                usize = PageHeader.uncompressed_page_size
                p.header[usize] = (T.I16, p.header.get_value(usize))
            else:
                fid = {"usize": PageHeader.uncompressed_page_size, "type": PageHeader.type,
                       "unknown type": PageHeader.type}[edit]
                p.header[fid] = (T.I32, {"usize": 1 << 30, "type": -1, "unknown type": 9}[edit])
            done.append(1)
        return p.header, p.body

    rewrite_pages(src_path, dst, transform)
    with pytest.raises(HwdecompError) as fast:
        dask_hwdecomp.read_table(dst, backend="cpu", max_page_bytes=1 << 20, verify_checksums=True)
    monkeypatch.setattr(batch, "FAST_SCAN", False)
    with pytest.raises(HwdecompError) as ref:
        dask_hwdecomp.read_table(dst, backend="cpu", max_page_bytes=1 << 20, verify_checksums=True)
    assert type(fast.value) is type(ref.value) and str(fast.value) == str(ref.value)
    if edit == "unknown type":
        assert fast.value.location.page is None and "rows but the pages" in str(fast.value)
    else:
        assert fast.value.location.page is not None


# --- fetching: straight into the buffer --------------------------------------------------------


def test_local_fetch_makes_no_intermediate_copy(tmp_path):
    path = tmp_path / "big.bin"
    payload = np.random.default_rng(0).integers(0, 255, 24 << 20, dtype=np.uint8)
    path.write_bytes(payload.tobytes())
    buf = np.zeros(16 << 20, np.uint8)
    ranges = [Range(str(path), 1000, 8 << 20, 0), Range(str(path), 12 << 20, 8 << 20, 8 << 20)]
    tracemalloc.start()
    try:
        fetch_into(LocalFileSystem(), ranges, memoryview(buf))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes allocated while fetching 16 MiB"
    assert (buf[: 8 << 20] == payload[1000 : 1000 + (8 << 20)]).all()
    assert (buf[8 << 20 :] == payload[12 << 20 : 20 << 20]).all()
