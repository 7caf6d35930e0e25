"""ctypes bindings of nvCOMP's batched decompression and CRC-32 C API (nvCOMP 6).

The library is ``libnvcomp.so.6`` of the ``nvidia-libnvcomp-cu13`` wheel,
found through the installed package's path. Only what the backends use is
bound: per format ``nvcompBatched<Fmt>DecompressGetTempSize``,
``...DecompressGetRequiredAlignments`` and ``...DecompressAsync``; and
``nvcompBatchedCRC32GetHeuristicConf`` with ``nvcompBatchedCRC32Async``
(``nvcomp/crc32.h``; no temp memory) for the checksums of a batch. Every
call's status goes through :func:`~dask_hwdecomp.gpu.errors.check_nvcomp`.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
from pathlib import Path
from typing import NamedTuple

from .errors import check_nvcomp

__all__ = ["NvcompLib", "Alignments", "find_library", "FORMATS"]

FORMATS = ("Snappy", "Deflate", "LZ4", "Zstd")
_SONAME = "libnvcomp.so.6"

_p = ctypes.c_void_p
_sz = ctypes.c_size_t


class _DecompressOpts(ctypes.Structure):
    # Every format's decompress options: the backend enum first, then zeros
    # (64 bytes; all-zero is each format's documented default).
    _fields_ = [("backend", ctypes.c_int), ("reserved", ctypes.c_char * 60)]


class _CRC32Spec(ctypes.Structure):
    # nvcompCRC32Spec_t (32 bytes).
    _fields_ = [("poly", ctypes.c_uint32), ("init", ctypes.c_uint32), ("ref_in", ctypes.c_bool),
                ("ref_out", ctypes.c_bool), ("xorout", ctypes.c_uint32), ("reserved", ctypes.c_char * 16)]


class _CRC32KernelConf(ctypes.Structure):
    # nvcompCRC32KernelConf_t (32 bytes).
    _fields_ = [("kernel_kind", ctypes.c_int), ("bytes_per_read", ctypes.c_int32),
                ("blocks_per_msg", ctypes.c_int32), ("reserved", ctypes.c_char * 20)]


class _CRC32Opts(ctypes.Structure):
    # nvcompBatchedCRC32Opts_t (128 bytes), passed by value.
    _fields_ = [("spec", _CRC32Spec), ("kernel_conf", _CRC32KernelConf), ("reserved", ctypes.c_char * 64)]


# The header's nvcompCRC32 preset: CRC-32/PKZIP, zlib's, of gzip trailers and Parquet pages.
_PKZIP = dict(poly=0x04C11DB7, init=0xFFFFFFFF, ref_in=True, ref_out=True, xorout=0xFFFFFFFF)
_ONLY_SEGMENT = 0  # nvcompCRC32OnlySegment


class _Alignments(ctypes.Structure):
    _fields_ = [("input", _sz), ("output", _sz), ("temp", _sz)]


class Alignments(NamedTuple):
    """The byte alignments a format's decompression requires."""

    input: int
    output: int
    temp: int


def find_library() -> Path | None:
    """Path of ``libnvcomp.so.6`` in the installed wheel, or None.

    ``HWDECOMP_NVCOMP_LIB`` overrides the search.
    """
    env = os.environ.get("HWDECOMP_NVCOMP_LIB")
    if env:
        return Path(env) if Path(env).is_file() else None
    try:
        spec = importlib.util.find_spec("nvidia.libnvcomp")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        for sub in ("lib64", "lib"):
            path = Path(root) / sub / _SONAME
            if path.is_file():
                return path
    return None


class NvcompLib:
    """The loaded library with typed entry points.

    Parameters
    ----------
    path : Path
        Location of ``libnvcomp.so.6``.

    Raises
    ------
    OSError
        The library cannot be loaded.
    NvcompError
        A query of the library failed.
    """

    def __init__(self, path: Path):
        self.path = path
        self._lib = ctypes.CDLL(str(path))
        self._temp = {}
        self._align = {}
        self._run = {}
        for fmt in FORMATS:
            f = getattr(self._lib, f"nvcompBatched{fmt}DecompressGetTempSize")
            f.argtypes = [_sz, _sz, _DecompressOpts, ctypes.POINTER(_sz), _sz, _p]
            f.restype = ctypes.c_int
            self._temp[fmt] = f
            f = getattr(self._lib, f"nvcompBatched{fmt}DecompressGetRequiredAlignments")
            f.argtypes = [_DecompressOpts, ctypes.POINTER(_Alignments)]
            f.restype = ctypes.c_int
            self._align[fmt] = f
            f = getattr(self._lib, f"nvcompBatched{fmt}DecompressAsync")
            f.argtypes = [_p, _p, _p, _p, _sz, _p, _sz, _p, _DecompressOpts, _p, _p]
            f.restype = ctypes.c_int
            self._run[fmt] = f
        self._opts = _DecompressOpts()  # NVCOMP_DECOMPRESS_BACKEND_DEFAULT
        f = self._lib.nvcompBatchedCRC32GetHeuristicConf
        f.argtypes = [_p, _sz, ctypes.POINTER(_CRC32KernelConf), _sz, _p]
        f.restype = ctypes.c_int
        self._crc_conf = f
        f = self._lib.nvcompBatchedCRC32Async
        f.argtypes = [_p, _p, _sz, _p, _CRC32Opts, ctypes.c_int, _p, _p]
        f.restype = ctypes.c_int
        self._crc_run = f
        self._crc_confs: dict[tuple[int, int], _CRC32KernelConf] = {}

    def alignments(self, fmt: str) -> Alignments:
        """The input, output and temp-space alignments ``fmt`` requires.

        Raises
        ------
        NvcompError
        """
        a = _Alignments()
        check_nvcomp(self._align[fmt](self._opts, ctypes.byref(a)), f"querying {fmt} alignments")
        return Alignments(a.input, a.output, a.temp)

    def temp_bytes(self, fmt: str, chunks: int, max_chunk: int, total: int, stream: int) -> int:
        """Device temp bytes a batch of ``chunks`` needs (host-only query).

        Raises
        ------
        NvcompError
        """
        out = _sz(0)
        status = self._temp[fmt](chunks, max_chunk, self._opts, ctypes.byref(out), total, stream)
        check_nvcomp(status, f"sizing the temp buffer of {chunks} {fmt} chunks")
        return out.value

    def decompress(self, fmt: str, *, src_ptrs: int, src_sizes: int, dst_caps: int, dst_actual: int,
                   count: int, temp: int, temp_bytes: int, dst_ptrs: int, statuses: int, stream: int) -> None:
        """Queue ``nvcompBatched<fmt>DecompressAsync`` on ``stream`` (device arrays).

        Raises
        ------
        NvcompError
            The launch failed (per-chunk results are in ``statuses``).
        """
        status = self._run[fmt](
            src_ptrs, src_sizes, dst_caps, dst_actual, count, temp, temp_bytes, dst_ptrs,
            self._opts, statuses, stream,
        )
        check_nvcomp(status, f"launching {count} {fmt} decompressions")

    def _crc_kernel(self, count: int, max_bytes: int) -> _CRC32KernelConf:
        # The heuristic is host-only when given the largest chunk; batches of
        # similar shape reuse its answer (keys rounded to powers of two).
        key = (count.bit_length(), max_bytes.bit_length())
        conf = self._crc_confs.get(key)
        if conf is None:
            conf = _CRC32KernelConf()
            status = self._crc_conf(None, 1 << key[0], ctypes.byref(conf), 1 << key[1], None)
            check_nvcomp(status, f"choosing a CRC-32 kernel for {count} chunks of up to {max_bytes} bytes")
            self._crc_confs[key] = conf
        return conf

    def crc32_batch(self, ptrs: int, sizes: int, count: int, out: int, max_bytes: int, stream) -> None:
        """Queue the CRC-32/PKZIP of ``count`` device chunks on ``stream``.

        Parameters
        ----------
        ptrs, sizes : int
            Device arrays of ``count`` u64 chunk pointers and sizes.
        out : int
            Device array of ``count`` u32 results.
        max_bytes : int
            The largest chunk (chooses the kernel).
        stream : Stream

        Raises
        ------
        NvcompError
            The launch failed.
        """
        opts = _CRC32Opts()
        for name, value in _PKZIP.items():
            setattr(opts.spec, name, value)
        opts.kernel_conf = self._crc_kernel(count, max_bytes)
        status = self._crc_run(ptrs, sizes, count, out, opts, _ONLY_SEGMENT, None, stream.handle)
        check_nvcomp(status, f"launching {count} CRC-32 computations")
