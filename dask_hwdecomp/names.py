"""Column names as text, whatever bytes a file holds.

Parquet stores names (schema elements, ``path_in_schema``) as bytes that
ought to be UTF-8 and need not be. pyarrow reads such a file and keeps the
bytes, but its Python accessors (``Field.name``, ``Schema.names``,
``ColumnChunkMetaData.path_in_schema``) raise ``UnicodeDecodeError`` on
them, while what it prints (``str(schema)``, its error messages) decodes
them with replacement characters. Reports, errors and plans name columns
through these functions: they never fail on a name, and they name it as
pyarrow prints it.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["decode_name", "field_name", "field_names", "chunk_path"]


def decode_name(raw: bytes) -> str:
    """A name's bytes as pyarrow prints them: UTF-8, each invalid byte a U+FFFD.

    The result always encodes back to UTF-8 (no surrogates), so it travels
    in messages, JSON and Arrow metadata like any name.
    """
    return bytes(raw).decode("utf-8", "replace")


def field_name(field) -> str:
    """The name of a ``pyarrow.Field`` (see :func:`decode_name`)."""
    return _text(lambda: field.name)


def field_names(schema) -> list[str]:
    """The names of a ``pyarrow.Schema``'s top-level fields, in order (see :func:`decode_name`)."""
    return [field_name(f) for f in schema]


def chunk_path(chunk) -> str:
    """The dotted ``path_in_schema`` of a ``pyarrow.parquet.ColumnChunkMetaData`` (see :func:`decode_name`)."""
    return _text(lambda: chunk.path_in_schema)


def _text(get: Callable[[], str]) -> str:
    try:
        return get()
    except UnicodeDecodeError as exc:
        # pyarrow decodes the C++ string strictly, and the exception holds
        # all of its bytes: the name itself, not a part of it.
        return decode_name(exc.object)
