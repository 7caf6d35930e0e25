"""The Dask integration: the Parquet engine, the worker plugin, metrics."""
