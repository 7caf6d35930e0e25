"""Figures at scale: every variant and codec warmed up before timing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import dask.dataframe as dd

from dask_hwdecomp.bench.data import generate
from dask_hwdecomp.bench.endtoend import ClusterShape, measure_dataset, threaded
from dask_hwdecomp.bench.variants import CEILING, ceiling_variant, engine_variants


def _recording(variant, calls: list):
    """``variant`` reading as it does, each read's (variant, codec) recorded first."""
    def reader(path):
        calls.append((variant.name, Path(path).name))
        if variant.reader is not None:
            return variant.reader(path)
        return dd.read_parquet(str(path), engine=variant.engine, **variant.kwargs)

    return dataclasses.replace(variant, reader=reader)


def test_every_variant_is_warmed_up_on_every_codec_before_the_first_timed_read(tmp_path):
    ds = generate(tmp_path, "lineitem", 300_000, 1, ("uncompressed", "snappy"), processes=1)
    calls: list = []
    variants = {name: _recording(v, calls) for name, v in
                {**engine_variants(("cpu",)), CEILING: ceiling_variant()}.items()}
    with threaded(ClusterShape(1, 2)) as scheduler:
        figures = measure_dataset(scheduler, variants, ds, repeats=2)
    pairs = [("pyarrow", "uncompressed"), ("hwdecomp-cpu", "uncompressed"), (CEILING, "uncompressed"),
             ("pyarrow", "snappy"), ("hwdecomp-cpu", "snappy")]
    assert calls[:len(pairs)] == pairs, "the warm-up reads every pair once, before any timed read"
    assert calls[len(pairs):] == pairs * 2, "then the repeats, interleaved"
    assert all(figures[v][c]["seconds"]["n"] == 2 for v, c in pairs)


def test_a_pair_whose_warm_up_fails_is_not_timed(tmp_path):
    ds = generate(tmp_path, "lineitem", 300_000, 1, ("uncompressed", "snappy"), processes=1)
    base = engine_variants(())["pyarrow"]

    def reader(path):
        if Path(path).name == "snappy":
            raise RuntimeError("no snappy here")
        return dd.read_parquet(str(path), engine="pyarrow")

    variants = {"pyarrow": base, "picky": dataclasses.replace(base, name="picky", reader=reader)}
    with threaded(ClusterShape(1, 2)) as scheduler:
        figures = measure_dataset(scheduler, variants, ds, repeats=1)
    assert figures["picky"]["snappy"] == {"error": "RuntimeError: no snappy here"}
    assert figures["picky"]["uncompressed"]["seconds"]["n"] == 1 and figures["pyarrow"]["snappy"]["seconds"]["n"] == 1
