"""The mutation run's seeds and cases, numbered: case ``i`` is always the same mutant of the same seed.

:func:`seed_maps` writes small valid files with every GPU codec (page v1
and v2, dictionary on and off, gzip pages of several members, checksummed
Zstd frames) and adds the corpus files (``tests/data/parquet-testing``, or
``$HWDECOMP_CORPUS``) with a GPU codec that pyarrow and the format layer
read; :func:`mutant` turns case ``i`` into its broken file, by one of
:data:`fuzzing.MUTATORS` with a generator seeded by ``i``. Used by
``scripts/gpu_mutation_run.py`` and by the GPU tests that replay its cases.
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow.parquet as pq

from dask_hwdecomp.format.structs import Codec

import checksum_cases as cc
from fuzzing import MUTATORS, file_map
from helpers import corpus_root
from rewrite import compress_values, gzip_members, rewrite_pages

__all__ = ["GPU_CODECS", "seeds", "seed_maps", "mutant", "mutant_of"]

GPU_CODECS = ("snappy", "gzip", "lz4", "zstd")


def seeds(work: Path) -> list[Path]:
    """Small valid files with GPU codecs written under ``work``, then the corpus's."""
    out = []
    table = cc.table(1200)
    for codec in GPU_CODECS:
        for version in ("1.0", "2.0"):
            for dictionary in (True, False):
                p = work / f"{codec}-v{version[0]}-{'dict' if dictionary else 'plain'}.parquet"
                pq.write_table(table, p, compression=codec, data_page_version=version, use_dictionary=dictionary,
                               row_group_size=600, data_page_size=2000)
                out.append(p)
    plain = work / "plain.parquet"
    pq.write_table(table, plain, compression="none", use_dictionary=False, data_page_size=2000)
    members = work / "gzip-members.parquet"
    rewrite_pages(plain, members, compress_values(gzip_members(3)), codec=Codec.GZIP)
    out.append(members)
    out.append(cc.zstd_checksummed(work))
    root = corpus_root() / "data"
    if root.is_dir():
        for p in sorted(root.glob("*.parquet")):
            name = p.name.lower()
            if p.stat().st_size < (2 << 20) and any(c in name for c in GPU_CODECS):
                try:
                    pq.read_table(p)
                    file_map(p)
                except Exception:  # not a valid seed (pyarrow or our map refuses it)
                    continue
                out.append(p)
    return out


def seed_maps(work: Path) -> list:
    """:func:`seeds` with their file maps: ``(path, map)`` each."""
    return [(p, file_map(p)) for p in seeds(work)]


def mutant(maps: list, i: int) -> tuple[Path, str, bytes]:
    """Case ``i``: its seed's path, its label (``mutator:seed name:i``) and the mutated file's bytes."""
    path, fm = maps[i % len(maps)]
    names = sorted(MUTATORS)
    name = names[(i // len(maps)) % len(names)]
    return path, f"{name}:{path.name}:{i}", MUTATORS[name](fm, random.Random(i))


def mutant_of(maps: list, seed_name: str, mutator: str, i: int) -> tuple[str, bytes]:
    """What case ``i`` of a run is when it mutates ``seed_name`` with ``mutator``: (label, bytes).

    The same file whatever the seed list holds (its length moves the cases'
    numbering with the corpus and pyarrow's version): a case replayed by name.
    """
    path, fm = next((p, fm) for p, fm in maps if p.name == seed_name)
    return f"{mutator}:{seed_name}:{i}", MUTATORS[mutator](fm, random.Random(i))
