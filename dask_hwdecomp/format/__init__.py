"""The Parquet format layer: Thrift, footer, pages, codecs, layout. No GPU here."""
