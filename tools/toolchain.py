"""Finding ptxas and nvdisasm, and the headers NVRTC needs: an environment variable, then the PyPI
wheels, then PATH, then CUDA_HOME. Each tool says where it came from and its version."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tools import procs

ENV_VARS = {"ptxas": "PTXBENCH_PTXAS", "nvdisasm": "PTXBENCH_NVDISASM"}
WHEELS = {"ptxas": "nvidia-cuda-nvcc", "nvdisasm": "nvidia-cuda-nvdisasm"}


class ToolNotFound(RuntimeError):
    """A binary we need is nowhere we look; the message lists the places."""


@dataclass(frozen=True)
class Tool:
    name: str
    path: Path
    origin: str  # where it was found: "env PTXBENCH_PTXAS", "wheel nvidia-cuda-nvcc", "PATH", "CUDA_HOME"
    version: str

    def describe(self) -> str:
        return f"{self.name} {self.version} ({self.origin}: {self.path})"


def _nvidia_roots() -> list[Path]:
    """Folders of the `nvidia` namespace package that the CUDA wheels install into."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def _wheel_paths(relative: str) -> list[Path]:
    return [root / sub / relative for root in _nvidia_roots() for sub in ("cu13", "cuda_nvcc", "cuda_nvdisasm")]


def _version(path: Path) -> str:
    try:
        out = procs.run([str(path), "--version"], 30).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({e})"
    m = re.search(r"V(\d+\.\d+\.\d+)", out) or re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else "unknown"


@cache
def find_tool(name: str) -> Tool:
    """ptxas or nvdisasm, looked up in the documented order."""
    env = ENV_VARS[name]
    candidates: list[tuple[str, Path | None]] = []
    if os.environ.get(env):
        candidates.append((f"env {env}", Path(os.environ[env])))
    candidates += [(f"wheel {WHEELS[name]}", p) for p in _wheel_paths(f"bin/{name}")]
    which = shutil.which(name)
    candidates.append(("PATH", Path(which) if which else None))
    if os.environ.get("CUDA_HOME"):
        candidates.append(("CUDA_HOME", Path(os.environ["CUDA_HOME"]) / "bin" / name))
    for origin, path in candidates:
        if path is not None and path.is_file() and os.access(path, os.X_OK):
            return Tool(name=name, path=path, origin=origin, version=_version(path))
    tried = ", ".join(f"{o} ({p})" if p else o for o, p in candidates)
    raise ToolNotFound(f"{name} not found; looked at: {tried}. Install the {WHEELS[name]} wheel or set {env}.")


@cache
def cuda_include_dir() -> Path | None:
    """The folder holding cuda_bf16.h and friends (the nvidia-cuda-runtime wheel's, else CUDA_HOME's)."""
    for path in _wheel_paths("include"):
        if (path / "cuda_bf16.h").is_file():
            return path
    home = os.environ.get("CUDA_HOME")
    if home and (Path(home) / "include" / "cuda_bf16.h").is_file():
        return Path(home) / "include"
    return None
