"""The service's checks of decode plans it receives: every bound the kernels rely on."""

from __future__ import annotations

import numpy as np
import pytest

from dask_hwdecomp.gpudecode.checks import PlanError, check_plan
from dask_hwdecomp.gpudecode.tables import CHUNK, PAGE, OutKind, PageKind, Physical


def _plan():
    """Two chunks: optional int64 (dictionary + 2 data pages, 10 rows), required strings (1 page, 3 rows)."""
    chunks = np.zeros(2, CHUNK)
    chunks[0] = (OutKind.COPY, Physical.INT64, 0, 8, 1, 0, 1, 2, 10, 0, 0, 0, 0, 0, 0, 0)
    chunks[1] = (OutKind.BYTES, Physical.BYTE_ARRAY, 0, 4, 0, -1, 3, 1, 3, 10, 4, 0, 0, 0, 0, 0)
    pages = np.zeros(4, PAGE)
    pages[0] = (0, PageKind.DICTIONARY, 0, 0, 0, 32, 4, -1, 0, 0, 0)
    pages[1] = (0, PageKind.DATA_V1, 8, 0, 40, 20, 6, -1, 0, 0, 0)
    pages[2] = (0, PageKind.DATA_V2, 8, 0, 70, 20, 4, 2, 6, 0, 0)
    pages[3] = (1, PageKind.DATA_V1, 0, 0, 100, 30, 3, -1, 10, 0, 0)
    ranges = np.array([[0, 130, 0]], dtype=np.int64)
    return ranges, chunks, pages


def test_a_valid_plan_passes():
    check_plan(*_plan(), data_bytes=130, src_nbytes=130)


def _edit(target, field, value, index):
    def edit(ranges, chunks, pages):
        arr = {"chunks": chunks, "pages": pages}[target]
        arr[field][index] = value
    return edit


@pytest.mark.parametrize("edit, data_bytes, src_nbytes", [
    pytest.param(lambda r, c, p: None, 129, 130, id="upload past the device copy"),
    pytest.param(lambda r, c, p: None, 130, 129, id="upload past the source"),
    pytest.param(_edit("pages", "size", 31, 3), 130, 130, id="page past the copy"),
    pytest.param(_edit("pages", "offset", -1, 1), 130, 130, id="negative page offset"),
    pytest.param(_edit("chunks", "width", 4, 0), 130, 130, id="int64 of width 4"),
    pytest.param(_edit("chunks", "kind", 99, 0), 130, 130, id="unknown kind"),
    pytest.param(_edit("chunks", "max_def", 2, 0), 130, 130, id="nested levels"),
    pytest.param(_edit("chunks", "row_base", 9, 1), 130, 130, id="overlapping rows"),
    pytest.param(_edit("chunks", "num_pages", 3, 0), 130, 130, id="a chunk takes another's page"),
    pytest.param(_edit("chunks", "dict_page", 3, 0), 130, 130, id="another chunk's page as dictionary"),
    pytest.param(_edit("chunks", "dict_base", 1, 1), 130, 130, id="dictionary entries misnumbered"),
    pytest.param(_edit("pages", "row_start", 5, 2), 130, 130, id="pages overlap in rows"),
    pytest.param(_edit("pages", "num_values", 5, 2), 130, 130, id="pages hold more rows than the chunk"),
    pytest.param(_edit("pages", "chunk", 1, 1), 130, 130, id="page claims another chunk"),
    pytest.param(_edit("pages", "def_bytes", 21, 2), 130, 130, id="levels past the page"),
    pytest.param(_edit("chunks", "physical", int(Physical.FIXED_LEN_BYTE_ARRAY), 0), 130, 130,
                 id="fixed length 0"),
])
def test_a_plan_that_breaks_a_bound_is_refused(edit, data_bytes, src_nbytes):
    ranges, chunks, pages = _plan()
    edit(ranges, chunks, pages)
    with pytest.raises(PlanError):
        check_plan(ranges, chunks, pages, data_bytes, src_nbytes)
