"""The package's layering: what each layer may import from the others."""

from __future__ import annotations

import ast
import importlib
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


def _modules(layer: str) -> list[tuple[str, pathlib.Path]]:
    return [(f"{layer}/{path.name}", path) for path in sorted((PACKAGE / layer).glob("*.py"))]


def _launchers(path: pathlib.Path) -> list[str]:
    """Classes in ``path`` that implement the stream runner's Launcher protocol (they define ``launch``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef):
            methods = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
            if "launch" in methods:
                found.append(node.name)
    return found


def test_launchers_live_in_the_gpu_layer():
    # The batched GPU call (device pointers, nvCOMP metadata, engine params)
    # belongs beside the stream runner it plugs into, not beside a backend's factory.
    elsewhere = [f"{rel}: {name}" for layer in ("decompress", "service", "readpath", "engine")
                 for rel, path in _modules(layer) for name in _launchers(path)]
    assert elsewhere == []
    in_gpu = {name for _, path in _modules("gpu") for name in _launchers(path)}
    assert {"NvcompLauncher", "HardwareLauncher"} <= in_gpu


# The driver's and CudaOps' device-memory operations, and the device layout's alignment.
_DEVICE_CALLS = {"htod", "dtoh", "memset_d32", "alloc_device", "batch_decompress"}


def _device_calls(path: pathlib.Path) -> list[str]:
    """``x.<op>(...)`` calls in ``path`` of a device-memory operation."""
    return [node.func.attr for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in _DEVICE_CALLS]


def test_decompress_leaves_device_pointers_and_cuda_bindings_to_gpu():
    # Probes and factories reach the driver through gpu/ (device attributes,
    # whether the bindings are installed), and the engine selfcheck's call is
    # laid out there too: only gpu/ does pointer work.
    wrong = []
    for layer in ("decompress", "service", "readpath", "engine"):
        for rel, path in _modules(layer):
            wrong += [f"{rel}: calls {op}" for op in _device_calls(path)]
            for module, name in _imports(path):
                if module == "cuda" or module.startswith("cuda.") or module == "ctypes":
                    wrong.append(f"{rel}: {module}")
                if (module, name) in {("dask_hwdecomp.gpu.stream_runner", "Prepared"),
                                      ("dask_hwdecomp.gpu.stream_runner", "Launcher"),
                                      ("dask_hwdecomp.gpu.staging", "DEVICE_ALIGN")}:
                    wrong.append(f"{rel}: {module}.{name}")
    assert wrong == []


def test_gpu_imports_no_layer_above_it():
    above = ("decompress", "service", "readpath", "engine", "cli", "bench", "format")
    wrong = []
    for rel, path in _modules("gpu"):
        for module, _ in _imports(path):
            parts = module.split(".")
            if parts[0] == "dask_hwdecomp" and len(parts) > 1 and parts[1] in above:
                wrong.append(f"{rel}: {module}")
    assert wrong == []


def test_service_factories_resolve_to_the_backends_create():
    from dask_hwdecomp.service.client import GPU_FACTORIES

    assert set(GPU_FACTORIES) == {"nvcomp", "hardware"}
    for name, factory in GPU_FACTORIES.items():
        module, _, func = factory.partition(":")
        assert factory == f"dask_hwdecomp.decompress.{name}:create"
        assert callable(getattr(importlib.import_module(module), func))


def _module_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, imports inside functions included."""
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                names = [target] + [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            # a package's __init__ is where its modules are reached from, not a layer of its own
            graph[mod].update(n for n in names if n in mods and n != mod and mods[n].name != "__init__.py")
    return graph


def test_no_module_imports_one_that_imports_it_back():
    graph = _module_graph()
    assert len(graph) > 100
    seen: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(mod: str, path: list[str]) -> None:
        seen[mod] = 1
        for nxt in sorted(graph[mod]):
            assert seen.get(nxt) != 1, f"import circle: {' -> '.join(path[path.index(nxt):] + [nxt])}"
            if nxt not in seen:
                visit(nxt, path + [nxt])
        seen[mod] = 2

    for mod in sorted(graph):
        if mod not in seen:
            visit(mod, [mod])
