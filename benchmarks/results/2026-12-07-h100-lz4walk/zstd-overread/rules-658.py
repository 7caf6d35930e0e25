"""The host rules on one Zstd frame, via the strict RFC trace (zstd_trace.Decoder):

tree   : every Huffman tree description is valid (weights complete to a power of two, max_bits <= 11)
huf    : every Huffman literal stream decodes its symbol count with exactly 0 bits left
huf_neg: (the minimal variant) no Huffman literal stream is over-read (bits left < 0)
seq    : every sequences bitstream is consumed exactly (0 bits left after the last sequence)

check(frame) -> dict with per-block details, the rule verdicts and the decoded output (or the error).
"""
from __future__ import annotations

import zstd_trace as zt


def check(frame: bytes) -> dict:
    zt.LENIENT_TREE = None
    d = zt.Decoder(frame, verbose=False, show_seqs=False)
    res = {"error": None, "out": None}
    try:
        res["out"] = d.decode()
    except Exception as e:  # noqa: BLE001
        res["error"] = f"{type(e).__name__}: {e}"
    blocks = []
    for b in d.blocks:
        blocks.append(dict(lit=b["type"], nstreams=b.get("nstreams"),
                           left=[s["left"] for s in b.get("streams", [])] or None,
                           seq_left=b.get("seq_left"), nseq=b.get("nseq")))
    res["blocks"] = blocks
    err = res["error"] or ""
    res["tree_bad"] = "power of two" in err or "max bits" in err or "all weights 0" in err
    res["huf_not_exact"] = any(x != 0 for b in blocks for x in (b["left"] or []))
    res["huf_overread"] = any(x < 0 for b in blocks for x in (b["left"] or []))
    res["seq_not_exact"] = any(b["seq_left"] not in (None, 0) for b in blocks)
    return res
