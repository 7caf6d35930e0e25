"""Synthetic tables: a TPC-H lineitem-like one and a high-entropy one.

Both are built with vectorised numpy so that gigabytes take seconds. The
lineitem-like table has integer keys, decimals and doubles, dates,
low-cardinality strings and free text (written with dictionary encoding on,
pyarrow's default); the high-entropy table has random doubles and random
strings (written with dictionary encoding off), so that its page data is
about as large as its Arrow data and decompression weighs more.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

__all__ = ["KINDS", "make_table", "bytes_per_row"]

_WORDS = (
    "furiously carefully quickly slyly blithely ironic final regular express pending "
    "special unusual bold even silent idle busy ruthless fluffy daring deposits "
    "requests accounts packages theodolites instructions pinto beans foxes ideas "
    "dependencies excuses platelets asymptotes courts dolphins multipliers sauternes "
    "warthogs frets dinos attainments somas tithes braids hockey players sheaves "
    "across about above after against along among around at before behind beneath "
    "nag sleep wake cajole haggle use boost detect integrate affix engage thrash"
).split()


@functools.lru_cache(maxsize=1)
def _text(seed: int = 7, nbytes: int = 8 << 20) -> np.ndarray:
    """A buffer of random words that comments are sliced from."""
    rng = np.random.default_rng(seed)
    words = rng.choice(np.array(_WORDS), size=nbytes // 6)
    return np.frombuffer(" ".join(words.tolist()).encode(), dtype=np.uint8)[:nbytes]


def _strings_from(source: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> pa.Array:
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    total = int(offsets[-1])
    idx = np.repeat(starts - offsets[:-1], lens) + np.arange(total, dtype=np.int64)
    data = source[idx]
    if total < 2**31:
        return pa.StringArray.from_buffers(len(lens), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data))
    return pa.LargeStringArray.from_buffers(len(lens), pa.py_buffer(offsets), pa.py_buffer(data))


def _random_strings(rng, n: int, lo: int, hi: int, alphabet: bytes) -> pa.Array:
    lens = rng.integers(lo, hi + 1, n)
    total = int(lens.sum())
    chars = np.frombuffer(alphabet, dtype=np.uint8)[rng.integers(0, len(alphabet), total)]
    offsets = np.zeros(n, dtype=np.int64)
    np.cumsum(lens[:-1], out=offsets[1:])
    return _strings_from(chars, offsets, lens)


def _choice(rng, n: int, values: list[str]) -> pa.Array:
    idx = pa.array(rng.integers(0, len(values), n).astype(np.int32))
    return pa.DictionaryArray.from_arrays(idx, pa.array(values)).dictionary_decode()


def _decimal(unscaled: np.ndarray, precision: int = 15, scale: int = 2) -> pa.Array:
    # decimal128 is two little-endian int64 words; values here are >= 0.
    words = np.zeros((len(unscaled), 2), dtype=np.int64)
    words[:, 0] = unscaled
    return pa.Array.from_buffers(pa.decimal128(precision, scale), len(unscaled), [None, pa.py_buffer(words)])


def lineitem(n: int, seed: int, first_row: int = 0) -> pa.Table:
    """``n`` rows shaped like TPC-H ``lineitem``."""
    rng = np.random.default_rng(seed)
    row = np.arange(first_row, first_row + n, dtype=np.int64)
    quantity = rng.integers(1, 51, n)
    price = np.round(rng.uniform(900.0, 2100.0, n), 2)
    ship = 8035 + rng.integers(0, 2526, n)
    text = _text()
    clens = rng.integers(10, 44, n)
    return pa.table(
        {
            "l_orderkey": row // 4 + 1,
            "l_partkey": rng.integers(1, 2_000_001, n),
            "l_suppkey": rng.integers(1, 100_001, n),
            "l_linenumber": (row % 4 + 1).astype(np.int32),
            "l_quantity": _decimal(quantity * 100),
            "l_extendedprice": np.round(quantity * price, 2),
            "l_discount": _decimal(rng.integers(0, 11, n)),
            "l_tax": _decimal(rng.integers(0, 9, n)),
            "l_returnflag": _choice(rng, n, ["A", "N", "R"]),
            "l_linestatus": _choice(rng, n, ["O", "F"]),
            "l_shipdate": pa.array(ship.astype(np.int32), pa.date32()),
            "l_commitdate": pa.array((ship + rng.integers(-60, 61, n)).astype(np.int32), pa.date32()),
            "l_receiptdate": pa.array((ship + rng.integers(1, 31, n)).astype(np.int32), pa.date32()),
            "l_shipinstruct": _choice(rng, n, ["DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN"]),
            "l_shipmode": _choice(rng, n, ["REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB"]),
            "l_comment": _strings_from(text, rng.integers(0, len(text) - 44, n), clens),
        }
    )


_B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_HEX = b"0123456789abcdef"


def high_entropy(n: int, seed: int, first_row: int = 0) -> pa.Table:
    """``n`` rows of random doubles and random strings."""
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "id": rng.integers(0, 2**62, n),
            "x0": rng.random(n),
            "x1": rng.standard_normal(n),
            "x2": rng.random(n) * 1e6,
            "x3": rng.standard_normal(n) * 1e-3,
            "token": _random_strings(rng, n, 8, 40, _B64),
            "digest": _random_strings(rng, n, 16, 64, _HEX),
        }
    )


# name -> (builder, use_dictionary)
KINDS = {
    "lineitem": (lineitem, True),
    "entropy": (high_entropy, False),
}


def make_table(kind: str, n: int, seed: int, first_row: int = 0) -> pa.Table:
    """Build ``n`` rows of table ``kind`` (a key of :data:`KINDS`).

    Raises
    ------
    KeyError
        An unknown kind.
    """
    return KINDS[kind][0](n, seed, first_row)


def bytes_per_row(kind: str) -> float:
    """Arrow bytes per row of ``kind``, measured on a sample."""
    sample = make_table(kind, 20_000, seed=0)
    return sample.nbytes / sample.num_rows
