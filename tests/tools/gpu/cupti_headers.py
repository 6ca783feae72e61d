"""The layout of CUPTI's C structs as g++ reads CUDA 13.0's own headers: per struct its sizeof, its _STRUCT_SIZE macro
and every field's offset, for comparing with the ctypes structs (tools/gpu/cupti_counts.py params). None where the
headers or a C compiler are missing."""

from __future__ import annotations

import ctypes
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HEADERS = ("cupti_target.h", "cupti_profiler_target.h", "cupti_profiler_host.h", "cupti_range_profiler.h",
           "cupti_sass_metrics.h")  # fmt: skip


def include_dirs() -> list[Path] | None:
    """The include folders that hold CUPTI's profiler headers and cuda.h: CUDA_HOME's, then /usr/local/cuda*'s, then
    the CUDA 13 wheels' on sys.path (nvidia-cuda-cupti brings the headers, nvidia-cuda-runtime cuda.h; the dev extra
    installs both, so CI compiles them too). None where they are missing."""
    roots = [os.environ["CUDA_HOME"]] if os.environ.get("CUDA_HOME") else []
    roots += sorted(glob.glob("/usr/local/cuda*"), reverse=True)
    for root in roots:
        for sub in ("include", "extras/CUPTI/include"):
            folder = Path(root) / sub
            if all((folder / h).is_file() for h in HEADERS) and (Path(root) / "include" / "cuda.h").is_file():
                return [Path(root) / "include", folder]
    wheels = [Path(p) / "nvidia" / "cu13" / "include" for p in sys.path if p]
    cupti = next((w for w in wheels if all((w / h).is_file() for h in HEADERS)), None)
    cuda = next((w for w in wheels if (w / "cuda.h").is_file()), None)
    return [cuda, cupti] if cupti and cuda else None


def header_layout(structs: list[type[ctypes.Structure]]) -> dict[str, dict] | None:
    """C name → {"sizeof", "struct_size" (-1: no macro), "offsets": {field: offset}}, compiled from the headers."""
    folders, cc = include_dirs(), shutil.which("g++") or shutil.which("c++")  # cupti_profiler_host.h is C++
    if folders is None or cc is None:
        return None
    lines = [*(f"#include <{h}>" for h in HEADERS), "#include <stdio.h>", "#include <stddef.h>", "int main(void) {",
             'printf("{");']  # fmt: skip
    for i, cls in enumerate(structs):
        c = cls.C_NAME
        macro = f"{c}_STRUCT_SIZE"
        lines += [f"#ifdef {macro}", f"long ss{i} = (long){macro};", "#else", f"long ss{i} = -1;", "#endif"]
        offsets = ", ".join(f'\\"{f}\\": %zu' for f, _ in cls._fields_)
        args = ", ".join(f"offsetof({c}, {f})" for f, _ in cls._fields_)
        sep = "," if i < len(structs) - 1 else ""
        shape = f'\\"{c}\\": {{\\"sizeof\\": %zu, \\"struct_size\\": %ld, \\"offsets\\": {{{offsets}}}}}{sep}'
        lines.append(f'printf("{shape}", sizeof({c}), ss{i}, {args});')
    lines += ['printf("}");', "return 0;", "}"]
    with tempfile.TemporaryDirectory() as tmp:
        source, binary = Path(tmp) / "layout.cpp", Path(tmp) / "layout"
        source.write_text("\n".join(lines))
        subprocess.run([cc, *(f"-I{f}" for f in folders), str(source), "-o", str(binary)],
                       check=True, capture_output=True, text=True)  # fmt: skip
        return json.loads(subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout)


def mismatches(structs: list[type[ctypes.Structure]], layout: dict[str, dict]) -> list[str]:
    """Where a ctypes struct differs from the header's: its size, its STRUCT_SIZE, a field's offset."""
    out = []
    for cls in structs:
        c = layout[cls.C_NAME]
        if ctypes.sizeof(cls) != c["sizeof"]:
            out.append(f"{cls.C_NAME}: sizeof {ctypes.sizeof(cls)} != {c['sizeof']}")
        if c["struct_size"] != -1 and c["struct_size"] != cls.STRUCT_SIZE:
            out.append(f"{cls.C_NAME}: STRUCT_SIZE {cls.STRUCT_SIZE} != {c['struct_size']}")
        for field, _ in cls._fields_:
            if getattr(cls, field).offset != c["offsets"][field]:
                out.append(f"{cls.C_NAME}.{field}: offset {getattr(cls, field).offset} != {c['offsets'][field]}")
    return out
