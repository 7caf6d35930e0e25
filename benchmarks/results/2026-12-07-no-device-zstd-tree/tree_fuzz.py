"""Hold format/zstd_huffman.huffman_tree to libzstd's own HUF_readStats (not in CI).

Compiles libzstd's lib/common (entropy_common.c, fse_decompress.c,
error_private.c, debug.c) with a small C harness into a shared library,
then feeds both the same tree descriptions and compares their verdicts,
and where both accept, the size, the number of symbols, the table log and
all 256 weights; of an FSE-coded description also what the weights
decoder (FSE_decompress_wksp with HUF_readStats' workspace) returns,
whatever HUF_readStats then makes of it. The descriptions: those libzstd writes (pyarrow's
Codec('zstd') at several levels on text, integers, low-entropy and random
data), the same with bits flipped, bytes replaced, header bytes changed
and the end moved, and random bytes behind a random header, and direct descriptions of random
complete codes (some with one weight changed), and valid FSE tables of
assorted accuracy logs and alphabets (FSE_writeNCount's bits) before
random bitstreams. The numba
code runs with bounds checks on (in a cache of its own), so a read past
the description fails the run.

Usage: python tree_fuzz.py ZSTD_LIB_DIR [--per-seed N] [--seeds 1 2 3]

ZSTD_LIB_DIR is a facebook/zstd checkout's ``lib`` folder (1.5.x); the
source is not part of this repository.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["NUMBA_BOUNDSCHECK"] = "1"
os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="tree-fuzz-numba-")
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from dask_hwdecomp.format.zstd_huffman import _fse_weights, huffman_tree  # noqa: E402

HARNESS = r"""
#include <stddef.h>
#include <string.h>
#include "huf.h"
#include "error_private.h"
long tree(unsigned char* weights, const void* src, size_t size, unsigned* symbols, unsigned* table_log) {
    unsigned rank[HUF_TABLELOG_MAX + 1];
    size_t r;
    memset(weights, 0, 256);
    r = HUF_readStats(weights, HUF_SYMBOLVALUE_MAX + 1, rank, symbols, table_log, src, size);
    return ERR_isError(r) ? -1 : (long)r;
}
/* The FSE weights decoder alone, with HUF_readStats' workspace: weights decoded or -1. */
long fse_weights(unsigned char* weights, const void* src, size_t size) {
    unsigned wksp[HUF_READ_STATS_WORKSPACE_SIZE_U32];
    size_t r;
    memset(weights, 0, 256);
    r = FSE_decompress_wksp_bmi2(weights, HUF_SYMBOLVALUE_MAX, src, size, 6, wksp, sizeof(wksp), 0);
    return ERR_isError(r) ? -1 : (long)r;
}
"""


def build(lib_dir: Path, out: Path) -> ctypes.CDLL:
    """Compile libzstd's HUF_readStats with the harness into ``out`` and load it."""
    common = lib_dir / "common"
    c = out.with_suffix(".c")
    c.write_text(HARNESS)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-DDYNAMIC_BMI2=0", f"-I{common}", "-o", str(out), str(c)]
                   + [str(common / f) for f in ("entropy_common.c", "fse_decompress.c", "error_private.c",
                                                "debug.c")], check=True)
    lib = ctypes.CDLL(str(out))
    lib.tree.restype = ctypes.c_long
    lib.tree.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint),
                         ctypes.POINTER(ctypes.c_uint)]
    lib.fse_weights.restype = ctypes.c_long
    lib.fse_weights.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    return lib


def _frame_blocks(fr: bytes):
    """(literals section start, compressed literals end) of each compressed block with a tree description."""
    fhd = fr[4]
    single = (fhd >> 5) & 1
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + ((1 if single else 0), 2, 4, 8)[fhd >> 6]
    while pos + 3 <= len(fr):
        bh = int.from_bytes(fr[pos:pos + 3], "little")
        btype, bsize = (bh >> 1) & 3, bh >> 3
        p = pos + 3
        if btype == 2 and fr[p] & 3 == 2:
            lhl = (fr[p] >> 2) & 3
            lhc = int.from_bytes(fr[p:p + 5], "little")
            lh, litc = ((3, (lhc >> 14) & 0x3FF), (3, (lhc >> 14) & 0x3FF), (4, (lhc >> 18) & 0x3FFF),
                        (5, (lhc >> 22) & 0x3FFFF))[lhl]
            yield p + lh, p + lh + litc
        pos = p + (1 if btype == 1 else bsize)
        if bh & 1:
            break


def real_descriptions() -> list[bytes]:
    """The tree descriptions (to the end of their compressed literals) libzstd writes for assorted data."""
    rng = np.random.default_rng(0)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"epsilon", b"zeta", b"eta", b"theta", b"iota", b"kappa"]
    datas = [b" ".join(str(x).encode() for x in rng.integers(0, 10 ** k, 30000)) for k in (2, 4, 9)]
    datas += [rng.integers(0, k, 200000).astype(np.uint8).tobytes() for k in (3, 17, 50, 120, 256)]
    datas += [b" ".join(rng.choice(words, 40000)), bytes(rng.geometric(0.3, 100000).clip(0, 255).astype(np.uint8)),
              bytes(rng.geometric(0.05, 100000).clip(0, 255).astype(np.uint8)),
              np.sort(rng.integers(0, 1 << 30, 50000)).astype(np.int64).tobytes(),
              rng.normal(size=30000).astype(np.float32).tobytes()]
    out = []
    for d in datas:
        for level in (-3, 1, 3, 9, 19):
            fr = pa.Codec("zstd", compression_level=level).compress(d).to_pybytes()
            for start, end in _frame_blocks(fr):
                out.append(fr[start:end])
    return out


def mutate(r: random.Random, d: bytes) -> bytes:
    b = bytearray(d)
    tree = 1 + (b[0] if b[0] < 128 else (b[0] - 127 + 1) // 2)
    span = max(1, min(tree, len(b)))
    kind = r.randrange(6)
    if kind == 0:  # flip bits in the description
        for _ in range(r.randint(1, 3)):
            i = r.randrange(span)
            b[i] ^= 1 << r.randrange(8)
    elif kind == 1:  # replace a byte
        b[r.randrange(span)] = r.randrange(256)
    elif kind == 2:  # another header byte
        b[0] = r.randrange(256) if r.random() < 0.3 else max(0, min(255, b[0] + r.randint(-4, 4)))
    elif kind == 3:  # the end moves: into the description or just past it
        b = b[:max(1, min(len(b), tree + r.randint(-8, 2)))]
    elif kind == 4:  # a run of bytes near the end of the description
        i = r.randrange(span)
        for j in range(i, min(span, i + r.randint(1, 4))):
            b[j] = r.randrange(256)
    else:  # the description alone, end exactly at its last byte, with one flip
        b = b[:tree]
        if len(b):
            b[r.randrange(len(b))] ^= 1 << r.randrange(8)
    return bytes(b) or b"\x00"


def tree_weights(r: random.Random) -> list[int]:
    """The weights of a random complete prefix code (leaves split at random, depth at most 11), zeros between."""
    depths = [0]
    for _ in range(r.randint(1, 120)):
        i = r.randrange(len(depths))
        if depths[i] < 11:
            d = depths.pop(i) + 1
            depths += [d, d]
    r.shuffle(depths)
    top = max(depths)
    out: list[int] = []
    for d in depths:
        out += [0] * (r.randrange(4) == 0) * r.randint(1, 3)
        out.append(top + 1 - d)
    return out


def direct_description(r: random.Random) -> bytes:
    """A direct (4-bit) description of a random code's weights, the last implied, sometimes with one weight off."""
    ws = tree_weights(r)[:129]
    ws = ws[:-1] if len(ws) > 1 else [r.randrange(13)]
    if r.random() < 0.3:
        ws[r.randrange(len(ws))] = r.randrange(16)
    nib = ws + [r.randrange(16)] * (len(ws) & 1)
    return bytes([127 + len(ws)]) + bytes((nib[i] << 4) | nib[i + 1] for i in range(0, len(nib), 2))


def write_ncount(norm: list[int], table_log: int) -> bytes:
    """FSE_writeNCount's bits for the normalized counts ``norm`` (a valid distribution of 2**table_log)."""
    acc, nbits = table_log - 5, 4
    remaining, threshold, nb = (1 << table_log) + 1, 1 << table_log, table_log + 1
    symbol, previous0 = 0, False
    while symbol < len(norm) and remaining > 1:
        if previous0:
            start = symbol
            while symbol < len(norm) and not norm[symbol]:
                symbol += 1
            if symbol == len(norm):
                break
            while symbol >= start + 3:
                start += 3
                acc |= 3 << nbits
                nbits += 2
            acc |= (symbol - start) << nbits
            nbits += 2
        count = norm[symbol]
        symbol += 1
        mx = 2 * threshold - 1 - remaining
        remaining -= abs(count)
        count += 1
        if count >= threshold:
            count += mx
        acc |= count << nbits
        nbits += nb - (count < mx)
        previous0 = count == 1
        while remaining < threshold:
            nb -= 1
            threshold >>= 1
    return acc.to_bytes((nbits + 7) // 8, "little")


def fse_description(r: random.Random) -> bytes:
    """A random but valid weights table (accuracy log 5 or 6, sometimes 4 or 7; up to 100 symbols, some of
    probability -1 or 0) and a random bitstream behind it: the table's limits, both look-ups, both ends."""
    table_log = r.choice((5, 5, 6, 6, 6, 4, 7))
    size = 1 << table_log
    nsym = r.randint(2, min(100, size))
    norm = [0] * nsym
    left = size
    for i in range(nsym):
        if r.random() < 0.25 and i < nsym - 1:
            continue
        if left <= 0:
            break
        if i == nsym - 1:
            norm[i] = left if left > 1 or r.random() < 0.5 else -1
            left = 0
        elif r.random() < 0.2:
            norm[i] = -1
            left -= 1
        else:
            norm[i] = r.randint(1, max(1, left // 2))
            left -= norm[i]
    if left > 0:
        norm[r.randrange(nsym)] += left if norm[0] >= 0 else 0
    if sum(abs(c) for c in norm) != size or table_log < 5:
        table_log = max(table_log, 5)
        norm = [1 << (table_log - 1), 1 << (table_log - 1)] + [0] * r.randint(0, 3)
    if r.random() < 0.3:  # a long run of zero probabilities (FSE_readNCount's repeat codes, 36 at a time)
        at = r.randrange(1, len(norm))
        norm[at:at] = [0] * r.randint(30, 90)
    head = write_ncount(norm, table_log)
    stream = bytes(r.randrange(256) for _ in range(r.choice((r.randint(0, 3), r.randint(0, 40)))))
    if stream and r.random() < 0.9 and stream[-1] == 0:
        stream = stream[:-1] + b"\x01"
    body = head + stream
    if len(body) > 127:
        body = body[:127]
    return bytes([len(body) if r.random() < 0.9 else r.randrange(128)]) + body


def random_description(r: random.Random) -> bytes:
    if r.random() < 0.4:
        return direct_description(r)
    if r.random() < 0.5:
        return fse_description(r)
    if r.random() < 0.5:
        head = r.randrange(128)
    else:
        head = r.randrange(128, 256)
    n = 1 + (head if head < 128 else (head - 127 + 1) // 2)
    body = bytes(r.randrange(256) for _ in range(max(0, n - 1 + r.randint(-3, 8))))
    return bytes([head]) + body


def compare(lib, d: bytes, w: np.ndarray, cw) -> tuple[bool, bool, bool]:
    """(verdicts agree, libzstd accepts, all results agree).

    An FSE-coded description's weights decoder is compared on its own
    too (weights decoded or refused, and their values), whatever
    HUF_readStats makes of them: a difference there counts as differing
    results even where both refuse the tree.
    """
    fse_same = True
    if d[0] < 128 and d[0] + 1 <= len(d):
        src = np.frombuffer(d, np.uint8)
        n = _fse_weights(src, 1, d[0], w, 255)
        cn = lib.fse_weights(cw, d[1:], d[0])
        fse_same = n == cn and (n < 0 or bytes(w[:n]) == cw.raw[:n])
    sym, tl = ctypes.c_uint(0), ctypes.c_uint(0)
    c = lib.tree(cw, d, len(d), ctypes.byref(sym), ctypes.byref(tl))
    size, symbols, table_log = huffman_tree(np.frombuffer(d, np.uint8), 0, len(d), w)
    if (c < 0) != (size < 0):
        return False, c >= 0, False
    if c < 0:
        return True, False, fse_same
    same = fse_same and size == c and symbols == sym.value and table_log == tl.value \
        and bytes(w[:symbols]) == cw.raw[:symbols] and not w[symbols:].any()
    return True, True, same


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("zstd_lib", type=Path)
    ap.add_argument("--per-seed", type=int, default=40000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    a = ap.parse_args()
    lib = build(a.zstd_lib, Path(tempfile.mkdtemp(prefix="tree-fuzz-")) / "libhuftree.so")
    reals = real_descriptions()
    w = np.zeros(256, np.uint8)
    cw = ctypes.create_string_buffer(256)
    fse = sum(d[0] < 128 for d in reals)
    print(f"{len(reals)} descriptions libzstd wrote ({fse} FSE-coded, {len(reals) - fse} direct)")
    bad = [d for d in reals if compare(lib, d, w, cw) != (True, True, True)]
    print(f"  differing: {len(bad)}")
    total_diff = len(bad)
    for seed in a.seeds:
        r = random.Random(seed)
        t = time.perf_counter()
        counts = {"mutated": [0, 0, 0, 0], "random": [0, 0, 0, 0]}  # cases, libzstd accepts, verdicts differ, results differ
        for i in range(a.per_seed):
            kind = "random" if i % 4 == 3 else "mutated"
            d = random_description(r) if kind == "random" else mutate(r, r.choice(reals))
            verdict, accepted, same = compare(lib, d, w, cw)
            c = counts[kind]
            c[0] += 1
            c[1] += accepted
            c[2] += not verdict
            c[3] += verdict and not same
            if not (verdict and same):
                total_diff += 1
                if total_diff <= 10:
                    print("  DIFF", kind, d.hex())
        for kind, (n, acc, dv, dr) in counts.items():
            print(f"seed {seed} {kind}: {n} cases, libzstd accepts {acc}, verdicts differ {dv}, "
                  f"results differ (weights decoded, or size, symbols, table log and weights where accepted) {dr}")
        print(f"  ({time.perf_counter() - t:.1f} s)")
    print(f"total differing: {total_diff}")
    sys.exit(1 if total_diff else 0)


if __name__ == "__main__":
    main()
