"""Field ids of the Parquet Thrift structs this reader touches.

The names are those of ``parquet.thrift``; the values are compact-protocol
field ids. Fields not listed here are carried through untouched.
"""

from __future__ import annotations

from enum import IntEnum


class FileMetaData:
    version = 1
    schema = 2
    num_rows = 3
    row_groups = 4
    key_value_metadata = 5
    created_by = 6
    column_orders = 7
    encryption_algorithm = 8
    footer_signing_key_metadata = 9


class SchemaElement:
    type = 1
    type_length = 2
    repetition_type = 3
    name = 4
    num_children = 5


class RowGroup:
    columns = 1
    total_byte_size = 2
    num_rows = 3
    sorting_columns = 4
    file_offset = 5
    total_compressed_size = 6
    ordinal = 7


class ColumnChunk:
    file_path = 1
    file_offset = 2
    meta_data = 3
    offset_index_offset = 4
    offset_index_length = 5
    column_index_offset = 6
    column_index_length = 7
    crypto_metadata = 8
    encrypted_column_metadata = 9


class ColumnMetaData:
    type = 1
    encodings = 2
    path_in_schema = 3
    codec = 4
    num_values = 5
    total_uncompressed_size = 6
    total_compressed_size = 7
    key_value_metadata = 8
    data_page_offset = 9
    index_page_offset = 10
    dictionary_page_offset = 11
    statistics = 12
    encoding_stats = 13
    bloom_filter_offset = 14
    bloom_filter_length = 15


class PageHeader:
    type = 1
    uncompressed_page_size = 2
    compressed_page_size = 3
    crc = 4
    data_page_header = 5
    index_page_header = 6
    dictionary_page_header = 7
    data_page_header_v2 = 8


class DataPageHeader:
    num_values = 1


class DictionaryPageHeader:
    num_values = 1


class DataPageHeaderV2:
    num_values = 1
    num_nulls = 2
    num_rows = 3
    encoding = 4
    definition_levels_byte_length = 5
    repetition_levels_byte_length = 6
    is_compressed = 7


class PageType(IntEnum):
    DATA_PAGE = 0
    INDEX_PAGE = 1
    DICTIONARY_PAGE = 2
    DATA_PAGE_V2 = 3


class Physical(IntEnum):
    """Parquet physical types (the format's numbers)."""

    BOOLEAN = 0
    INT32 = 1
    INT64 = 2
    INT96 = 3
    FLOAT = 4
    DOUBLE = 5
    BYTE_ARRAY = 6
    FIXED_LEN_BYTE_ARRAY = 7


class Encoding(IntEnum):
    """Parquet encodings (the format's numbers)."""

    PLAIN = 0
    PLAIN_DICTIONARY = 2
    RLE = 3
    BIT_PACKED = 4
    DELTA_BINARY_PACKED = 5
    DELTA_LENGTH_BYTE_ARRAY = 6
    DELTA_BYTE_ARRAY = 7
    RLE_DICTIONARY = 8
    BYTE_STREAM_SPLIT = 9


class Codec(IntEnum):
    """``CompressionCodec`` of ``parquet.thrift``."""

    UNCOMPRESSED = 0
    SNAPPY = 1
    GZIP = 2
    LZO = 3
    BROTLI = 4
    LZ4 = 5
    ZSTD = 6
    LZ4_RAW = 7


# codec id -> its name in parquet.thrift ("SNAPPY"), for messages and reports
CODEC_NAMES = {c.value: c.name for c in Codec}
