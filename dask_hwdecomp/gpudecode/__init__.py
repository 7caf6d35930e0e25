"""Decoding Parquet pages into Arrow buffers on the GPU.

``tables`` is the contract every part shares: the plan's record layouts
(chunks and pages), the output kinds and the per-page error codes. The
planner (host), the kernels and their runner (numba-cuda, in the GPU
service) and the assembly of pyarrow arrays (host) meet there.
"""
