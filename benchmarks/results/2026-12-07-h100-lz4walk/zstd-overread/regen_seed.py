"""Regenerate the mutation run's seed zstd-v2-plain and case 1137, to find the unmutated frame."""
import sys, random
from pathlib import Path
ROOT = Path(__file__).resolve().parents[4]; sys.path.insert(0, str(ROOT / "tests")); sys.path.insert(0, str(ROOT))
import pyarrow.parquet as pq
import checksum_cases as cc
from fuzzing import MUTATORS, file_map
out = Path("seed"); out.mkdir(exist_ok=True)
mut = (ROOT / "benchmarks/results/2026-12-06-no-device/zstd-1137-frame.zst").read_bytes()
table = cc.table(1200)
p = out / "zstd-v2-plain.parquet"
pq.write_table(table, p, compression="zstd", data_page_version="2.0", use_dictionary=False, row_group_size=600, data_page_size=2000)
fm = file_map(p)
data = fm.data
for pg in fm.pages:
    body = data[pg.body_start:pg.body_end]
    if len(body) == len(mut):
        diff = [i for i in range(len(mut)) if body[i] != mut[i]]
        print("page", pg.body_start, pg.body_end, "diff bytes", diff[:10], [(body[i]^mut[i]) for i in diff[:10]])
        if len(diff) <= 4:
            Path("original-frame.zst").write_bytes(body)
print(len(fm.pages), "pages; sizes", [pg.body_end-pg.body_start for pg in fm.pages])
for pg in fm.pages:
    body = data[pg.body_start:pg.body_end]
    k = body.find(b"\x28\xb5\x2f\xfd")
    fr = body[k:]
    n = min(len(fr), len(mut))
    diff = [i for i in range(n) if fr[i] != mut[i]]
    print("page", pg.body_start, "frame at", k, "len", len(fr), "ndiff", len(diff), diff[:8])
    if len(fr) == len(mut) and len(diff) <= 4:
        Path("original-frame.zst").write_bytes(fr)
        print("  saved original; xor", [(i, fr[i] ^ mut[i]) for i in diff])
