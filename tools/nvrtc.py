"""CUDA C++ (with inline PTX) → PTX through NVRTC, in a child process so that a compiler crash or hang
costs only that process. Only headers NVRTC ships (the CUDA runtime wheel's include folder) may be
included: any other #include would read the host's files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tools.toolchain import cuda_include_dir

SOURCE_NAME = "answer.cu"
_INCLUDE = re.compile(r"^\s*(?:#|%:)\s*include(?:_next)?\b\s*(.*)$")
_PP_NAME = re.compile(r'^(<([^<>]+)>|"([^"]+)")')


class IncludeRefused(ValueError):
    def __init__(self, line: int, message: str):
        self.line = line
        super().__init__(message)


def check_includes(source: str) -> None:
    """Raise IncludeRefused for an #include of anything but a header in the CUDA include folder."""
    include_dir = cuda_include_dir()
    for number, line in _logical_lines(source):
        m = _INCLUDE.match(line)
        if not m:
            continue
        name_match = _PP_NAME.match(m.group(1).strip())
        if not name_match:
            raise IncludeRefused(number, '#include must name a header literally (<name> or "name")')
        if not _shipped(name_match.group(2) or name_match.group(3), include_dir):
            raise IncludeRefused(
                number,
                f"#include {name_match.group(1)} is refused: only the headers NVRTC ships may be included "
                "(e.g. <cuda_bf16.h>, <cuda_fp16.h>, <cuda_fp8.h>, <cuda_pipeline.h>)",
            )


def _logical_lines(source: str) -> list[tuple[int, str]]:
    """(first physical line number, text) with backslash-continued lines joined, as the preprocessor does."""
    out, pending, start = [], "", 1
    for number, line in enumerate(source.splitlines(), start=1):
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        out.append((start, pending + line))
        pending = ""
    if pending:
        out.append((start, pending))
    return out


def _shipped(name: str, include_dir: Path | None) -> bool:
    if include_dir is None or name.startswith(("/", "\\")) or ".." in Path(name).parts:
        return False
    path = (include_dir / name).resolve()
    return path.is_file() and path.is_relative_to(include_dir.resolve())


def lower_to_ptx(source: str, arch: str, timeout_s: float = 60.0) -> tuple[str | None, str]:
    """(PTX or None, NVRTC's log). `arch` is e.g. 'sm_90a'."""
    request = json.dumps({"source": source, "arch": arch})
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tools.nvrtc"],
            input=request,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return None, f"NVRTC did not finish within {timeout_s:.0f} s"
    if done.returncode != 0:
        return None, f"NVRTC crashed (exit code {done.returncode}): {done.stderr.strip()[-2000:]}"
    reply = json.loads(done.stdout)
    return reply["ptx"], reply["log"]


def _compile_here(source: str, arch: str) -> dict:
    from cuda.bindings import nvrtc

    include_dir = cuda_include_dir()
    options = [f"--gpu-architecture=compute_{arch.removeprefix('sm_')}", "-lineinfo", "--std=c++17"]
    if include_dir:
        options.append(f"--include-path={include_dir}")
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), SOURCE_NAME.encode(), 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return {"ptx": None, "log": f"nvrtcCreateProgram failed: {err}"}
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        log_text = log.rstrip(b"\0 ").decode(errors="replace")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return {"ptx": None, "log": log_text or str(err)}
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        ptx = b" " * size
        nvrtc.nvrtcGetPTX(prog, ptx)
        return {"ptx": ptx.rstrip(b"\0").decode(), "log": log_text}
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def version() -> str:
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


if __name__ == "__main__":
    req = json.loads(sys.stdin.read())
    print(json.dumps(_compile_here(req["source"], req["arch"])))
