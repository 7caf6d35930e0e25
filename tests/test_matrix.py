"""``read_table`` against pyarrow on a generated matrix and on hand-built pages.

The matrix: every codec pyarrow writes × data page v1/v2 × dictionary on/off,
each file one wide table of every type × null mode (none, some, all), in
several row groups of tiny pages. pyarrow's reader of the same file is the
oracle.
"""

from __future__ import annotations

import ctypes

import cramjam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.local import LocalFileSystem

import dask_hwdecomp
from dask_hwdecomp.format.structs import Codec, DataPageHeaderV2, PageHeader, PageType
from dask_hwdecomp.options import current_options
from dask_hwdecomp.readpath.batch import decompress_batch
from dask_hwdecomp.readpath.plan import Piece, plan_piece
from dask_hwdecomp.report import PYARROW_NO_GPU, ReadReport
from dask_hwdecomp.routing.router import Router

from helpers import MATRIX_CODECS, assert_tables_equal, gpu_available, walk_buffers
from rewrite import compress_values, gzip_members, hadoop_lz4, rewrite_pages

FILE_IDS = [
    f"{c}-v{v}-{d}" for c in MATRIX_CODECS for v in (1, 2) for d in ("dict", "plain")
]


@pytest.fixture(scope="module", params=FILE_IDS)
def mfile(request, matrix_files):
    return next(f for f in matrix_files if f.id == request.param)


def test_matrix_is_what_it_claims(matrix_files):
    """The files really hold several row groups, tiny pages, the codec and dictionary asked for."""
    from dask_hwdecomp.format.footer import parse_footer
    from dask_hwdecomp.format.structs import ColumnChunk, ColumnMetaData

    ids = {"none": Codec.UNCOMPRESSED, "lz4": Codec.LZ4_RAW}  # pyarrow prints LZ4_RAW as "LZ4"
    for f in matrix_files:
        md = pq.ParquetFile(f.path).metadata
        assert md.num_row_groups >= 3
        col = md.row_group(0).column(md.schema.names.index("int64_none"))
        data = f.path.read_bytes()
        chunk = parse_footer(data, len(data), str(f.path)).column_chunks(0)[0]
        codec = chunk.get_value(ColumnChunk.meta_data).get_value(ColumnMetaData.codec)
        assert codec == (ids[f.codec] if f.codec in ids else Codec[f.codec.upper()])
        assert ("RLE_DICTIONARY" in col.encodings or "PLAIN_DICTIONARY" in col.encodings) == f.dictionary
        pages = _pages(f.path, 0, md.schema.names.index("string_none"))
        assert sum(p.page_type in (PageType.DATA_PAGE, PageType.DATA_PAGE_V2) for p in pages) >= 3  # tiny pages
        want = PageType.DATA_PAGE_V2 if f.data_page_version == "2.0" else PageType.DATA_PAGE
        assert pages[-1].page_type == want


@pytest.mark.parametrize("backend", ["cpu", "auto"])
def test_full_read(mfile, backend):
    report = dask_hwdecomp.ReadReport()
    got = dask_hwdecomp.read_table(mfile.path, backend=backend, report=report)
    assert_tables_equal(got, pq.read_table(mfile.path))
    assert not report.fallbacks
    if backend == "auto" and not gpu_available():
        # pyarrow's own read: reported as such, sizes from the footer.
        assert {b for b, _ in report.by_backend} == {PYARROW_NO_GPU} and report.batches == 0
        md = pq.ParquetFile(mfile.path).metadata
        chunks = [md.row_group(i).column(j) for i in range(md.num_row_groups) for j in range(md.num_columns)]
        assert sum(s.compressed_bytes for s in report.by_backend.values()) == sum(c.total_compressed_size for c in chunks)
        return
    if mfile.codec != "none":
        md = pq.ParquetFile(mfile.path).metadata
        assert sum(s.pages for s in report.by_backend.values()) > md.num_row_groups * md.num_columns / 2


COLUMNS = ["int32_none", "string_some", "struct_some", "map_all", "nested_list_some", "decimal256_some", "float16_some"]


def test_columns(mfile):
    assert_tables_equal(
        dask_hwdecomp.read_table(mfile.path, columns=COLUMNS, backend="cpu"),
        pq.read_table(mfile.path, columns=COLUMNS),
    )


def test_nested_leaf_column(mfile):
    cols = ["struct_some.a", "bool_all"]
    assert_tables_equal(
        dask_hwdecomp.read_table(mfile.path, columns=cols, backend="cpu"),
        pq.read_table(mfile.path, columns=cols),
    )


@pytest.mark.parametrize("row_groups", [[2, 0], [1]])
def test_row_groups(mfile, row_groups):
    got = dask_hwdecomp.read_table(mfile.path, row_groups=row_groups, columns=COLUMNS, backend="cpu")
    assert_tables_equal(got, pq.ParquetFile(mfile.path).read_row_groups(row_groups, columns=COLUMNS))


def test_row_groups_all_columns(mfile):
    got = dask_hwdecomp.read_table(mfile.path, row_groups=[1, 2], backend="cpu")
    assert_tables_equal(got, pq.ParquetFile(mfile.path).read_row_groups([1, 2]))


@pytest.mark.parametrize(
    "columns, filters",
    [
        (None, [("int32_none", ">", 0)]),
        (["string_some", "list_some"], [("int32_none", "<", 0)]),  # filter column not selected
        (["struct_some"], [[("uint8_some", "<", 50)], [("string_none", "=", "s3s3é")]]),  # DNF or
        (["int64_some", "timestamp_tz_some"], pc.field("int64_some") > 0),
    ],
    ids=["all", "unselected", "dnf-or", "expression"],
)
def test_filters(mfile, columns, filters):
    got = dask_hwdecomp.read_table(mfile.path, columns=columns, filters=filters, backend="cpu")
    want = pq.read_table(mfile.path, columns=columns, filters=filters)
    assert 0 < want.num_rows < pq.ParquetFile(mfile.path).metadata.num_rows
    assert_tables_equal(got, want)


# --- the decoded table owns its memory --------------------------------------------------

@pytest.mark.parametrize("file_id", ["none-v1-dict", "none-v2-plain", "snappy-v1-plain", "zstd-v2-dict"])
def test_table_does_not_point_into_the_image(matrix_files, file_id):
    """GPU backends reuse their pinned buffers: a table must not keep pointing into one.

    Decodes the image as ``read_table`` does, checks that no buffer of any
    column (every type of the matrix) lies inside the image, then zeroes the
    image and compares again.
    """
    f = next(m for m in matrix_files if m.id == file_id)
    opts = current_options(backend="cpu")
    fs = LocalFileSystem()
    plan = plan_piece(fs, Piece(str(f.path)), None)
    batch = decompress_batch(fs, [plan], Router(opts), opts, ReadReport())
    try:
        image = batch.images[0].buffer
        lo, hi = image.address, image.address + image.size
        table = pq.read_table(pa.BufferReader(image))
        inside = sorted(
            {name for name, col in zip(table.column_names, table.columns)
             for buf in walk_buffers(pa.table({name: col})) if lo <= buf.address < hi}
        )
        assert not inside, f"columns pointing into the image buffer: {inside}"
        ctypes.memset(image.address, 0xA5, image.size)
        assert_tables_equal(table, pq.read_table(f.path))
    finally:
        batch.close()


# --- hand-built pages -------------------------------------------------------------------


@pytest.fixture(scope="module")
def plain_files(tmp_path_factory):
    """UNCOMPRESSED v1 and v2 files with tiny pages, dictionaries, nulls, nesting."""
    n = 600
    rng = np.random.default_rng(7)
    t = pa.table(
        {
            "i": pa.array(rng.integers(-1000, 1000, n)),
            "s": pa.array([f"v{i % 13}" if i % 5 else None for i in range(n)]),
            "l": pa.array([[i, None, i * 2] if i % 3 else None for i in range(n)]),
            "f": pa.array(rng.normal(size=n)),
            "nulls": pa.nulls(n, pa.int32()),
        }
    )
    d = tmp_path_factory.mktemp("plain")
    out = {}
    for v in ("1.0", "2.0"):
        p = d / f"plain-v{v[0]}.parquet"
        pq.write_table(t, p, compression="none", data_page_version=v, data_page_size=300, write_batch_size=40, row_group_size=250)
        out[v[0]] = p
    return out


def _check(path):
    want = pq.read_table(path)
    for backend in ("cpu", "auto"):
        assert_tables_equal(dask_hwdecomp.read_table(path, backend=backend), want)
    return want


@pytest.mark.parametrize("version", ["1", "2"])
@pytest.mark.parametrize(
    "name, codec, compress",
    [
        ("gzip-3-members", Codec.GZIP, gzip_members(3)),
        ("gzip-7-members", Codec.GZIP, gzip_members(7)),
        ("gzip-fname-fextra-fcomment", Codec.GZIP, gzip_members(1, filename="page.bin", comment=True)),
        ("gzip-2-members-with-headers", Codec.GZIP, gzip_members(2, filename="p", comment=True)),
        ("lz4-hadoop-1-block", Codec.LZ4, hadoop_lz4(1)),
        ("lz4-hadoop-4-blocks", Codec.LZ4, hadoop_lz4(4)),
        ("lz4-bare-block", Codec.LZ4, lambda b: bytes(cramjam.lz4.compress_block(b, store_size=False))),
    ],
)
def test_hand_built_pages(plain_files, tmp_path, version, name, codec, compress):
    dst = tmp_path / f"{name}.parquet"
    rewrite_pages(plain_files[version], dst, compress_values(compress), codec=codec)
    assert_tables_equal(_check(dst), pq.read_table(plain_files[version]))


@pytest.mark.parametrize("codec, compress", [
    (Codec.SNAPPY, lambda b: bytes(cramjam.snappy.compress_raw(b))),
    (Codec.ZSTD, lambda b: bytes(cramjam.zstd.compress(b))),
    (Codec.GZIP, gzip_members(2)),
])
def test_v2_is_compressed_false(plain_files, tmp_path, codec, compress):
    """v2 pages stored as they are (``is_compressed=false``) among compressed ones."""
    dst = tmp_path / "mixed.parquet"
    rewrite_pages(
        plain_files["2"], dst, compress_values(compress, v2_uncompressed=lambda p: p.page.ordinal % 2 == 0), codec=codec
    )
    flags = _v2_flags(dst)
    assert True in flags and False in flags
    assert_tables_equal(_check(dst), pq.read_table(plain_files["2"]))


def _pages(path, rg, col):
    """The pages of one column chunk, scanned by the project's own page scanner."""
    from dask_hwdecomp.errors import PageLocation
    from dask_hwdecomp.format.footer import parse_footer
    from dask_hwdecomp.format.pages import chunk_range, scan_chunk

    data = path.read_bytes()
    footer = parse_footer(data, len(data), str(path))
    chunk = footer.column_chunks(rg)[col]
    rng = chunk_range(chunk, footer.footer_offset, PageLocation())
    return scan_chunk(memoryview(data)[rng.start : rng.start + rng.length], rng, PageLocation(), max_page_bytes=1 << 30)


def _v2_flags(path):
    flags = []
    for col in range(pq.ParquetFile(path).metadata.num_columns):
        for page in _pages(path, 0, col):
            if page.page_type == PageType.DATA_PAGE_V2:
                flags.append(page.header.get_value(PageHeader.data_page_header_v2).get_value(DataPageHeaderV2.is_compressed, True))
    return flags


@pytest.mark.parametrize("codec, empty_body", [
    (Codec.SNAPPY, b""),  # as datapage_v2_empty_datapage: zero bytes after the levels
    (Codec.ZSTD, bytes(cramjam.zstd.compress(b""))),  # as page_v2_empty_compressed: a frame for 0 bytes
    (Codec.GZIP, b""),
    (Codec.BROTLI, bytes(cramjam.brotli.compress(b""))),
])
def test_empty_v2_pages(plain_files, tmp_path, codec, empty_body):
    """All-null v2 pages: nothing after the levels, or an empty frame."""
    compressors = {
        Codec.SNAPPY: lambda b: bytes(cramjam.snappy.compress_raw(b)),
        Codec.ZSTD: lambda b: bytes(cramjam.zstd.compress(b)),
        Codec.GZIP: gzip_members(1),
        Codec.BROTLI: lambda b: bytes(cramjam.brotli.compress(b)),
    }

    def compress(b: bytes) -> bytes:
        return empty_body if not b else compressors[codec](b)

    dst = tmp_path / "empty.parquet"
    rewrite_pages(plain_files["2"], dst, compress_values(compress), codec=codec)
    _check(dst)
    assert_tables_equal(pq.read_table(dst), pq.read_table(plain_files["2"]))


def test_concatenated_gzip_members_in_corpus(corpus):
    path = corpus / "data" / "concatenated_gzip_members.parquet"
    report = dask_hwdecomp.ReadReport()
    assert_tables_equal(dask_hwdecomp.read_table(path, backend="cpu", report=report), pq.read_table(path))
    assert report.backends == {"GZIP": ["cpu"]}


@pytest.mark.parametrize("name", ["hadoop_lz4_compressed", "hadoop_lz4_compressed_larger", "non_hadoop_lz4_compressed"])
def test_lz4_framings_in_corpus(corpus, name):
    path = corpus / "data" / f"{name}.parquet"
    assert_tables_equal(dask_hwdecomp.read_table(path, backend="cpu"), pq.read_table(path))
