"""The package's layering: what each layer may import from the others."""

from __future__ import annotations

import ast
import pathlib

import dask_hwdecomp
from dask_hwdecomp import jobs
from dask_hwdecomp.format import codecs, fastlayout, layout

PACKAGE = pathlib.Path(dask_hwdecomp.__file__).parent

def _imports(path: pathlib.Path) -> list[tuple[str, str]]:
    """(absolute module, name) for every ``from ... import name`` in ``path``."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found += [(module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, "") for a in node.names]
    return found


def test_job_types_live_in_the_neutral_module():
    # One class each, wherever a caller takes it from.
    assert jobs.Job.__module__ == jobs.Algo.__module__ == jobs.PageCrc.__module__ == "dask_hwdecomp.jobs"
    assert layout.Job is jobs.Job and layout.PageCrc is jobs.PageCrc and codecs.Algo is jobs.Algo
    assert fastlayout.Job is jobs.Job


def test_jobs_module_is_a_leaf():
    own = {m for m, _ in _imports(PACKAGE / "jobs.py") if m.startswith("dask_hwdecomp")}
    assert own <= {"dask_hwdecomp.errors"}


def test_backends_and_gpu_take_job_types_from_the_neutral_module():
    wrong = []
    for layer in ("decompress", "gpu", "service"):
        for path in sorted((PACKAGE / layer).glob("*.py")):
            rel = f"{layer}/{path.name}"
            for module, name in _imports(path):
                if module.startswith("dask_hwdecomp.format") and name in ("Job", "Algo", "PageCrc"):
                    wrong.append(f"{rel}: {module}.{name}")
                if layer in ("gpu", "service") and module.startswith("dask_hwdecomp.format"):
                    wrong.append(f"{rel}: imports the format layer ({module})")
    assert wrong == []
