"""Fetching, planning and batching reads; ``read_table``."""
