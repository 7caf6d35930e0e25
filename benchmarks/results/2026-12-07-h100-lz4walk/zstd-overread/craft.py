"""Craft Zstd frames with the property of frame 1137: a 4-stream Huffman literals section one of whose
streams is over-read (its symbols need more bits than the stream holds), which libzstd's fast Huffman
path decodes from the bytes below the stream (the previous stream's tail) without an error, and a
decoder that reads zeros past a stream's start decodes to other literals.

How: compress data with libzstd (pyarrow), then in the first compressed block whose literals are
4-stream Huffman, delete the FIRST byte of stream k (the last 8 bits the backward stream reads) and
fix the sizes (jump table entry k for k <= 3, the literals header's compressed size, the block
header's size). Also controls: the untouched frame, and 'under-read' variants (a zero byte inserted
at a stream's start: 8 bits left over, which libzstd's fast path ignores too, and so should a
zero-filling decoder: both give the original output).

Writes crafted/NAME.zst with crafted/manifest.json: per frame, libzstd's verdict and output SHA-256,
the zero-fill model's and the memory model's outputs, the stream bits left (RFC 8878 4.2.2 wants 0),
and the first output byte where the zero-fill model differs from libzstd.

Usage: python craft.py [--out crafted]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import struct
from pathlib import Path

import pyarrow as pa

from zstd_trace import Decoder


def sha(b):
    return hashlib.sha256(b).hexdigest()[:16]


def first_block_literals(frame: bytes):
    """Locate the first compressed block with 4-stream Huffman literals: dict of positions, or None."""
    fhd = frame[4]
    single, did, fcs_flag = (fhd >> 5) & 1, fhd & 3, fhd >> 6
    p = 5 + (0 if single else 1) + [0, 1, 2, 4][did] + [1 if single else 0, 2, 4, 8][fcs_flag]
    while True:
        bh = int.from_bytes(frame[p:p + 3], "little")
        last, btype, bsize = bh & 1, (bh >> 1) & 3, bh >> 3
        if btype == 2:
            q = p + 3
            b0 = frame[q]
            ltype, sf = b0 & 3, (b0 >> 2) & 3
            if ltype == 2 and sf != 0:
                h = int.from_bytes(frame[q:q + 5], "little")
                if sf == 1:
                    hsize, regen, csize, cshift, cbits = 3, (h >> 4) & 0x3FF, (h >> 14) & 0x3FF, 14, 10
                elif sf == 2:
                    hsize, regen, csize, cshift, cbits = 4, (h >> 4) & 0x3FFF, (h >> 18) & 0x3FFF, 18, 14
                else:
                    hsize, regen, csize, cshift, cbits = 5, (h >> 4) & 0x3FFFF, (h >> 22) & 0x3FFFF, 22, 18
                # tree description size
                hb = frame[q + hsize]
                tree = 1 + (hb if hb < 128 else ((hb - 127) + 1) // 2)
                jt = q + hsize + tree
                sizes = [int.from_bytes(frame[jt + 2 * i:jt + 2 * i + 2], "little") for i in range(3)]
                send = q + hsize + csize
                sizes.append(send - jt - 6 - sum(sizes))
                starts = [jt + 6]
                for s in sizes[:3]:
                    starts.append(starts[-1] + s)
                return dict(block=p, bsize=bsize, lit=q, hsize=hsize, regen=regen, csize=csize, cshift=cshift,
                            cbits=cbits, jt=jt, sizes=sizes, starts=starts, send=send)
        p += 3 + (1 if btype == 1 else bsize)
        if last:
            return None


def resize(frame: bytes, L: dict, k: int, delta: int, at: int, insert: bytes = b"") -> bytes:
    """Remove (delta<0) or insert bytes at ``at`` inside stream k, fixing the sizes."""
    f = bytearray(frame)
    if delta < 0:
        del f[at:at - delta]
    else:
        f[at:at] = insert
    # jump table entry for streams 1..3
    if k < 3:
        pos = L["jt"] + 2 * k
        f[pos:pos + 2] = (L["sizes"][k] + delta).to_bytes(2, "little")
    # literals header compressed size
    q, hsize = L["lit"], L["hsize"]
    h = int.from_bytes(f[q:q + hsize], "little")
    mask = ((1 << L["cbits"]) - 1) << L["cshift"]
    h = (h & ~mask) | ((L["csize"] + delta) << L["cshift"])
    f[q:q + hsize] = h.to_bytes(hsize, "little")
    # block header size
    b = L["block"]
    bh = int.from_bytes(f[b:b + 3], "little")
    bh = (bh & 7) | ((L["bsize"] + delta) << 3)
    f[b:b + 3] = bh.to_bytes(3, "little")
    return bytes(f)


def evaluate(frame: bytes, size: int):
    row = {}
    try:
        ref = pa.Codec("zstd").decompress(frame, decompressed_size=size).to_pybytes()
        row["libzstd"] = sha(ref)
    except Exception as e:  # noqa: BLE001
        ref = None
        row["libzstd"] = "refused: " + str(e)[:60]
    outs = {}
    for m in ("zeros", "memory"):
        try:
            d = Decoder(frame, verbose=False, overread=m)
            outs[m] = d.decode()
            row[m] = sha(outs[m])
            if m == "zeros":
                row["bits_left"] = [[s["left"] for s in b.get("streams", [])] for b in d.blocks]
        except Exception as e:  # noqa: BLE001
            row[m] = "error: " + str(e)[:60]
    if ref is not None and "zeros" in outs and len(outs["zeros"]) == len(ref):
        row["first_diff_zeros_vs_libzstd"] = next((i for i in range(len(ref)) if ref[i] != outs["zeros"][i]), None)
        row["n_diff_zeros_vs_libzstd"] = sum(a != b for a, b in zip(ref, outs["zeros"]))
        row["memory_model_equals_libzstd"] = outs.get("memory") == ref
    return row, ref, outs


def datasets():
    rng = random.Random(1137)
    yield "int64-0-999-x600", struct.pack("<600q", *[rng.randrange(1000) for _ in range(600)])
    yield "int64-0-999-x4000", struct.pack("<4000q", *[rng.randrange(1000) for _ in range(4000)])
    yield "int64-0-99999-x12000", struct.pack("<12000q", *[rng.randrange(100000) for _ in range(12000)])
    words = [f"value-{i}" for i in range(300)] + ["alpha", "beta", "gamma", "delta", "the", "of"]
    yield "text-words", " ".join(rng.choice(words) for _ in range(12000)).encode()[:100000]
    yield "skewed-bytes", bytes(min(255, int(rng.expovariate(0.05))) for _ in range(60000))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("crafted"))
    a = ap.parse_args(argv)
    a.out.mkdir(exist_ok=True)
    manifest = []
    for name, data in datasets():
        for level in (1, 3, 9):
            frame = pa.Codec("zstd", compression_level=level).compress(data).to_pybytes()
            L = first_block_literals(frame)
            if L is None:
                print(name, level, "no 4-stream Huffman literals")
                continue
            variants = [("control", frame)]
            for k in range(4):
                variants.append((f"overread-s{k + 1}", resize(frame, L, k, -1, L["starts"][k])))
                variants.append((f"underread-s{k + 1}", resize(frame, L, k, +1, L["starts"][k], b"\x00")))
            for vname, f in variants:
                row, ref, outs = evaluate(f, len(data))
                fn = f"{name}-l{level}-{vname}.zst"
                (a.out / fn).write_bytes(f)
                if ref is not None:
                    (a.out / (fn + ".libzstd.out")).write_bytes(ref)
                if "zeros" in outs:
                    (a.out / (fn + ".zeros.out")).write_bytes(outs["zeros"])
                row.update(file=fn, size=len(data), stream_sizes=L["sizes"], regenerated=L["regen"],
                           original_sha=sha(data))
                manifest.append(row)
                print(f"{fn:42s} libzstd {row['libzstd'][:30]:30s} bits_left {row.get('bits_left')} "
                      f"zeros==libzstd {row.get('n_diff_zeros_vs_libzstd') == 0} "
                      f"first_diff {row.get('first_diff_zeros_vs_libzstd')} mem==libzstd "
                      f"{row.get('memory_model_equals_libzstd')}")
    (a.out / "manifest.json").write_text(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main()
