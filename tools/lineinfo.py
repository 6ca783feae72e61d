"""A diagnosis-only copy of a compiled module that carries line information, so that compute-sanitizer names the
answer's own line of a faulting instruction. The cubin that is checked, timed and profiled is never this one.

Its line table (`line_table`) maps each kernel's SASS offsets to the answer's lines, for the findings of tools that
look at the module itself (a hang's warps, Nsight Compute's per-instruction counters): the copy compiles to the same
SASS as the module (ptxas -lineinfo changes no code; checked each time), so an offset in one is the same
instruction in the other.

A PTX answer's copy has every statement tagged with its line in the answer (`.loc`, one `.file` naming
kernel.ptx); whatever `.file`/`.loc` lines and DWARF sections the module carried (Triton's output does) are
dropped first, since they name other files. A CUDA answer's PTX keeps NVRTC's `.loc` lines: they name answer.cu.
Both are assembled with `ptxas -lineinfo`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePath

from pydantic import BaseModel

from tasks.schema import Arch
from tools import procs, sass
from tools import ptx as ptx_text
from tools.assemble import PTX_NAME, compile_ptx
from tools.nvrtc import SOURCE_NAME

_FILE_OR_LOC = re.compile(r"^[ \t]*\.(?:file|loc)\b")
_DEBUG_SECTION = re.compile(r"^[ \t]*\.section[ \t]+\.debug")
# Where a statement can start: a predicate guard or an opcode, after any labels on the same line.
_STATEMENT_START = re.compile(r"^(?:[\w$]+:\s*)*(?:@|[a-z])")
_ENDS_STATEMENT = (";", "{", "}", ":")
_SECTION = re.compile(r"^\s*\.text\.([\w$.]+):")
_LINE_MARK = re.compile(r'^\s*//## File "([^"]+)", line (\d+)')
_INSTRUCTION_AT = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*$")
QUOTE_CHARS = 200


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


@dataclass
class LineTable:
    """Each kernel's SASS offsets → (file, line) of the answer, or why there is no table."""

    lines: dict[str, dict[int, tuple[str, int]]] = field(default_factory=dict)
    note: str = ""

    def at(self, kernel: str, offset: int) -> tuple[str, int] | None:
        """The line of the instruction at `offset` (or of the last one before it: a PC inside an instruction's
        encoding), None when the kernel or offset is not in the table."""
        table = self.lines.get(kernel) or {}
        before = [o for o in table if o <= offset]
        return table[max(before)] if before else None


def parse_line_table(listing: str) -> dict[str, dict[int, tuple[str, int]]]:
    """nvdisasm -g's listing → kernel → offset → (file name, line). An instruction after no `//## File` mark of its
    kernel has no line; one after a mark has the last mark's."""
    table: dict[str, dict[int, tuple[str, int]]] = {}
    kernel, where = None, None
    for text in listing.splitlines():
        if m := _SECTION.match(text):
            kernel, where = m.group(1), None
            table.setdefault(kernel, {})
        elif m := _LINE_MARK.match(text):  # NVRTC names answer.cu by the folder it ran in: the name is the file
            where = (PurePath(m.group(1)).name, int(m.group(2)))
        elif kernel and where and (m := _INSTRUCTION_AT.match(text)):
            table[kernel][int(m.group(1), 16)] = where
    return table


def _instructions(listing: str) -> list[str]:
    return [text.strip() for text in listing.splitlines() if _INSTRUCTION_AT.match(text)]


def line_table(language: str, ptx: str, cubin: bytes, arch: Arch, budget: procs.Budget) -> LineTable:
    """The line table of the module `cubin` (assembled from `ptx`), read from its diagnosis copy within `budget`."""
    copy = diagnosis_copy(language, ptx, arch, budget.left())
    if copy.cubin is None:
        return LineTable(note=copy.note)
    try:
        tagged = sass.disassemble(copy.cubin, budget, line_info=True)
        plain = sass.disassemble(cubin, budget)
    except sass.SassError as e:
        return LineTable(note=f"no line table: {e}")
    if _instructions(tagged) != _instructions(plain):
        return LineTable(note="the copy with line information compiled to other SASS than the module that ran")
    return LineTable(lines=parse_line_table(tagged))


def answer_sources(language: str, ptx: str, cuda_source: str | None) -> dict[str, list[str]]:
    """The answer's own lines by the file name a line table gives them: answer.cu for CUDA, kernel.ptx for PTX."""
    if language == "cuda":
        return {SOURCE_NAME: (cuda_source or "").splitlines()}
    return {PTX_NAME: ptx.splitlines()}


def quote(file: str | None, line: object, sources: dict[str, list[str]]) -> str | None:
    """Line `line` of `file` as the answer wrote it (long operand lists elided), None when there is no such line."""
    lines = sources.get(file or "")
    if isinstance(line, int) and lines and 0 < line <= len(lines):
        return ptx_text.elide_lists(lines[line - 1].strip(), QUOTE_CHARS)
    return None


def where(file: str | None, line: object) -> str:
    """`line 20` for the answer's PTX (kernel.ptx), else `answer.cu line 4`."""
    return f"line {line}" if file in (None, PTX_NAME) else f"{file} line {line}"
