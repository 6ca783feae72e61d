"""PTX → cubin with the ptxas binary (`-v`, which keeps setmaxnreg, unlike nvJitLink), and CUDA C++ →
PTX → cubin through NVRTC. Results carry per-kernel resources and diagnostics that quote the
offending line; CUDA diagnostics point at the user's lines, also when ptxas rejects inline PTX. Every
warning and info line the compilers print is a diagnostic (only the `-v` resource report is parsed
instead), attributed to the kernel it names; those that say the kernel runs slowly carry their usual cause
(tools/ptxas_advice.py)."""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from tasks.schema import Arch
from tools import nvrtc, procs, ptxas_advice
from tools import ptx as ptx_text
from tools.toolchain import ToolNotFound, find_tool

MAX_SOURCE_BYTES = 16 << 20
# ptxas's address space: a huge unrolled module once took 2.9 GB; beyond this it fails with a memory error.
PTXAS_MEMORY_BYTES = 4 << 30
# Diagnostics kept per compile: a broken 5 MB module can yield 80,000, which would all land in the run folder.
MAX_DIAGNOSTICS = 50
PTX_NAME = "kernel.ptx"
_PTXAS_LINE = re.compile(
    r"^ptxas(?: (?P<file>[^,]+), line (?P<line>\d+))?;?\s*(?P<sev>error|warning|fatal|info)\s*:\s*(?P<msg>.*)$"
)
_NVRTC_LINE = re.compile(
    rf"^{re.escape(nvrtc.SOURCE_NAME)}\((?P<line>\d+)\): (?P<sev>catastrophic error|fatal error|error|warning)"
    r"[^:]*: (?P<msg>.*)$"
)
_ENTRY_START = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
# "Used 58 registers, used 1 barriers, 4104 bytes smem, 400 bytes cmem[0]": the parts after registers are optional
_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")
_ARCH_TARGET = re.compile(r"sm_(\d+)([af]?)")
# The `-v` resource report: parsed into KernelResources, not diagnostics.
_REPORT = re.compile(
    r"^(Compiling entry function|Function properties for|Used \d+ registers|\d+ bytes gmem|Compile time)"
)
_AROUND_LINE = re.compile(r"\baround line (\d+)")
_NAMED_FUNCTION = re.compile(r"\b(?:in|for) (?:the )?function '([^']+)'")
# Warnings ptxas prints only when asked: a kernel that spills or uses local memory runs slowly, so say so.
PTXAS_WARNINGS = ("--warn-on-spills", "--warn-on-local-memory-usage")


class Diagnostic(BaseModel):
    line: int | None = Field(description="Line in the user's source (PTX, or CUDA for a CUDA answer).")
    severity: Literal["error", "warning", "info"]
    message: str = Field(description="As the compiler wrote it (a hint of ours may follow in parentheses).")
    source_line: str | None = Field(None, description="The offending line, quoted.")
    ptx_line: int | None = Field(None, description="For CUDA answers: the line in the generated PTX.")
    kernel: str | None = Field(
        None, description="The function the message is about (named in it, or holding its line); None: the module."
    )
    performance: str | None = Field(
        None,
        description="Set when the message says the kernel runs slowly: its usual cause, in one line ('' "
        "when ptxas's words are all we know).",
    )

    def render(self) -> str:
        where = f"line {self.line}" if self.line else "module"
        text = f"{where}: {self.severity}: {self.message}"
        if self.source_line:
            text += f"\n    {self.source_line}"
        return text


class KernelResources(BaseModel):
    name: str
    registers: int = 0
    shared_bytes: int = Field(0, description="Static shared memory.")
    stack_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    barriers: int = 0


class CompileResult(BaseModel):
    ok: bool
    arch: Arch
    language: Literal["ptx", "cuda"]
    ptx: str = Field("", description="The PTX handed to ptxas (NVRTC's output for CUDA).", repr=False)
    cubin: bytes | None = Field(None, exclude=True, repr=False)
    kernels: list[KernelResources] = Field(default_factory=list)
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    diagnostics_omitted: int = Field(0, description=f"Diagnostics beyond the first {MAX_DIAGNOSTICS}, counted only.")
    toolchain: dict[str, str] = Field(default_factory=dict)
    seconds: float = 0.0
    log: str = Field("", description="The compilers' raw output.")

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    def add(self, diagnostics: list[Diagnostic]) -> None:
        """Keep diagnostics up to MAX_DIAGNOSTICS; count the rest."""
        room = max(MAX_DIAGNOSTICS - len(self.diagnostics), 0)
        self.diagnostics += diagnostics[:room]
        self.diagnostics_omitted += max(len(diagnostics) - room, 0)

    def message(self, limit: int = 10) -> str:
        shown = self.errors[:limit] or self.diagnostics[:limit]
        lines = [d.render() for d in shown]
        if len(self.errors) > limit:
            lines.append(f"… and {len(self.errors) - limit} more errors")
        if self.diagnostics_omitted:
            lines.append(f"… and {self.diagnostics_omitted:,} more diagnostics, not kept")
        return "\n".join(lines)


def compile_source(language: Literal["ptx", "cuda"], source: str, arch: Arch, timeout_s: float = 60.0) -> CompileResult:
    """`timeout_s` bounds NVRTC and ptxas together."""
    if language == "cuda":
        return compile_cuda(source, arch, timeout_s)
    return compile_ptx(source, arch, timeout_s)


def compile_ptx(ptx: str, arch: Arch, timeout_s: float = 60.0, line_info: bool = False) -> CompileResult:
    """`line_info`: keep the module's `.loc` lines in the cubin (`ptxas -lineinfo`), for a diagnosis copy."""
    start = time.perf_counter()
    result = CompileResult(ok=False, arch=arch, language="ptx", ptx=ptx)
    problem = _precheck_ptx(ptx, arch)
    if problem:
        result.diagnostics.append(problem)
    else:
        _assemble(result, ptx, arch, procs.Budget(timeout_s), line_info=line_info)
    result.seconds = time.perf_counter() - start
    return result


def compile_cuda(source: str, arch: Arch, timeout_s: float = 60.0) -> CompileResult:
    start = time.perf_counter()
    result = CompileResult(ok=False, arch=arch, language="cuda")
    lines = source.splitlines()
    if len(source.encode()) > MAX_SOURCE_BYTES:
        result.diagnostics.append(_module_error(f"the source is over the {MAX_SOURCE_BYTES >> 20} MB cap"))
        return result
    if "\0" in source:  # NVRTC takes a C string: it would compile only what comes before the first NUL
        result.diagnostics.append(_module_error("the source holds NUL bytes: it is not CUDA text"))
        return result
    try:
        nvrtc.check_includes(source)
    except nvrtc.IncludeRefused as e:
        result.diagnostics.append(Diagnostic(line=e.line, severity="error", message=str(e),
                                             source_line=_quote(lines, e.line)))  # fmt: skip
        return result
    budget = procs.Budget(timeout_s)
    ptx, log = nvrtc.lower_to_ptx(source, str(arch), budget)
    result.toolchain["nvrtc"] = nvrtc.version()
    result.log = log
    result.add(_nvrtc_diagnostics(log, lines))
    if ptx is None:
        if not result.errors:
            result.diagnostics.append(_module_error(log.strip() or "NVRTC failed without a message"))
    else:
        result.ptx = ptx
        _assemble(result, ptx, arch, budget, cuda_lines=lines)
    result.seconds = time.perf_counter() - start
    return result


def _module_error(message: str) -> Diagnostic:
    return Diagnostic(line=None, severity="error", message=message)


def _quote(lines: list[str], number: int | None) -> str | None:
    if number and 0 < number <= len(lines):
        return ptx_text.elide_lists(lines[number - 1].strip())
    return None


def _precheck_ptx(ptx: str, arch: Arch) -> Diagnostic | None:
    if len(ptx.encode()) > MAX_SOURCE_BYTES:
        return _module_error(f"the PTX is over the {MAX_SOURCE_BYTES >> 20} MB cap")
    if "\0" in ptx:
        return _module_error("the source holds NUL bytes: it is not PTX text")
    target = ptx_text.directives(ptx).get("target")
    if target is None:
        return _module_error(f"no .target directive: a PTX module starts with .version and `.target {arch}`")
    m = _ARCH_TARGET.search(target)
    wanted = int(arch.compute_capability[0] * 10 + arch.compute_capability[1])
    if m and (int(m.group(1)) != wanted and (m.group(2) or int(m.group(1)) > wanted)):
        return _module_error(f"the module is written for .target {target}, but this task is for {arch}: "
                             f"write `.target {arch}`")  # fmt: skip
    return None


def _assemble(
    result: CompileResult, ptx: str, arch: Arch, budget: procs.Budget, cuda_lines: list[str] | None = None,
    line_info: bool = False,
) -> None:  # fmt: skip
    try:
        ptxas = find_tool("ptxas")
    except ToolNotFound as e:
        result.diagnostics.append(_module_error(str(e)))
        return
    result.toolchain["ptxas"] = f"{ptxas.version} ({ptxas.origin})"
    with tempfile.TemporaryDirectory(prefix=procs.temp_prefix("ptxas")) as tmp:
        src, out = Path(tmp) / PTX_NAME, Path(tmp) / "kernel.cubin"
        src.write_text(ptx)
        cmd = [str(ptxas.path), f"-arch={arch}", "-v", *PTXAS_WARNINGS, *(["-lineinfo"] if line_info else []),
               "-o", str(out), str(src)]  # fmt: skip
        try:
            done = procs.run(cmd, budget.left(), memory_bytes=PTXAS_MEMORY_BYTES, cwd=tmp)
        except subprocess.TimeoutExpired:
            result.diagnostics.append(_module_error(budget.exceeded("ptxas")))
            return
        log = (done.stdout + done.stderr).replace(str(src), PTX_NAME)
        result.log = (result.log + "\n" + log).strip()
        result.kernels = _resources(log)
        result.add(_ptxas_diagnostics(log, ptx.splitlines(), cuda_lines))
        if done.returncode == 0 and out.is_file():
            result.cubin = out.read_bytes()
            result.ok = True
        elif not result.errors:
            result.diagnostics.append(_module_error(f"ptxas failed (exit {done.returncode}): {log.strip()[-1000:]}"))


def _resources(log: str) -> list[KernelResources]:
    kernels: dict[str, KernelResources] = {}
    current: KernelResources | None = None
    for line in log.splitlines():
        if m := _ENTRY_START.search(line):
            current = kernels.setdefault(m.group(1), KernelResources(name=m.group(1)))
        elif "Function properties for" in line:
            name = line.rsplit(" ", 1)[-1]
            current = kernels.get(name)  # .func properties are not an entry's
        elif current is not None and (m := _PROPERTIES.search(line)):
            current.stack_bytes, current.spill_stores, current.spill_loads = map(int, m.groups())
        elif current is not None and (m := _USED.search(line)):
            registers, barriers, smem = m.groups()
            current.registers, current.barriers, current.shared_bytes = (
                int(registers),
                int(barriers or 0),
                int(smem or 0),
            )
    return list(kernels.values())


def _ptxas_diagnostics(log: str, ptx_lines: list[str], cuda_lines: list[str] | None) -> list[Diagnostic]:
    out = []
    loc_map = _cuda_line_map(ptx_lines) if cuda_lines is not None else None
    functions = _function_spans(ptx_lines)
    for line in log.splitlines():
        m = _PTXAS_LINE.match(line.strip())
        if not m or _REPORT.match(m.group("msg")) or "assembly aborted due to errors" in m.group("msg"):
            continue
        severity = m.group("sev") if m.group("sev") in ("warning", "info") else "error"
        message = m.group("msg").strip()
        if "Unsupported .version" in message:
            message += " (ptxas here accepts PTX up to the version it names: change the .version line)"
        if "Memory allocation failure" in message:
            message += f" (ptxas may use {PTXAS_MEMORY_BYTES / 2**30:g} GiB here: make the module smaller)"
        around = _AROUND_LINE.search(message)
        ptx_line = int(m.group("line")) if m.group("line") else int(around.group(1)) if around else None
        named = _NAMED_FUNCTION.search(message)
        notes = {"kernel": named.group(1) if named else _function_at(functions, ptx_line),
                 "performance": ptxas_advice.performance_cause(message) if severity != "error" else None}  # fmt: skip
        if loc_map is None:
            out.append(Diagnostic(line=ptx_line, severity=severity, message=message,
                                  source_line=_quote(ptx_lines, ptx_line), **notes))  # fmt: skip
            continue
        cuda_line = loc_map.get(ptx_line) if ptx_line else None
        quoted_ptx = _quote(ptx_lines, ptx_line)
        if quoted_ptx:
            message += f" (generated PTX line {ptx_line}: `{quoted_ptx}`)"
        out.append(Diagnostic(line=cuda_line, severity=severity, message=message,
                              source_line=_quote(cuda_lines, cuda_line), ptx_line=ptx_line, **notes))  # fmt: skip
    return out


_FUNCTION_START = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)")


def _function_spans(ptx_lines: list[str]) -> list[tuple[int, str]]:
    """(first line, name) of every .entry and .func defined in the module, in order; a module with one
    function owns its messages that name none."""
    return [(n, m.group(1)) for n, line in enumerate(ptx_lines, start=1) if (m := _FUNCTION_START.match(line))]


def _function_at(functions: list[tuple[int, str]], line: int | None) -> str | None:
    if line is None:
        return functions[0][1] if len(functions) == 1 else None
    return next((name for start, name in reversed(functions) if start <= line), None)


def group_by_kernel(diagnostics: list[Diagnostic]) -> dict[str | None, list[Diagnostic]]:
    """Diagnostics per kernel, in the order the kernels first appear; None: about the module as a whole."""
    groups: dict[str | None, list[Diagnostic]] = {}
    for d in diagnostics:
        groups.setdefault(d.kernel, []).append(d)
    return groups


def render_grouped(diagnostics: list[Diagnostic], causes: bool = False) -> str:
    """Diagnostics as `- kernel NAME:` groups of rendered lines; `causes`: each performance message followed by
    its usual cause."""
    out = []
    for kernel, group in group_by_kernel(diagnostics).items():
        out.append(f"- kernel {kernel}:" if kernel else "- the module:")
        for d in group:
            out.append(f"  {f'line {d.line}: ' if d.line else ''}{d.severity}: {d.message}")
            if d.source_line:
                out.append(f"      {d.source_line}")
            if causes and d.performance:
                out.append(f"    usual cause: {d.performance}")
    return "\n".join(out)


_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"')


def _cuda_line_map(ptx_lines: list[str]) -> dict[int, int]:
    """PTX line → the user's CUDA line from the nearest preceding `.loc` of the answer's file."""
    files = {m.group(1) for line in ptx_lines if (m := _FILE.match(line)) and m.group(2).endswith(nvrtc.SOURCE_NAME)}
    mapping, current = {}, None
    for number, line in enumerate(ptx_lines, start=1):
        if (m := _LOC.match(line)) and m.group(1) in files:
            current = int(m.group(2))
        if current is not None:
            mapping[number] = current
    return mapping


def _nvrtc_diagnostics(log: str, lines: list[str]) -> list[Diagnostic]:
    out = []
    for raw in log.splitlines():
        m = _NVRTC_LINE.match(raw.strip())
        if m:
            line = int(m.group("line"))
            severity = "warning" if m.group("sev") == "warning" else "error"
            out.append(Diagnostic(line=line, severity=severity, message=m.group("msg").strip(),
                                  source_line=_quote(lines, line)))  # fmt: skip
    return out
