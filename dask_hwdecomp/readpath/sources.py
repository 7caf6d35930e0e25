"""What ``read_table`` reads: the files behind a source, found as pyarrow finds them.

A source is anything :func:`pyarrow.parquet.read_table` takes: a file, a
directory (hive partitions discovered), a list of paths, an open binary
file, a :class:`pyarrow.NativeFile` or :class:`pyarrow.Buffer`, on a
pyarrow or fsspec ``filesystem``. Discovery is pyarrow's own
(:class:`pyarrow.parquet.ParquetDataset`), so the files, the dataset schema
and each file's partition values are exactly those pyarrow reads. A glob is
expanded first where the filesystem is an fsspec one (fsspec filesystems
expand globs; pyarrow's do not). What this module adds is the fsspec-like
filesystem the page path fetches byte ranges through.
"""

from __future__ import annotations

import inspect
import io
import os
import re
from dataclasses import dataclass

import fsspec
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

__all__ = ["Source", "SourceFile", "resolve_source", "parquet_format", "ACCEPTED", "OpenFileSystem"]

ACCEPTED = (
    "a Parquet file path or URL, a directory (hive partitions are discovered), a glob (on an fsspec "
    "filesystem), a list of paths, an open binary file, a pyarrow.NativeFile or a pyarrow.Buffer"
)

# The characters fsspec's glob treats as a pattern.
_GLOB = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class SourceFile:
    """One file to read: its path for the fetcher, and pyarrow's fragment of it."""

    path: str
    fragment: ds.ParquetFileFragment


@dataclass(frozen=True)
class Source:
    """The files of a source, in pyarrow's order, and how to read them.

    Attributes
    ----------
    fs : fsspec.AbstractFileSystem
        What the page path fetches byte ranges through.
    files : tuple of SourceFile
        Files that may hold rows passing the filter (pyarrow's partition pruning).
    schema : pyarrow.Schema or None
        The dataset schema pyarrow reads with (partition fields included);
        None for one file: its own schema.
    filter : pyarrow.compute.Expression or None
        ``filters`` as an expression.
    """

    fs: fsspec.AbstractFileSystem
    files: tuple[SourceFile, ...]
    schema: pa.Schema | None
    filter: object


class OpenFileSystem(fsspec.AbstractFileSystem):
    """The fetcher's view of one open binary file, whatever path it is asked for.

    The file stays the caller's: nothing here closes it.
    """

    protocol = "hwdecomp-openfile"
    cachable = False

    def __init__(self, handle):
        super().__init__()
        self.handle = handle

    def size(self, path):
        if isinstance(self.handle, pa.NativeFile):
            return self.handle.size()
        here = self.handle.tell()
        try:
            return self.handle.seek(0, io.SEEK_END)
        finally:
            self.handle.seek(here)

    def _read(self, start: int, end: int) -> bytes:
        self.handle.seek(start)
        return bytes(self.handle.read(end - start))

    def cat_file(self, path, start=None, end=None, **kwargs):
        start = 0 if start is None else start
        end = self.size(path) if end is None else end
        return self._read(start, end)

    def cat_ranges(self, paths, starts, ends, max_gap=None, on_error="return", **kwargs):
        return [self._read(s, e) for s, e in zip(starts, ends)]

    def _open(self, path, mode="rb", **kwargs):
        if mode != "rb":
            raise ValueError(f"{type(self).__name__} only reads")
        return _Borrowed(self)


class _Borrowed(io.RawIOBase):
    """A read-only window on the caller's file that leaves it open on close."""

    def __init__(self, fs: OpenFileSystem):
        self._fs = fs
        self._pos = 0
        self._size = fs.size(None)

    def readable(self):
        return True

    def seekable(self):
        return True

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self):
        return self._pos

    def readinto(self, b):
        end = min(self._size, self._pos + len(b))
        data = self._fs._read(self._pos, end) if end > self._pos else b""
        b[: len(data)] = data
        self._pos += len(data)
        return len(data)


def _is_open_file(source) -> bool:
    return isinstance(source, (pa.NativeFile, pa.Buffer)) or (
        hasattr(source, "read") and hasattr(source, "seek")
    )


def _fetch_fs(filesystem) -> fsspec.AbstractFileSystem:
    """An fsspec filesystem over the pyarrow one pyarrow discovered with."""
    if isinstance(filesystem, fsspec.AbstractFileSystem):
        return filesystem
    if isinstance(filesystem, pafs.LocalFileSystem):
        # fsspec's local filesystem is the one the fetcher reads with readinto.
        return LocalFileSystem()
    if isinstance(filesystem, pafs.PyFileSystem) and isinstance(
        getattr(filesystem.handler, "fs", None), fsspec.AbstractFileSystem
    ):
        return filesystem.handler.fs
    from fsspec.implementations.arrow import ArrowFSWrapper

    return ArrowFSWrapper(filesystem)


def _expand(paths: list[str], fs) -> list[str]:
    """Expand globs on an fsspec filesystem; a pattern matching nothing raises."""
    out = []
    for path in paths:
        if _GLOB.search(path) and not fs.exists(path):
            found = sorted(p for p in fs.glob(path) if fs.isfile(p))
            if not found:
                raise FileNotFoundError(f"no file matches {path!r}")
            out.extend(found)
        else:
            out.append(path)
    return out


def _paths(source, filesystem, storage_options):
    """(filesystem for pyarrow, path or list of paths) of a path-like source."""
    many = isinstance(source, (list, tuple))
    items = list(source) if many else [source]
    if not items:
        raise ValueError(f"read_table got an empty list; it accepts {ACCEPTED}")
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(
                f"read_table got a list holding {type(item).__name__}; a list must hold paths. "
                f"It accepts {ACCEPTED}"
            )
    strings = [os.fspath(p) for p in items]
    if filesystem is None:
        filesystem, first = url_to_fs(strings[0], **(storage_options or {}))
        strings = [first] + [filesystem._strip_protocol(p) for p in strings[1:]]
    if isinstance(filesystem, fsspec.AbstractFileSystem):
        strings = _expand(strings, filesystem)
        many = many or len(strings) > 1
    return filesystem, strings if many else strings[0]


# ParquetDataset's read options; which exist depends on the pyarrow version.
_READ_OPTIONS = (
    "pre_buffer",
    "coerce_int96_timestamp_unit",
    "thrift_string_size_limit",
    "thrift_container_size_limit",
    "schema_depth_limit",
    "page_checksum_verification",
    "arrow_extensions_enabled",
    "binary_type",
    "list_type",
)


def parquet_format() -> ds.ParquetFileFormat:
    """The file format :class:`pyarrow.parquet.ParquetDataset` reads with, at its defaults.

    The defaults are read from the installed pyarrow's signature, so that
    every pyarrow the project supports gets its own dataset's behaviour.
    """
    params = inspect.signature(pq.ParquetDataset).parameters
    return ds.ParquetFileFormat(**{k: params[k].default for k in _READ_OPTIONS if k in params})


def _pyarrow_fs(filesystem):
    if isinstance(filesystem, LocalFileSystem):
        return pafs.LocalFileSystem()
    if isinstance(filesystem, fsspec.AbstractFileSystem):
        return pafs.PyFileSystem(pafs.FSSpecHandler(filesystem))
    return filesystem


def _is_file(filesystem, path: str) -> bool:
    if isinstance(filesystem, fsspec.AbstractFileSystem):
        return filesystem.isfile(path)
    return filesystem.get_file_info(path).type == pafs.FileType.File


def resolve_source(
    source,
    filesystem=None,
    storage_options=None,
    *,
    partitioning="hive",
    schema=None,
    filters=None,
    ignore_prefixes=None,
) -> Source:
    """Find the files of ``source`` as :func:`pyarrow.parquet.read_table` would.

    One file (a path to a file, or an open file) becomes a fragment that
    pyarrow has not opened yet, so that the project's own footer checks
    see a broken file first. A directory or list is discovered by
    :class:`pyarrow.parquet.ParquetDataset`, which reads a footer to infer
    the dataset schema, as ``pyarrow.parquet.read_table`` does.

    Parameters
    ----------
    source
        See :data:`ACCEPTED`.
    filesystem : pyarrow.fs.FileSystem or fsspec.AbstractFileSystem, optional
        Without it, a URL's protocol picks an fsspec filesystem (local paths: the local one).
    storage_options : dict, optional
        For fsspec, when ``filesystem`` is not given.
    partitioning, schema, filters, ignore_prefixes
        As for :class:`pyarrow.parquet.ParquetDataset`.

    Raises
    ------
    TypeError
        ``source`` is none of the accepted kinds (the message lists them),
        or a file opened in text mode.
    FileNotFoundError
        A path, or a glob, that names nothing.
    """
    expression = None if filters is None else pq.filters_to_expression(filters)
    if isinstance(source, io.TextIOBase):
        raise TypeError(f"read_table got a file opened in text mode; it accepts {ACCEPTED}")
    if isinstance(source, (str, os.PathLike, list, tuple)):
        filesystem, where = _paths(source, filesystem, storage_options)
    elif _is_open_file(source):
        handle = pa.BufferReader(source) if isinstance(source, pa.Buffer) else source
        name = getattr(handle, "name", None)
        fragment = parquet_format().make_fragment(handle)
        return Source(
            OpenFileSystem(handle),
            (SourceFile(name if isinstance(name, str) else "<open file>", fragment),),
            schema,
            expression,
        )
    else:
        raise TypeError(f"read_table got {type(source).__name__}; it accepts {ACCEPTED}")
    if isinstance(where, str) and _is_file(filesystem, where):
        fragment = parquet_format().make_fragment(where, filesystem=_pyarrow_fs(filesystem))
        return Source(_fetch_fs(filesystem), (SourceFile(where, fragment),), schema, expression)
    dataset = pq.ParquetDataset(
        where,
        filesystem=filesystem,
        schema=schema,
        filters=filters,
        partitioning=partitioning,
        ignore_prefixes=ignore_prefixes,
    )
    files = tuple(SourceFile(f.path, f) for f in dataset.fragments)
    return Source(_fetch_fs(dataset.filesystem), files, dataset.schema, expression)
