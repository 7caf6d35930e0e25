"""An fsspec filesystem that serves one file from its in-memory image.

dask's pyarrow engine reads a piece by opening its path through the fsspec
filesystem it was given (``fs.open`` for a plain read, ``fs.info`` and
``fs.open`` through pyarrow's ``FSSpecHandler`` for a dataset fragment).
Handing it an :class:`ImageFileSystem` makes it read the uncompressed image
instead of the file, with dask's own code for filters, partitions, index and
categories; the original file is not opened again.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from fsspec import AbstractFileSystem

__all__ = ["ImageFileSystem"]


class ImageFileSystem(AbstractFileSystem):
    """``fs`` with the file at ``path`` replaced by ``image``.

    Parameters
    ----------
    fs : fsspec.AbstractFileSystem
        The filesystem dask was given; every other path goes to it.
    path : str
        The path as dask names the piece.
    image : pyarrow.Buffer
        The uncompressed Parquet file that stands for ``path``. It must stay
        valid while the filesystem is in use.
    """

    # A new instance per piece, never cached: fsspec's instance cache would
    # keep every image alive after its batch is closed.
    cachable = False

    def __init__(self, fs: AbstractFileSystem, path: str, image: pa.Buffer) -> None:
        super().__init__()
        self.fs = fs
        self.path = path
        self.image = image

    def _is_image(self, path: str) -> bool:
        # pyarrow's FSSpecHandler passes the path back as dask gave it; a
        # caller may add or drop the protocol.
        return path == self.path or self.fs._strip_protocol(path) == self.fs._strip_protocol(self.path)

    def info(self, path: str, **kwargs: Any) -> dict:
        if self._is_image(path):
            return {"name": path, "size": self.image.size, "type": "file"}
        return self.fs.info(path, **kwargs)

    def open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        """A reader over the image for ``path``; ``fs.open`` for others.

        fsspec options such as ``cache_type`` mean nothing for a buffer in
        memory and are ignored for the image.
        """
        if self._is_image(path):
            if mode != "rb":
                raise PermissionError(f"{path}: the in-memory image is read-only")
            return pa.BufferReader(self.image)
        return self.fs.open(path, mode=mode, **kwargs)
