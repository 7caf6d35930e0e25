"""The names of dask's pyarrow engine that HwdecompEngine relies on are still there, unchanged."""

from __future__ import annotations

import inspect

import pytest
from dask.dataframe.io.parquet.arrow import ArrowDatasetEngine

from dask_hwdecomp.engine.arrow import DASK_SEAMS, HwdecompEngine


def _parameters(method) -> tuple[str, ...]:
    return tuple(inspect.signature(method.__func__).parameters)


_METHODS = [s for s in DASK_SEAMS if s.where == "ArrowDatasetEngine"]
_FUNCTIONS = [s for s in DASK_SEAMS if s.where != "ArrowDatasetEngine"]


@pytest.mark.parametrize("seam", _METHODS, ids=lambda s: s.name)
def test_dask_still_has_the_seam(seam):
    # A classmethod of dask's engine, with the parameters the override and
    # its super() call pass by position and by name.
    found = inspect.getattr_static(ArrowDatasetEngine, seam.name, None)
    assert isinstance(found, classmethod), f"dask's ArrowDatasetEngine.{seam.name} is gone or no classmethod"
    assert _parameters(found) == seam.parameters, f"dask changed ArrowDatasetEngine.{seam.name}"
    assert seam.why


@pytest.mark.parametrize("seam", _FUNCTIONS, ids=lambda s: s.name)
def test_dask_still_has_the_function(seam):
    # A module-level function of dask's that engine/gputable.py calls, with
    # the parameters it is called with.
    import importlib

    found = getattr(importlib.import_module(seam.where), seam.name, None)
    assert inspect.isfunction(found), f"dask's {seam.where}.{seam.name} is gone or no function"
    assert tuple(inspect.signature(found).parameters) == seam.parameters, f"dask changed {seam.where}.{seam.name}"
    assert seam.why


def test_every_override_is_a_pinned_seam():
    # Whatever HwdecompEngine defines that dask's engine also has is listed
    # in DASK_SEAMS, with the same parameters as the parent's.
    ours = {n for n, v in vars(HwdecompEngine).items() if isinstance(v, classmethod) and hasattr(ArrowDatasetEngine, n)}
    assert ours == {s.name for s in _METHODS}
    for seam in _METHODS:
        assert _parameters(inspect.getattr_static(HwdecompEngine, seam.name)) == seam.parameters, seam.name


def test_the_package_imports_nothing_private_from_dask():
    # Private dask names reached other than through the pinned methods and
    # functions (a "_name" in a dask import, or a dask module path with one).
    import ast
    import pathlib

    import dask_hwdecomp

    found = []
    for path in pathlib.Path(dask_hwdecomp.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "dask":
                names = [node.module, *(a.name for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.split(".")[0] == "dask"]
            else:
                continue
            pinned = {s.name for s in _FUNCTIONS if s.where == node.module} if isinstance(node, ast.ImportFrom) else set()
            found += [
                f"{path.name}: {n}" for n in names if n not in pinned for part in n.split(".") if part.startswith("_")
            ]
    assert found == []
