"""The machine a benchmark ran on, and the versions of what it ran."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys

__all__ = ["system_info", "format_system", "nvidia_smi"]

PACKAGES = (
    "dask-hwdecomp",
    "pyarrow",
    "dask",
    "distributed",
    "pandas",
    "numpy",
    "cramjam",
    "fsspec",
    "nvidia-nvcomp-cu13",
    "cuda-bindings",
)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except ImportError:
        return None


def nvidia_smi(query: str) -> tuple[str | None, str | None]:
    """(CSV lines of ``nvidia-smi --query-<query> --format=csv,noheader``, None), else (None, why not)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None, "nvidia-smi not found"
    try:
        out = subprocess.run([smi, f"--query-{query}", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi failed: {exc}"
    if out.returncode != 0:
        return None, f"nvidia-smi exited {out.returncode}: {out.stderr.strip()[:200]}"
    return out.stdout, None


def _gpus() -> tuple[list[dict], str | None]:
    """GPUs from nvidia-smi, else (empty, why not)."""
    text, why = nvidia_smi("gpu=name,driver_version,memory.total,pci.bus_id")
    if text is None:
        return [], why
    gpus = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4:
            gpus.append({"name": parts[0], "driver": parts[1], "memory": parts[2], "bus_id": parts[3]})
    return gpus, None


def _cuda_driver_version() -> str | None:
    try:
        from cuda.bindings import driver
    except ImportError:
        return None
    try:
        err, version = driver.cuDriverGetVersion()
        return f"{version // 1000}.{version % 1000 // 10}"
    except Exception:  # an old or broken binding: the version is informative only
        return None


def system_info() -> dict:
    """CPU, cores, memory, GPUs and package versions, JSON-ready."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    gpus, why = _gpus()
    affinity: int | None
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        affinity = os.cpu_count()
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "memory_bytes": _memory_bytes(),
        "gpus": gpus,
        "gpu_note": why,
        "cuda_driver": _cuda_driver_version(),
        "python_executable": sys.executable,
        "versions": versions,
    }


def format_system(info: dict) -> str:
    """A few lines describing ``info`` (what the benchmark prints first)."""
    mem = info.get("memory_bytes")
    lines = [
        f"CPU: {info['cpu_model']} ({info['cpu_affinity']} of {info['cpu_count']} cores usable)",
        f"memory: {mem / 2**30:.1f} GiB" if mem else "memory: unknown",
    ]
    if info["gpus"]:
        for g in info["gpus"]:
            lines.append(f"GPU: {g['name']}, driver {g['driver']}, {g['memory']}")
        if info.get("cuda_driver"):
            lines.append(f"CUDA driver API: {info['cuda_driver']}")
    else:
        lines.append(f"GPU: none ({info.get('gpu_note')})")
    lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v))
    return "\n".join(lines)
