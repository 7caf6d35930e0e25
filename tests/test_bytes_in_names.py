"""Files whose column names are not UTF-8: read as pyarrow reads them, named as pyarrow prints them.

Parquet names are bytes. pyarrow's ``read_table`` reads a file whose names
are not valid UTF-8 and keeps those bytes in the table's schema; what it
prints decodes them with U+FFFD for each invalid byte. The files here are
written by pyarrow and then given such a name in the footer (a Latin-1
``café``, the same length), and every read is held against pyarrow's.

``dd.read_parquet`` is not among the reads: dask refuses such a file with
``engine="pyarrow"`` too, in its own code (its meta and ``ParquetFile``
decode the names), before any engine reads a page.
"""

from __future__ import annotations

import json
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dask_hwdecomp
from dask_hwdecomp import CorruptPageError, ReadReport
from dask_hwdecomp.gpudecode.plan import plan_file

from fuzzing import file_map

# A name as a Latin-1 writer stores "café", and the valid name the file is
# written with first (same length, so no offset in the file moves).
RAW = b"caf\xe9"
WRITTEN = b"cafe"
# How pyarrow prints RAW, and so how reports and errors name the column.
PRINTED = "caf\ufffd"


def _rename_in_footer(data: bytes, old: bytes, new: bytes) -> bytes:
    """``data`` with every ``old`` in its footer (schema element names, ``path_in_schema``) replaced by ``new``."""
    (length,) = struct.unpack("<I", data[-8:-4])
    start = len(data) - 8 - length
    footer = data[start:-8]
    assert footer.count(old) >= 2, "the name is in the schema and in each chunk's path_in_schema"
    return data[:start] + footer.replace(old, new) + data[-8:]


def _write(path, table: pa.Table, old: bytes = WRITTEN, new: bytes = RAW, **kwargs):
    kwargs.setdefault("compression", "snappy")
    # No ARROW:schema: a writer that stores such names is not Arrow.
    pq.write_table(table, path, store_schema=False, **kwargs)
    path.write_bytes(_rename_in_footer(path.read_bytes(), old, new))
    return path


def _flat(n: int = 40) -> pa.Table:
    return pa.table({WRITTEN.decode(): pa.array(range(n), pa.int64()),
                     "other": [f"v{i % 3}" for i in range(n)]})


def _list_element(n: int = 40) -> pa.Table:
    """A flat column and a list, whose element field the footer will name with RAW."""
    return pa.table({"id": pa.array(range(n), pa.int64()),
                     "l": pa.array([[i, i + 1] if i % 4 else None for i in range(n)], pa.list_(pa.int64()))})


FILES = {
    # A top-level column: the table's own field has the name.
    "column": lambda path: _write(path, _flat(), row_group_size=15),
    # A nested field's name: the table's top-level names are valid; its
    # leaf's path_in_schema is not.
    "list element": lambda path: _write(path, _list_element(), old=b"element", new=b"elem\xe9nt", row_group_size=15),
}


def _assert_equal(got: pa.Table, ref: pa.Table) -> None:
    """``got.equals(ref)``, which pyarrow cannot evaluate here (it decodes each column's name).

    The schemas compare in C++, the names' bytes and the metadata
    included; the columns compare under names of their own.
    """
    assert got.schema.equals(ref.schema, check_metadata=True)
    names = [f"c{i}" for i in range(ref.num_columns)]
    assert got.rename_columns(names).equals(ref.rename_columns(names))


@pytest.fixture(params=sorted(FILES))
def named_file(request, tmp_path):
    return FILES[request.param](tmp_path / "names.parquet")


def test_pyarrow_reads_and_prints_the_name(tmp_path):
    # What the tests below hold the reader to: pyarrow reads the file, keeps
    # the bytes (its Python accessor refuses them) and prints U+FFFD.
    ref = pq.read_table(FILES["column"](tmp_path / "x.parquet"))
    assert ref.num_rows == 40
    with pytest.raises(UnicodeDecodeError):
        ref.schema.names  # noqa: B018 - the accessor is what raises
    with pytest.raises(UnicodeDecodeError):
        ref.equals(ref)  # so the tests compare with _assert_equal
    assert str(ref.schema).splitlines()[0] == f"{PRINTED}: int64"


@pytest.mark.parametrize("backend", ["cpu", "auto"])
def test_read_table_equals_pyarrow_and_reports_the_name(named_file, backend):
    ref = pq.read_table(named_file)
    report = ReadReport()
    got = dask_hwdecomp.read_table(named_file, backend=backend, report=report)
    _assert_equal(got, ref)
    text = str(report)
    summary = json.loads(json.dumps(report.to_dict()))
    assert summary["files"] == 1 and summary["by_backend"]
    columns = {c["column"] for c in summary["columns"]}
    # Top-level columns, named as pyarrow prints the table's schema.
    printed = [line.split(": ", 1)[0] for line in str(ref.schema).splitlines() if not line.startswith(" ")]
    assert columns == set(printed)
    assert ("columns decoded on" in text) and ("SNAPPY" in text)


@pytest.mark.parametrize("backend", ["cpu", "auto"])
def test_columns_and_filters_as_pyarrow(tmp_path, backend):
    path = FILES["column"](tmp_path / "x.parquet")
    # The other column, alone and filtered on: pyarrow's tables.
    for kwargs in ({"columns": ["other"]}, {"filters": [("other", "=", "v1")]},
                   {"columns": ["other"], "filters": [("other", "in", ["v0", "v2"])]}):
        report = ReadReport()
        got = dask_hwdecomp.read_table(path, backend=backend, report=report, **kwargs)
        _assert_equal(got, pq.read_table(path, **kwargs))
        str(report)
        report.to_dict()
    # The column itself, by the name pyarrow prints: pyarrow finds no field of
    # that name (the file's holds other bytes), and neither does this reader.
    for kwargs in ({"columns": [PRINTED]}, {"filters": [(PRINTED, "=", 1)]}):
        with pytest.raises(pa.ArrowInvalid) as theirs:
            pq.read_table(path, **kwargs)
        with pytest.raises(pa.ArrowInvalid) as ours:
            dask_hwdecomp.read_table(path, backend=backend, **kwargs)
        assert str(ours.value) == str(theirs.value), kwargs


def test_corrupt_page_of_the_column_is_named(tmp_path):
    # Two files; the second's first page (the first column's) is corrupt.
    # One piece per batch: the first file is read and counted before the
    # second's page fails.
    (tmp_path / "data").mkdir()
    for part in ("a", "b"):
        _write(tmp_path / "data" / f"{part}.parquet", _flat(), use_dictionary=False)
    bad = tmp_path / "data" / "b.parquet"
    fm = file_map(bad)
    page = fm.pages[0]
    data = bytearray(fm.data)
    data[page.body_start : page.body_end] = b"\x13" * (page.body_end - page.body_start)
    bad.write_bytes(bytes(data))
    report = ReadReport()
    with pytest.raises(CorruptPageError) as info:
        dask_hwdecomp.read_table(tmp_path / "data", backend="cpu", batch_bytes=1, report=report)
    assert info.value.location.file == str(bad)
    assert info.value.location.column == PRINTED
    assert f"column {PRINTED!r}" in str(info.value)
    assert report.files == 1 and {c for c, _, _ in report.columns} == {PRINTED, "other"}
    str(report)


def test_gpu_decode_plan_leaves_such_a_file_to_pyarrow(tmp_path):
    # pyarrow's ParquetFile (the planner's view of a file) refuses the name;
    # its dataset reader, which decodes the image, does not.
    path = _write(tmp_path / "x.parquet", _flat(), compression="none")
    plan = plan_file(path.read_bytes())
    assert len(plan.chunks) == 0 and plan.gpu_columns == ({},)
    assert set(plan.fallbacks[0]) == {PRINTED, "other"}
    assert all("UTF-8" in why for why in plan.fallbacks[0].values())
    assert set(plan_file(path.read_bytes(), columns=["other"]).fallbacks[0]) == {"other"}
