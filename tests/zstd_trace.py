"""A small pure-Python Zstandard decoder (RFC 8878) that traces what it reads.

Copied from the study of 2026-12-07 (``benchmarks/results/2026-12-07-h100-lz4walk/zstd-overread/zstd_trace.py``,
two unused locals removed). The tests use its ``overread="zeros"`` mode, in
which bits read below a Huffman stream's start are zeros: the decoding nvCOMP
6.0 was seen to do (55 of 55 crafted frames on an H100), for a Zstd
launcher as lenient as nvCOMP (``tests/standin_zstd.py``).

Usage: python zstd_trace.py FRAME [--quiet] [--seqs] [--origin BYTE ...]

It decodes one frame (no dictionary), printing the frame header, block
headers, literals section (Huffman tree, jump table, per-stream symbol
counts and end-of-stream exactness), the sequences section and each
sequence, and records for every output byte where it comes from.
"""
from __future__ import annotations

import sys

# ---------------------------------------------------------------- bit readers


class ForwardBits:
    """Little-endian forward bit reader (FSE table descriptions)."""

    def __init__(self, data: bytes, pos: int):
        self.data, self.start, self.bit = data, pos, 0

    def read(self, n):
        v = 0
        for i in range(n):
            b = self.start * 8 + self.bit + i
            byte = self.data[b >> 3] if (b >> 3) < len(self.data) else 0
            v |= ((byte >> (b & 7)) & 1) << i
        self.bit += n
        return v

    def peek(self, n):
        save = self.bit
        v = self.read(n)
        self.bit = save
        return v

    def nbytes(self):
        return (self.bit + 7) >> 3


class BackwardBits:
    """Zstd's backward bitstream: read from the last byte's highest set bit down.

    Bits past the stream's start read as zeros (as libzstd's BIT_DStream does);
    ``overflow`` tells whether more bits were read than the stream holds.
    """

    def __init__(self, data: bytes, start: int, end: int, floor: int | None = None):
        if end <= start:
            raise ValueError("empty bitstream")
        last = data[end - 1]
        if last == 0:
            raise ValueError("bitstream's last byte is 0 (no end mark)")
        self.data, self.start, self.end = data, start, end
        self.padding = 8 - last.bit_length() + 1  # zeros above the mark, and the mark itself
        self.total = (end - start) * 8 - self.padding  # payload bits
        self.value = int.from_bytes(data[start:end], "little")
        self.left = self.total  # bits not yet consumed (negative: read past the start)
        # floor: bytes below ``start`` down to ``floor`` are read when the stream is over-read
        # (libzstd's fast Huffman path: its remaining-stream reader starts at the first stream);
        # None: bits past the start read as zeros.
        self.base = 0 if floor is None else (start - floor) * 8
        if floor is not None:
            self.value = int.from_bytes(data[floor:end], "little")

    def _bits(self, lo, n):
        """n bits whose lowest is payload bit ``lo`` (may be negative: below the stream's start)."""
        lo += self.base
        if lo >= 0:
            return (self.value >> lo) & ((1 << n) - 1)
        if lo + n <= 0:
            return 0
        return (self.value & ((1 << (lo + n)) - 1)) << (-lo)

    def peek(self, n):
        if n == 0:
            return 0
        return self._bits(self.left - n, n)

    def read(self, n):
        v = self.peek(n)
        self.left -= n
        return v

    def bitpos(self):
        """Absolute bit index (from the start of ``data``) of the next bit to read (the highest unread)."""
        return self.start * 8 + self.left - 1

    @property
    def overflow(self):
        return self.left < 0


# ---------------------------------------------------------------- FSE

def read_fse_description(data, pos, max_symbol, max_al):
    """FSE table description (RFC 8878 4.1.1): returns (accuracy_log, probs, bytes used)."""
    br = ForwardBits(data, pos)
    al = br.read(4) + 5
    if al > max_al:
        raise ValueError(f"accuracy log {al} > {max_al}")
    remaining = (1 << al) + 1
    threshold = 1 << al
    nbits = al + 1
    probs = []
    while remaining > 1 and len(probs) <= max_symbol:
        mx = (2 * threshold - 1) - remaining
        low = br.peek(nbits - 1)
        if (low & (threshold - 1)) < mx:
            val = low & (threshold - 1)
            br.bit += nbits - 1
        else:
            val = br.peek(nbits) & (2 * threshold - 1)
            if val >= threshold:
                val -= mx
            br.bit += nbits
        count = val - 1
        remaining -= -count if count < 0 else count
        probs.append(count)
        if count == 0:
            while True:
                rep = br.read(2)
                probs.extend([0] * rep)
                if rep != 3:
                    break
        while remaining < threshold:
            nbits -= 1
            threshold >>= 1
    if remaining != 1:
        raise ValueError(f"FSE description: remaining {remaining}")
    if len(probs) > max_symbol + 1:
        raise ValueError("FSE description: too many symbols")
    return al, probs, br.nbytes()


def build_fse_table(probs, al):
    """Decoding table: list of (symbol, nbBits, baseline)."""
    size = 1 << al
    sym = [0] * size
    high = size - 1
    nxt = [0] * len(probs)
    for s, p in enumerate(probs):
        if p == -1:
            sym[high] = s
            high -= 1
            nxt[s] = 1
        else:
            nxt[s] = p
    step = (size >> 1) + (size >> 3) + 3
    mask = size - 1
    pos = 0
    for s, p in enumerate(probs):
        if p <= 0:
            continue
        for _ in range(p):
            sym[pos] = s
            pos = (pos + step) & mask
            while pos > high:
                pos = (pos + step) & mask
    if pos != 0:
        raise ValueError("FSE spread did not end at 0")
    table = []
    for u in range(size):
        s = sym[u]
        ns = nxt[s]
        nxt[s] += 1
        nb = al - (ns.bit_length() - 1)
        table.append((s, nb, (ns << nb) - size))
    return table


# ---------------------------------------------------------------- Huffman

def read_huffman_tree(data, pos, log):
    """Huffman tree description (RFC 8878 4.2.1). Returns (weights per symbol, max_bits, bytes used)."""
    hb = data[pos]
    if hb >= 128:
        n = hb - 127
        nbytes = (n + 1) // 2
        ws = []
        for i in range(n):
            b = data[pos + 1 + i // 2]
            ws.append(b >> 4 if i % 2 == 0 else b & 15)
        log(f"  Huffman tree: direct weights, header {hb}, {n} weights, {1 + nbytes} bytes")
        used = 1 + nbytes
    else:
        csize = hb
        al, probs, dlen = read_fse_description(data, pos + 1, 255, 6)
        log(f"  Huffman tree: FSE-compressed weights, {csize} bytes (+1 header): accuracy log {al}, "
            f"weight probs {probs} (description {dlen} bytes)")
        table = build_fse_table(probs, al)
        bs = BackwardBits(data, pos + 1 + dlen, pos + 1 + csize)
        s1 = bs.read(al)
        s2 = bs.read(al)
        ws = []
        while True:
            if len(ws) > 255:
                raise ValueError("too many weights")
            sym, nb, base = table[s1]
            ws.append(sym)
            s1 = base + bs.read(nb)
            if bs.overflow:
                ws.append(table[s2][0])
                break
            sym, nb, base = table[s2]
            ws.append(sym)
            s2 = base + bs.read(nb)
            if bs.overflow:
                ws.append(table[s1][0])
                break
        log(f"  weight bitstream: {bs.total} payload bits, {len(ws)} weights decoded")
        used = 1 + csize
    total = sum(1 << (w - 1) for w in ws if w > 0)
    if total == 0:
        raise ValueError("all weights 0")
    max_bits = total.bit_length()  # highbit(total)+1
    rest = (1 << max_bits) - total
    if rest & (rest - 1):
        raise ValueError(f"weights don't complete to a power of two: total {total}")
    last_w = rest.bit_length()  # log2(rest)+1
    ws.append(last_w)
    if max_bits > 11:
        raise ValueError(f"max bits {max_bits} > 11")
    weights = ws + [0] * (256 - len(ws))
    log(f"  explicit weights sum (2^(w-1)) = {total}; max_bits = {max_bits}; implied last weight "
        f"(symbol {len(ws) - 1}) = {last_w}")
    return weights[:256], max_bits, used, len(ws)


def build_huffman_table(weights, max_bits):
    """Table of 2^max_bits entries: (symbol, nbBits); also codes per symbol."""
    table = [None] * (1 << max_bits)
    codes = {}
    pos = 0
    for w in range(1, max_bits + 1):
        for s in range(256):
            if weights[s] == w:
                span = 1 << (w - 1)
                nb = max_bits + 1 - w
                for i in range(span):
                    table[pos + i] = (s, nb)
                codes[s] = (pos >> (w - 1), nb)
                pos += span
    assert pos == 1 << max_bits, pos
    return table, codes


def huffman_stream(data, start, end, count, table, max_bits, floor=None):
    """Decode ``count`` symbols; return (symbols, per-symbol (bitpos_hi, nbits), bits_left)."""
    bs = BackwardBits(data, start, end, floor)
    out, where = [], []
    for _ in range(count):
        v = bs.peek(max_bits)
        s, nb = table[v]
        where.append((bs.bitpos(), nb))
        bs.left -= nb
        out.append(s)
    return out, where, bs


# ---------------------------------------------------------------- sequences

LL_BASE = list(range(16)) + [16, 18, 20, 22, 24, 28, 32, 40, 48, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
                             16384, 32768, 65536]
LL_BITS = [0] * 16 + [1, 1, 1, 1, 2, 2, 3, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]
ML_BASE = [i + 3 for i in range(32)] + [35, 37, 39, 41, 43, 47, 51, 59, 67, 83, 99, 131, 259, 515, 1027, 2051,
                                        4099, 8195, 16387, 32771, 65539]
ML_BITS = [0] * 32 + [1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]
LL_DEFAULT = ([4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 2, 1, 1, 1, 1, 1,
               -1, -1, -1, -1], 6)
ML_DEFAULT = ([1, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
               1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1], 6)
OF_DEFAULT = ([1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1], 5)
MODES = ["predefined", "RLE", "FSE-compressed", "repeat"]


class Decoder:
    def __init__(self, data: bytes, verbose=True, show_seqs=True, overread="zeros"):
        self.data = data
        self.overread = overread  # "zeros" (nvCOMP's apparent behaviour) or "memory" (libzstd's fast path)
        self.verbose, self.show_seqs = verbose, show_seqs
        self.out = bytearray()
        self.origin = []  # per output byte: ('lit', block, lit_index) or ('match', block, seq, src)
        self.huf = None  # (table, max_bits) kept for treeless literals
        self.seq_tables = {}
        self.reps = [1, 4, 8]
        self.blocks = []  # per block: info dict

    def log(self, *a):
        if self.verbose:
            print(*a)

    def decode(self):
        d = self.data
        if d[:4] != b"\x28\xb5\x2f\xfd":
            raise ValueError("bad magic")
        fhd = d[4]
        fcs_flag, single, cks, did = fhd >> 6, (fhd >> 5) & 1, (fhd >> 2) & 1, fhd & 3
        p = 5
        window = None
        if not single:
            wd = d[p]
            p += 1
            exp, mant = wd >> 3, wd & 7
            base = 1 << (10 + exp)
            window = base + (base // 8) * mant
        did_size = [0, 1, 2, 4][did]
        dict_id = int.from_bytes(d[p:p + did_size], "little")
        p += did_size
        fcs_size = [1 if single else 0, 2, 4, 8][fcs_flag]
        fcs = int.from_bytes(d[p:p + fcs_size], "little") if fcs_size else None
        if fcs_size == 2:
            fcs += 256
        p += fcs_size
        if single:
            window = fcs
        self.log(f"frame header: descriptor 0x{fhd:02x}: FCS flag {fcs_flag}, single segment {single}, checksum "
                 f"{cks}, dict id flag {did}; window {window}; dict id {dict_id}; content size {fcs}; header "
                 f"{p} bytes")
        self.window, self.fcs = window, fcs
        bno = 0
        while True:
            bh = int.from_bytes(d[p:p + 3], "little")
            last, btype, bsize = bh & 1, (bh >> 1) & 3, bh >> 3
            self.log(f"block {bno} at {p}: last {last}, type {['raw', 'RLE', 'compressed', 'reserved'][btype]}, "
                     f"size {bsize} (content {p + 3}..{p + 3 + bsize})")
            p += 3
            if btype == 0:
                self.out += d[p:p + bsize]
                self.origin += [("raw", bno, i) for i in range(bsize)]
                p += bsize
            elif btype == 1:
                self.out += bytes([d[p]]) * bsize
                self.origin += [("rle", bno, 0)] * bsize
                p += 1
            elif btype == 2:
                self.compressed_block(p, p + bsize, bno)
                p += bsize
            else:
                raise ValueError("reserved block type")
            bno += 1
            if last:
                break
        if cks:
            self.log(f"checksum: {d[p:p + 4].hex()}")
            p += 4
        self.log(f"frame ends at {p} of {len(d)}; output {len(self.out)} bytes")
        return bytes(self.out)

    # ---------------------------------------------------------- literals
    def literals(self, p, end, bno):
        d = self.data
        b0 = d[p]
        ltype, sf = b0 & 3, (b0 >> 2) & 3
        info = {"type": ["raw", "RLE", "compressed", "treeless"][ltype]}
        if ltype in (0, 1):
            if sf in (0, 2):
                hsize, regen = 1, b0 >> 3
            elif sf == 1:
                hsize, regen = 2, int.from_bytes(d[p:p + 2], "little") >> 4
            else:
                hsize, regen = 3, int.from_bytes(d[p:p + 3], "little") >> 4
            q = p + hsize
            if ltype == 0:
                lits = list(d[q:q + regen])
                q += regen
            else:
                lits = [d[q]] * regen
                q += 1
            self.log(f" literals: {info['type']}, header {hsize} bytes, regenerated {regen}")
            return lits, q, [("raw", i) for i in range(regen)], info
        h = int.from_bytes(d[p:p + 5], "little")
        if sf == 0:
            nstreams, hsize, regen, csize = 1, 3, (h >> 4) & 0x3FF, (h >> 14) & 0x3FF
        elif sf == 1:
            nstreams, hsize, regen, csize = 4, 3, (h >> 4) & 0x3FF, (h >> 14) & 0x3FF
        elif sf == 2:
            nstreams, hsize, regen, csize = 4, 4, (h >> 4) & 0x3FFF, (h >> 18) & 0x3FFF
        else:
            nstreams, hsize, regen, csize = 4, 5, (h >> 4) & 0x3FFFF, (h >> 22) & 0x3FFFF
        self.log(f" literals section at {p}: {info['type']}, size format {sf}, header {hsize} bytes, "
                 f"regenerated {regen}, compressed {csize} (tree + streams), {nstreams} stream(s); "
                 f"section {p}..{p + hsize + csize}")
        q = p + hsize
        send = q + csize
        if ltype == 2:
            weights, max_bits, used, nw = read_huffman_tree(d, q, self.log)
            self.log(f"  tree description {q}..{q + used} ({used} bytes)")
            table, codes = build_huffman_table(weights, max_bits)
            self.huf = (table, max_bits, weights, codes)
            used_syms = [s for s in range(256) if weights[s]]
            hist = {}
            for s in used_syms:
                hist.setdefault(max_bits + 1 - weights[s], []).append(s)
            self.log(f"  {len(used_syms)} symbols with codes; code lengths: " +
                     ", ".join(f"{nb} bits: {len(v)} sym" for nb, v in sorted(hist.items())))
            for nb, v in sorted(hist.items()):
                self.log(f"    {nb:2d} bits: {v}")
            q += used
        else:
            table, max_bits, weights, codes = self.huf
            self.log(f"  treeless: reusing the previous table (max_bits {max_bits})")
        info.update(regen=regen, csize=csize, nstreams=nstreams, max_bits=max_bits)
        lits, origins = [], []
        if nstreams == 1:
            syms, where, bs = huffman_stream(d, q, send, regen, table, max_bits)
            self.log(f"  1 stream {q}..{send}: {regen} symbols, bits left {bs.left} "
                     f"({'exact' if bs.left == 0 else 'NOT EXACT'})")
            lits = syms
            origins = [("huf", 0, i, where[i]) for i in range(regen)]
        else:
            s1, s2, s3 = (int.from_bytes(d[q + 2 * i:q + 2 * i + 2], "little") for i in range(3))
            total = send - q - 6
            s4 = total - s1 - s2 - s3
            self.log(f"  jump table at {q}: stream sizes {s1}, {s2}, {s3}, (4th from total) {s4}; "
                     f"streams bytes total {total}")
            per = (regen + 3) // 4
            counts = [per, per, per, regen - 3 * per]
            starts = [q + 6, q + 6 + s1, q + 6 + s1 + s2, q + 6 + s1 + s2 + s3]
            ends = starts[1:] + [send]
            info["streams"] = []
            for k in range(4):
                floor = (starts[0] - 6) if self.overread == "memory" else None  # libzstd 1.5.6+: ilowest = the jump table's start
                syms, where, bs = huffman_stream(d, starts[k], ends[k], counts[k], table, max_bits, floor)
                lastb = d[ends[k] - 1]
                self.log(f"  stream {k + 1}: bytes {starts[k]}..{ends[k]} ({ends[k] - starts[k]} bytes), last byte "
                         f"0x{lastb:02x} (padding {bs.padding} bits), payload {bs.total} bits, {counts[k]} "
                         f"symbols -> literals {len(lits)}..{len(lits) + counts[k]}; bits left at end {bs.left} "
                         f"({'exact' if bs.left == 0 else 'NOT EXACT'})")
                info["streams"].append(dict(start=starts[k], end=ends[k], count=counts[k], left=bs.left,
                                            lit0=len(lits), where=where, total=bs.total, padding=bs.padding))
                origins += [("huf", k, i, where[i]) for i in range(counts[k])]
                lits += syms
        return lits, send, origins, info

    # ---------------------------------------------------------- sequences
    def seq_table(self, name, mode, p, max_sym, max_al, default):
        d = self.data
        if mode == 0:
            probs, al = default
            t = build_fse_table(probs, al)
            used = 0
            desc = f"predefined (AL {al})"
        elif mode == 1:
            t = [(d[p], 0, 0)]
            al = 0
            used = 1
            desc = f"RLE symbol {d[p]}"
        elif mode == 2:
            al, probs, used = read_fse_description(d, p, max_sym, max_al)
            t = build_fse_table(probs, al)
            desc = f"FSE-compressed: AL {al}, probs {probs} ({used} bytes)"
        else:
            t, al = self.seq_tables[name]
            used = 0
            desc = "repeat"
        self.seq_tables[name] = (t, al)
        return t, al, used, desc

    def compressed_block(self, p, end, bno):
        d = self.data
        lits, q, lorig, info = self.literals(p, end, bno)
        b0 = d[q]
        if b0 == 0:
            nseq, q = 0, q + 1
        elif b0 < 128:
            nseq, q = b0, q + 1
        elif b0 < 255:
            nseq, q = ((b0 - 128) << 8) + d[q + 1], q + 2
        else:
            nseq, q = d[q + 1] + (d[q + 2] << 8) + 0x7F00, q + 3
        self.log(f" sequences section: {nseq} sequences")
        seqs = []
        if nseq:
            modes = d[q]
            q += 1
            llm, ofm, mlm = modes >> 6, (modes >> 4) & 3, (modes >> 2) & 3
            llt, llal, u, dl = self.seq_table("ll", llm, q, 35, 9, LL_DEFAULT)
            q += u
            oft, ofal, u, do = self.seq_table("of", ofm, q, 31, 8, OF_DEFAULT)
            q += u
            mlt, mlal, u, dm = self.seq_table("ml", mlm, q, 52, 9, ML_DEFAULT)
            q += u
            self.log(f"  modes 0x{modes:02x}: LL {dl}; OF {do}; ML {dm}")
            bs = BackwardBits(d, q, end)
            self.log(f"  sequence bitstream {q}..{end}: {bs.total} payload bits")
            ls = bs.read(llal)
            os_ = bs.read(ofal)
            ms = bs.read(mlal)
            for i in range(nseq):
                ofc = oft[os_][0]
                llc = llt[ls][0]
                mlc = mlt[ms][0]
                ofv = (1 << ofc) + bs.read(ofc)
                ml = ML_BASE[mlc] + bs.read(ML_BITS[mlc])
                ll = LL_BASE[llc] + bs.read(LL_BITS[llc])
                seqs.append((ll, ofv, ml, ofc, llc, mlc))
                if i != nseq - 1:
                    _, nb, base = llt[ls]
                    ls = base + bs.read(nb)
                    _, nb, base = mlt[ms]
                    ms = base + bs.read(nb)
                    _, nb, base = oft[os_]
                    os_ = base + bs.read(nb)
            self.log(f"  sequence bitstream bits left at end: {bs.left} ({'exact' if bs.left == 0 else 'NOT EXACT'})")
        else:
            if q != end:
                raise ValueError("sequences section 0 with bytes left")
        # execute
        lp = 0
        info["seqs"] = []
        for i, (ll, ofv, ml, ofc, llc, mlc) in enumerate(seqs):
            if lp + ll > len(lits):
                raise ValueError(f"seq {i}: literals run out")
            o0 = len(self.out)
            self.out += bytes(lits[lp:lp + ll])
            self.origin += [("lit", bno, lp + j) for j in range(ll)]
            # offset
            r = self.reps
            if ofv > 3:
                off = ofv - 3
                kind = "new"
                self.reps = [off, r[0], r[1]]
            else:
                idx = ofv - 1 + (1 if ll == 0 else 0)
                if idx == 0:
                    off = r[0]
                    kind = "rep1"
                elif idx == 1:
                    off = r[1]
                    self.reps = [r[1], r[0], r[2]]
                    kind = "rep2"
                elif idx == 2:
                    off = r[2]
                    self.reps = [r[2], r[0], r[1]]
                    kind = "rep3"
                else:
                    off = r[0] - 1
                    self.reps = [off, r[0], r[1]]
                    kind = "rep1-1"
                if ll == 0:
                    kind += " (LL=0 shift)"
            m0 = len(self.out)
            if off > len(self.out) or off == 0:
                raise ValueError(f"seq {i}: offset {off} > output {len(self.out)}")
            src = m0 - off
            for j in range(ml):
                self.out.append(self.out[src + j])
                self.origin.append(("match", bno, i, src + j))
            info["seqs"].append(dict(i=i, ll=ll, ofv=ofv, off=off, ml=ml, lit=(o0, m0), match=(m0, m0 + ml),
                                     lits=(lp, lp + ll), src=src, kind=kind))
            if self.show_seqs:
                self.log(f"  seq {i:3d}: LL {ll:4d} (code {llc:2d}) OF value {ofv:5d} (code {ofc:2d}) -> offset "
                         f"{off:5d} [{kind}] ML {ml:4d} (code {mlc:2d}) | literals {lp}..{lp + ll} -> out "
                         f"{o0}..{m0}; match out {m0}..{m0 + ml} from {src}..{src + ml}"
                         f"{' (overlapping)' if off < ml else ''}")
            lp += ll
        if lp < len(lits):
            o0 = len(self.out)
            self.out += bytes(lits[lp:])
            self.origin += [("lit", bno, j) for j in range(lp, len(lits))]
            self.log(f"  last literals: {lp}..{len(lits)} -> out {o0}..{len(self.out)}")
        info["lorig"] = lorig
        info["lits"] = lits
        self.blocks.append(info)

    def source_of(self, i):
        """Follow matches back to the literal (or raw byte) an output byte was copied from."""
        chain = []
        o = self.origin[i]
        while o[0] == "match":
            chain.append((o[2], i))
            i = o[3]
            o = self.origin[i]
        return o, i, chain


def describe(dec: Decoder, i):
    o, j, chain = dec.source_of(i)
    s = f"out[{i}]=0x{dec.out[i]:02x}"
    if chain:
        s += " <- " + " <- ".join(f"seq {c} match from out[{src}]" for c, src in [(c[0], None) for c in chain][:0])
        s += f" via {len(chain)} match copy(ies) (seqs {[c[0] for c in chain]}) from out[{j}]"
    if o[0] == "lit":
        info = dec.blocks[o[1]]
        lo = info["lorig"][o[2]]
        if lo[0] == "huf":
            k, pos, (bit, nb) = lo[1], lo[2], lo[3]
            st = info["streams"][k] if "streams" in info else None
            s += (f": literal #{o[2]} of block {o[1]}, Huffman stream {k + 1} symbol #{pos}"
                  f"{'' if st is None else ' of ' + str(st['count'])}, code {nb} bits at frame bits "
                  f"{bit}..{bit - nb + 1} (byte {bit >> 3}..{(bit - nb + 1) >> 3})")
        else:
            s += f": literal #{o[2]} (raw)"
    else:
        s += f": {o}"
    return s


def main(argv):
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("frame")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--no-seqs", action="store_true")
    ap.add_argument("--origin", type=int, nargs="*", default=[])
    ap.add_argument("--overread", choices=("zeros", "memory"), default="zeros",
                    help="bits read past a Huffman stream's start: zeros, or the bytes below it (libzstd fast path)")
    a = ap.parse_args(argv)
    data = open(a.frame, "rb").read()
    dec = Decoder(data, verbose=not a.quiet, show_seqs=not a.no_seqs, overread=a.overread)
    out = dec.decode()
    import hashlib
    print(f"output {len(out)} bytes, sha256 {hashlib.sha256(out).hexdigest()[:16]}")
    for i in a.origin:
        print(describe(dec, i))
    return dec


if __name__ == "__main__":
    main(sys.argv[1:])
