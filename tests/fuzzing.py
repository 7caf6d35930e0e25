"""Mutating valid Parquet files, and running each mutant in a guarded child.

:func:`file_map` locates every page header, page body and the footer of a
valid file (with the project's own parser); :data:`MUTATORS` turn it into a
broken variant: bit flips in headers, bodies, gzip trailers and the footer,
truncations, removed bytes, edited page sizes, offsets and counts, a wrong
codec id. :class:`Harness` runs each mutant in a child process (see
``fuzz_worker.py``) with a timeout per case and a limit on its address space,
restarting the child after a crash or a hang.
"""

from __future__ import annotations

import json
import os
import random
import re
import select
import struct
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from dask_hwdecomp.errors import PageLocation
from dask_hwdecomp.format.footer import parse_footer
from dask_hwdecomp.format.pages import chunk_range, scan_chunk
from dask_hwdecomp.format.structs import (
    ColumnChunk,
    ColumnMetaData,
    DataPageHeader,
    DataPageHeaderV2,
    FileMetaData,
    PageHeader,
    RowGroup,
)
from dask_hwdecomp.format.thrift import Struct, T, encode_struct

HERE = Path(__file__).resolve().parent


@dataclass
class PageSpan:
    header_start: int
    body_start: int
    body_end: int
    header: Struct


@dataclass
class FileMap:
    data: bytes
    pages: list[PageSpan]
    footer_start: int
    footer: Struct


def file_map(path: Path) -> FileMap:
    data = Path(path).read_bytes()
    footer = parse_footer(data, len(data), str(path))
    pages = []
    for rg in range(footer.num_row_groups):
        for chunk in footer.column_chunks(rg):
            rng = chunk_range(chunk, footer.footer_offset, PageLocation())
            if not rng.length:
                continue
            view = memoryview(data)[rng.start : rng.start + rng.length]
            for p in scan_chunk(view, rng, PageLocation(), max_page_bytes=1 << 30):
                pages.append(PageSpan(rng.start + p.header_start, rng.start + p.body_start,
                                      rng.start + p.body_start + p.body_size, p.header))
    return FileMap(data, pages, footer.footer_offset, footer.meta)


# --- mutators: (FileMap, Random) -> bytes --------------------------------------------


def _flip(data: bytes, lo: int, hi: int, rnd: random.Random, max_bits: int = 3) -> bytes:
    out = bytearray(data)
    if hi <= lo:
        return bytes(out)
    for _ in range(rnd.randint(1, max_bits)):
        i = rnd.randrange(lo, hi)
        out[i] ^= 1 << rnd.randrange(8)
    return bytes(out)


def _interesting(rnd: random.Random, value: int | None = None) -> int:
    pool = [0, 1, -1, 7, 255, 1 << 16, (1 << 31) - 1, -(1 << 31), 1 << 30, (1 << 31) - 8, rnd.randrange(1 << 20)]
    if isinstance(value, int):
        pool += [value + 1, value - 1, value * 2, value // 2, value + rnd.randint(-64, 64)]
    return rnd.choice(pool)


def _with_footer(fm: FileMap, meta: Struct, body: bytes | None = None) -> bytes:
    encoded = encode_struct(meta)
    head = fm.data[: fm.footer_start] if body is None else body
    return head + encoded + struct.pack("<I", len(encoded)) + b"PAR1"


def flip_header(fm, rnd):
    p = rnd.choice(fm.pages)
    return _flip(fm.data, p.header_start, p.body_start, rnd)


def flip_body(fm, rnd):
    p = rnd.choice(fm.pages)
    return _flip(fm.data, p.body_start, p.body_end, rnd, max_bits=4)


def flip_body_tail(fm, rnd):
    """The last 8 bytes of a body: a gzip trailer (CRC, ISIZE), the end of any stream."""
    p = rnd.choice(fm.pages)
    return _flip(fm.data, max(p.body_start, p.body_end - 8), p.body_end, rnd, max_bits=2)


def flip_footer(fm, rnd):
    return _flip(fm.data, fm.footer_start, len(fm.data) - 8, rnd, max_bits=2)


def flip_anywhere(fm, rnd):
    return _flip(fm.data, 0, len(fm.data), rnd, max_bits=6)


def truncate(fm, rnd):
    return fm.data[: rnd.randrange(0, len(fm.data))]


def cut_bytes(fm, rnd):
    """Remove bytes from the data area, keeping the footer: every later offset is off."""
    lo = rnd.randrange(4, fm.footer_start)
    n = rnd.randint(1, 64)
    return fm.data[:lo] + fm.data[min(lo + n, fm.footer_start) :]


def replace_body(fm, rnd):
    p = rnd.choice(fm.pages)
    junk = rnd.randbytes(p.body_end - p.body_start)
    return fm.data[: p.body_start] + junk + fm.data[p.body_end :]


_HEADER_FIELDS = [
    ((PageHeader.uncompressed_page_size,), T.I32),
    ((PageHeader.compressed_page_size,), T.I32),
    ((PageHeader.type,), T.I32),
    ((PageHeader.crc,), T.I32),
    ((PageHeader.data_page_header, DataPageHeader.num_values), T.I32),
    ((PageHeader.data_page_header_v2, DataPageHeaderV2.num_values), T.I32),
    ((PageHeader.data_page_header_v2, DataPageHeaderV2.num_rows), T.I32),
    ((PageHeader.data_page_header_v2, DataPageHeaderV2.definition_levels_byte_length), T.I32),
    ((PageHeader.data_page_header_v2, DataPageHeaderV2.repetition_levels_byte_length), T.I32),
    ((PageHeader.data_page_header_v2, DataPageHeaderV2.is_compressed), T.BOOL),
    ((PageHeader.dictionary_page_header, 1), T.I32),
    ((PageHeader.data_page_header, 2), T.I32),  # encoding
]


def _edit(s: Struct, path: tuple, ttype: int, rnd: random.Random) -> bool:
    *outer, last = path
    cur = s
    for fid in outer:
        item = cur.get(fid)
        if item is None or item[0] != T.STRUCT:
            return False
        sub = item[1].copy()
        cur[fid] = (T.STRUCT, sub)
        cur = sub
    if ttype == T.BOOL:
        cur[last] = (T.BOOL, not cur.get_value(last, True))
    elif rnd.random() < 0.1:
        cur.pop(last, None)  # a required field missing
    else:
        cur[last] = (ttype, max(-(1 << 31), min((1 << 31) - 1, _interesting(rnd, cur.get_value(last)))))
    return True


def edit_page_header(fm, rnd):
    p = rnd.choice(fm.pages)
    h = p.header.copy()
    for _ in range(10):
        path, ttype = rnd.choice(_HEADER_FIELDS)
        if _edit(h, path, ttype, rnd):
            break
    return fm.data[: p.header_start] + encode_struct(h) + fm.data[p.body_start :]


_CHUNK_FIELDS = [
    ColumnMetaData.data_page_offset,
    ColumnMetaData.dictionary_page_offset,
    ColumnMetaData.total_compressed_size,
    ColumnMetaData.total_uncompressed_size,
    ColumnMetaData.num_values,
]


def _chunk(meta: Struct, rnd) -> tuple[Struct, Struct]:
    """A copy of ``meta`` with one chunk's ColumnMetaData copied for editing."""
    meta = meta.copy()
    groups = [g.copy() for g in meta.get_value(FileMetaData.row_groups)[1]]
    meta[FileMetaData.row_groups] = (T.LIST, (T.STRUCT, groups))
    g = rnd.choice(groups)
    cols = [c.copy() for c in g.get_value(RowGroup.columns)[1]]
    g[RowGroup.columns] = (T.LIST, (T.STRUCT, cols))
    c = rnd.choice(cols)
    md = c.get_value(ColumnChunk.meta_data).copy()
    c[ColumnChunk.meta_data] = (T.STRUCT, md)
    return meta, md


def edit_chunk_meta(fm, rnd):
    meta, md = _chunk(fm.footer, rnd)
    fid = rnd.choice(_CHUNK_FIELDS)
    md[fid] = (T.I64, _interesting(rnd, md.get_value(fid)))
    return _with_footer(fm, meta)


def wrong_codec(fm, rnd):
    meta, md = _chunk(fm.footer, rnd)
    md[ColumnMetaData.codec] = (T.I32, rnd.choice([0, 1, 2, 3, 4, 5, 6, 7, 8, 99, -1]))
    return _with_footer(fm, meta)


def wrong_codec_everywhere(fm, rnd):
    codec = rnd.choice([0, 1, 2, 4, 5, 6, 7])
    meta = fm.footer.copy()
    groups = []
    for g in meta.get_value(FileMetaData.row_groups)[1]:
        g = g.copy()
        cols = []
        for c in g.get_value(RowGroup.columns)[1]:
            c = c.copy()
            md = c.get_value(ColumnChunk.meta_data).copy()
            md[ColumnMetaData.codec] = (T.I32, codec)
            c[ColumnChunk.meta_data] = (T.STRUCT, md)
            cols.append(c)
        g[RowGroup.columns] = (T.LIST, (T.STRUCT, cols))
        groups.append(g)
    meta[FileMetaData.row_groups] = (T.LIST, (T.STRUCT, groups))
    return _with_footer(fm, meta)


def edit_row_count(fm, rnd):
    meta = fm.footer.copy()
    if rnd.random() < 0.5:
        meta[FileMetaData.num_rows] = (T.I64, _interesting(rnd, meta.get_value(FileMetaData.num_rows)))
    else:
        groups = [g.copy() for g in meta.get_value(FileMetaData.row_groups)[1]]
        g = rnd.choice(groups)
        g[RowGroup.num_rows] = (T.I64, _interesting(rnd, g.get_value(RowGroup.num_rows)))
        meta[FileMetaData.row_groups] = (T.LIST, (T.STRUCT, groups))
    return _with_footer(fm, meta)


def footer_length(fm, rnd):
    out = bytearray(fm.data)
    (n,) = struct.unpack("<I", out[-8:-4])
    out[-8:-4] = struct.pack("<I", _interesting(rnd, n) & 0xFFFFFFFF)
    return bytes(out)


MUTATORS = {
    f.__name__: f
    for f in (
        flip_header, flip_body, flip_body_tail, flip_footer, flip_anywhere, truncate, cut_bytes,
        replace_body, edit_page_header, edit_chunk_meta, wrong_codec, wrong_codec_everywhere,
        edit_row_count, footer_length,
    )
}


# --- where the reader may be stricter than pyarrow -----------------------------------


@dataclass(frozen=True)
class StricterCause:
    """A kind of damaged metadata that this reader refuses while pyarrow reads on.

    A case counts as this cause when our exception is of type ``error``
    (by name) and its message matches ``pattern`` (``re.search``). Each is
    listed, with what pyarrow returns for it, in the errors section of
    docs/user-guide.md.
    """

    name: str
    error: str
    pattern: str


STRICTER_CAUSES = (
    StricterCause("row count above the values", "CorruptMetadataError",
                  r"row group declares \d+ rows but the pages of the column chunk hold \d+ values$"),
    StricterCause("page running past its column chunk", "CorruptMetadataError",
                  r"compressed_page_size \d+ runs past the column chunk \(\d+ bytes remain\)$"),
    StricterCause("page header cut by the end of its chunk", "CorruptMetadataError",
                  r"page header does not decode \(thrift: unexpected end of data at byte \d+\)$"),
    StricterCause("negative value count", "CorruptMetadataError",
                  r"negative size: total_compressed_size \d+, num_values -\d+$"),
    StricterCause("uncompressed page of two sizes", "CorruptMetadataError",
                  r"uncompressed page declares \d+ bytes but stores \d+$"),
    StricterCause("v2 level bytes beyond the page", "CorruptMetadataError",
                  r"v2 level bytes \d+ exceed the page sizes \(compressed \d+, uncompressed \d+\)$"),
    StricterCause("negative row count", "CorruptMetadataError", r"row group declares -\d+ rows$"),
    StricterCause("negative page type", "CorruptMetadataError", r"page header type -\d+ is negative$"),
    StricterCause("page header without its type's struct", "CorruptMetadataError",
                  r"page header lacks the struct holding \w+\.num_values$"),
)


def stricter_cause(detail: str) -> StricterCause | None:
    """The listed cause of an "our error where pyarrow reads the file" case, or None.

    ``detail`` is the worker's ``"<ExceptionType>: <message>"``.
    """
    error, _, message = detail.partition(": ")
    for cause in STRICTER_CAUSES:
        if error == cause.error and re.search(cause.pattern, message):
            return cause
    return None


# --- the guarded child ---------------------------------------------------------------


@dataclass(frozen=True)
class CaseRecord:
    """One case: its label (mutator:seed file:number), verdict, our and pyarrow's error."""

    label: str
    verdict: str
    detail: str
    pyarrow: str | None


@dataclass
class Results:
    verdicts: Counter = field(default_factory=Counter)
    by_mutator: Counter = field(default_factory=Counter)
    failures: list = field(default_factory=list)
    oracle_trouble: list = field(default_factory=list)
    log: list = field(default_factory=list)
    stricter: Counter = field(default_factory=Counter)

    @property
    def cases(self) -> int:
        return sum(self.verdicts.values())

    def summary(self) -> str:
        parts = ", ".join(f"{k} {v}" for k, v in sorted(self.verdicts.items()))
        return f"{self.cases} cases: {parts}"


class Harness:
    """Run cases in a child process: timeout per case, address-space limit, restarts.

    Parameters
    ----------
    workdir : Path
        Where mutants are written.
    timeout : float
        Seconds one case may take before it counts as a hang.
    memory_limit : int
        Bytes the child may add to its address space after start-up.
    warm : Path
        A valid file the child reads once before the limit is set.
    """

    def __init__(self, workdir: Path, *, timeout: float = 10.0, memory_limit: int = 3 << 30, warm: Path | None = None):
        self.workdir = Path(workdir)
        self.timeout = timeout
        self.memory_limit = memory_limit
        self.warm = warm
        self.proc: subprocess.Popen | None = None
        self.results = Results()
        self._n = 0

    def _start(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "fuzz_worker.py"), str(self.memory_limit), str(self.warm or "")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True,
        )
        self._buf = b""
        msg = self._read(60.0)
        if msg != {"ready": True}:
            raise RuntimeError(f"fuzz worker did not start: {msg!r}")

    def _read(self, timeout: float):
        # Our own line buffer over the raw fd: select() on a buffered reader
        # misses lines already pulled into its buffer.
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return "timeout"
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return "eof"
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def _stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()  # our own child, by its handle
            self.proc.wait()
            self.proc = None

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
        self._stop()

    def run(self, data: bytes, label: str, backend: str = "cpu", options: dict | None = None) -> str:
        """Run one mutant; returns (and records) its verdict (``options``: more ``read_table`` keywords)."""
        if self.proc is None:
            self._start()
        self._n += 1
        path = self.workdir / f"case{self._n % 2}.parquet"
        path.write_bytes(data)
        self.proc.stdin.write(json.dumps({"path": str(path), "backend": backend, "options": options}) + "\n")
        self.proc.stdin.flush()
        stage = "start"
        deadline = time.monotonic() + self.timeout
        while True:
            msg = self._read(max(0.0, deadline - time.monotonic()))
            if isinstance(msg, dict) and "stage" in msg:
                stage = msg["stage"]
                continue
            break
        pyarrow = None
        if isinstance(msg, dict):
            verdict, detail, pyarrow = msg["verdict"], msg["detail"], msg.get("pyarrow")
        else:
            code = self.proc.poll()
            self._stop()
            kind = "hang" if msg == "timeout" else f"crash (exit {code})"
            if stage == "pyarrow":
                # pyarrow's own reader on the raw mutant, after ours answered
                self.results.oracle_trouble.append((label, kind))
                verdict, detail = "oracle-" + kind.split()[0], ""
            else:
                verdict, detail = f"FAIL-{kind.split()[0]}", kind
        if verdict == "ok-our-error-pyarrow-reads":
            # Passes only for a listed cause: the reader must not grow
            # stricter than pyarrow unnoticed.
            cause = stricter_cause(detail)
            if cause is None:
                verdict = "FAIL-stricter-than-pyarrow"
            else:
                self.results.stricter[cause.name] += 1
        self.results.log.append(CaseRecord(label, verdict, detail, pyarrow))
        self.results.verdicts[verdict] += 1
        self.results.by_mutator[label.split(":")[0]] += 1
        if verdict.startswith("FAIL"):
            self.results.failures.append((label, verdict, detail, data))
        return verdict
