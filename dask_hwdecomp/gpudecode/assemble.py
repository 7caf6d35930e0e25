"""pyarrow arrays over the GPU decoder's host output, without copying the values.

The decoded chunks land in one host output buffer, placed by
:func:`~.tables.place_outputs`. :func:`assemble` wraps each chunk's buffers
(validity bitmap, values or boolean bitmap, offsets and string bytes) as
``pa.foreign_buffer`` views whose base is the output's ``owner``: the
memory stays alive exactly as long as any array (or table, or pandas
object built without a copy) over it does.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .plan import DecodePlan
from .tables import OutKind, validity_bytes, values_bytes

__all__ = ["assemble", "chunk_array"]


def _address(out) -> tuple[int, int]:
    """(address, size) of a buffer-protocol object."""
    if isinstance(out, pa.Buffer):
        return out.address, out.size
    view = np.frombuffer(out, np.uint8)
    return int(view.ctypes.data), int(view.shape[0])


class _Output:
    """The output buffer: hands out views of it that keep ``owner`` alive."""

    def __init__(self, out, owner):
        self.address, self.size = _address(out)
        self.owner = owner

    def view(self, offset: int, nbytes: int) -> pa.Buffer:
        if offset < 0 or nbytes < 0 or offset + nbytes > self.size:
            raise ValueError(f"decoded buffer {offset}+{nbytes} lies outside the {self.size}-byte output")
        return pa.foreign_buffer(self.address + offset, nbytes, base=self.owner)


def chunk_array(output: _Output, chunk, arrow_type: pa.DataType) -> pa.Array:
    """One chunk's array, from its measured and placed CHUNK record."""
    rows = int(chunk["num_rows"])
    nulls = int(chunk["null_count"])
    kind = int(chunk["kind"])
    validity = None
    if nulls:
        if int(chunk["max_def"]) == 0 or int(chunk["out_valid"]) < 0:
            raise ValueError(f"a required chunk with {nulls} nulls")
        validity = output.view(int(chunk["out_valid"]), validity_bytes(rows))
    values = output.view(int(chunk["out_values"]), values_bytes(chunk))
    if kind == OutKind.BYTES:
        data = output.view(int(chunk["out_data"]), int(chunk["data_bytes"]))
        buffers = [validity, values, data]
    else:
        buffers = [validity, values]
    arr = pa.Array.from_buffers(arrow_type, rows, buffers, null_count=nulls)
    arr.validate()  # buffer sizes against the type: cheap, and never a bad array handed on
    return arr


def assemble(out, owner, chunks: np.ndarray, plan: DecodePlan) -> list[dict[str, pa.ChunkedArray]]:
    """The GPU-decoded columns of each image of a batch.

    Parameters
    ----------
    out : buffer
        The host output buffer (any object exporting the buffer protocol, or
        a ``pa.Buffer``).
    owner : object
        Keeps ``out``'s memory alive: every Arrow buffer over it holds a
        reference to it.
    chunks : np.ndarray
        The plan's CHUNK records, measured (``null_count``, ``data_bytes``)
        and placed (``out_*``).
    plan : DecodePlan

    Returns
    -------
    list of dict
        Per image, {column name: ChunkedArray}: one chunk per planned row
        group, in the image's order, for every column of
        ``plan.gpu_columns`` (empty where no row group was planned).

    Raises
    ------
    ValueError
        A record that places a buffer outside ``out``, or that does not fit
        its Arrow type.
    """
    if len(chunks) != len(plan.columns):
        raise ValueError(f"{len(chunks)} chunk records for a plan of {len(plan.columns)} chunks")
    output = _Output(out, owner)
    parts: list[dict[str, list[pa.Array]]] = [{name: [] for name in cols} for cols in plan.gpu_columns]
    for rec, info in zip(chunks, plan.columns):
        parts[info.image][info.name].append(chunk_array(output, rec, info.arrow_type))
    return [
        {name: pa.chunked_array(arrays, type=cols[name].arrow_type) for name, arrays in image.items()}
        for image, cols in zip(parts, plan.gpu_columns)
    ]
