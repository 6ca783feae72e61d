"""A diagnosis-only copy of a compiled module that carries line information, so that compute-sanitizer names the
answer's own line of a faulting instruction. The cubin that is checked, timed and profiled is never this one.

A PTX answer's copy has every statement tagged with its line in the answer (`.loc`, one `.file` naming
kernel.ptx); whatever `.file`/`.loc` lines and DWARF sections the module carried (Triton's output does) are
dropped first, since they name other files. A CUDA answer's PTX keeps NVRTC's `.loc` lines: they name answer.cu.
Both are assembled with `ptxas -lineinfo`.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from tasks.schema import Arch
from tools import ptx as ptx_text
from tools.assemble import PTX_NAME, compile_ptx

_FILE_OR_LOC = re.compile(r"^[ \t]*\.(?:file|loc)\b")
_DEBUG_SECTION = re.compile(r"^[ \t]*\.section[ \t]+\.debug")
# Where a statement can start: a predicate guard or an opcode, after any labels on the same line.
_STATEMENT_START = re.compile(r"^(?:[\w$]+:\s*)*(?:@|[a-z])")
_ENDS_STATEMENT = (";", "{", "}", ":")


class DiagnosisCopy(BaseModel):
    """The line-info copy's cubin, or why there is none (the findings then name SASS offsets only)."""

    cubin: bytes | None = None
    note: str = ""


def tag_lines(ptx: str) -> str:
    """`ptx` with each statement inside a function body preceded by `.loc 1 N 0`, N its line in `ptx`, and
    `.file 1 "kernel.ptx"` at the end; the module's own `.file`/`.loc` lines and debug sections removed."""
    lines = ptx.splitlines()
    code = ptx_text.strip_comments(ptx).splitlines()  # the same line count: comments become blank lines
    out: list[str] = []
    depth, open_statement = 0, False
    section: int | None = None  # brace depth inside a debug section; None outside one
    section_opened = False
    for number, (line, text) in enumerate(zip(lines, code, strict=False), start=1):
        stripped = text.strip()
        braces = stripped.count("{") - stripped.count("}")
        if section is None and _DEBUG_SECTION.match(text):
            section, section_opened = 0, False
        if section is not None:  # a DWARF section names the module's own files: drop it whole
            section += braces
            section_opened = section_opened or "{" in stripped
            if section_opened and section <= 0:
                section = None
            continue
        if _FILE_OR_LOC.match(text):
            continue
        if depth > 0 and not open_statement and _STATEMENT_START.match(stripped):
            out.append(f"\t.loc\t1 {number} 0")
        out.append(line)
        depth += braces
        if stripped:
            open_statement = not stripped.endswith(_ENDS_STATEMENT) and not stripped.startswith(".")
    out.append(f'\t.file\t1 "{PTX_NAME}"')
    return "\n".join(out) + "\n"


def diagnosis_copy(language: str, ptx: str, arch: Arch, timeout_s: float) -> DiagnosisCopy:
    """The module assembled again with line information (`timeout_s`: the static stages' limit)."""
    source = tag_lines(ptx) if language == "ptx" else ptx
    compiled = compile_ptx(source, arch, timeout_s, line_info=True)
    if compiled.ok:
        return DiagnosisCopy(cubin=compiled.cubin)
    return DiagnosisCopy(note=f"the copy with line information did not assemble ({compiled.message(limit=1)})")
