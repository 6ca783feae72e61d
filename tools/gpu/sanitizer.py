"""compute-sanitizer on the torch-free launcher, which runs only the candidate's launches: memcheck (after a fault,
or when asked) and racecheck (on a mismatch, when asked). Its report is parsed into findings — kind, kernel and
SASS offset, the source line the cubin's line information names, block and thread, address — and each is told in
the answer's own terms: its line quoted, a global address placed against the task tensors and scratch buffers the
launcher allocated ("4 bytes at 0 bytes past the end of C")."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, Field

from tasks.schema import DTYPE_BYTES, Arch
from tools import pointers, procs
from tools import ptx as ptx_text
from tools.assemble import PTX_NAME
from tools.evaluation import Stage, StageResult, StageState
from tools.gpu import launcher
from tools.gpu.base import CompiledModule
from tools.lineinfo import answer_sources, diagnosis_copy, quote, where
from tools.nvrtc import SOURCE_NAME
from tools.plan import LaunchPlan

TOOLS = {Stage.MEMCHECK: "memcheck", Stage.RACECHECK: "racecheck"}
_PREFIX = re.compile(r"^=+\s?")
_KIND = re.compile(
    r"^(Invalid|Misaligned|Out-of-range|Cuda API error|Program hit|Malloc|Free|Barrier|Warp|Illegal|Error: Race)"
)
_SIZE = re.compile(r"of size (\d+) bytes?")
_AT = re.compile(r"^(?:and \w+ access )?at (?:0x[0-9a-f]+ in )?([\w$.]+)\+?(0x[0-9a-f]+)?(?: in (\S+):(\d+))?")
_RACE = re.compile(r"(Write|Read) access at ([\w$.]+)\+(0x[0-9a-f]+)(?: in (\S+):(\d+))?")
_HAZARDS = re.compile(r"\[(\d+) hazards?\]")
_WHO = re.compile(r"by thread \((\d+),(\d+),(\d+)\) in block \((\d+),(\d+),(\d+)\)")
_ACCESS = re.compile(r"(?:Address|Access to) (0x[0-9a-f]+)(.*)")
_NEAREST = re.compile(
    r"and is ([\d,]+) bytes (after|before) the nearest allocation at (0x[0-9a-f]+) of size ([\d,]+) bytes"
)
_SUMMARY = re.compile(r"(?:ERROR|RACECHECK) SUMMARY: (\d+) (?:error|hazard)")
MAX_FINDINGS = 20
SITES_SHOWN = 5


class Finding(BaseModel):
    """One error compute-sanitizer reported: what, where in the code (the SASS offset, and the source line
    when the cubin carries line information), who, and which address."""

    kind: str
    kernel: str | None = None
    offset: str | None = None
    file: str | None = Field(None, description="Source file of the faulting instruction (line info only).")
    line: int | None = None
    access_bytes: int | None = None
    thread: list[int] | None = None
    block: list[int] | None = None
    address: str | None = None
    note: str | None = None
    nearest: dict[str, int | str] | None = Field(
        None, description="The sanitizer's nearest allocation: base, size, and bytes after/before it."
    )
    other: dict[str, str | int | None] | None = Field(None, description="A race's other access: kind, offset, line.")
    hazards: int | None = Field(None, description="A race's hazard count.")
    quoted: str | None = Field(None, description="The source line the finding names, as the answer wrote it.")
    other_quoted: str | None = Field(None, description="A race's other source line.")
    placed: str | None = Field(None, description="Where the address lies among the task's buffers.")

    def line_text(self) -> str:
        """One line for the model: what, at which line (quoted) and instruction, by whom, at which address."""
        at = f" at {where(self.file, self.line)}" if self.line is not None else ""
        if self.quoted:
            at += f": `{self.quoted}`"
        code = f"{self.kernel}{'+' + self.offset if self.offset else ''}" if self.kernel else None
        text = f"{self.kind}{at}" + (f" ({code})" if code else "")
        if self.other is not None:
            line = self.other.get("line")
            other = f"{where(self.file, line)}" if line is not None else f"+{self.other.get('offset')}"
            text += f" and {self.other.get('access')} access at {other}"
            text += f": `{self.other_quoted}`" if self.other_quoted else ""
            text += f" [{self.hazards:,} hazards]" if self.hazards else ""
        if self.thread:
            text += f", thread {tuple(self.thread)} of block {tuple(self.block)}"
        if self.address:
            text += f": address {self.address}" + (f", {self.placed}" if self.placed else "")
        return text


def parse_findings(output: str) -> list[Finding]:
    """compute-sanitizer's report (memcheck or racecheck) as findings, host backtraces left out."""
    findings: list[Finding] = []
    for raw in output.splitlines():
        if not raw.startswith("="):
            continue
        line = _PREFIX.sub("", raw).strip()
        if _KIND.match(line):
            size = _SIZE.search(line)
            finding = Finding(kind=line.split(" at ")[0] if line.startswith("Error: Race") else line,
                              access_bytes=int(size.group(1)) if size else None)  # fmt: skip
            if race := _RACE.search(line):
                finding.kernel, finding.offset = race.group(2), race.group(3)
                finding.file, finding.line = race.group(4), int(race.group(5)) if race.group(5) else None
            findings.append(finding)
        elif not findings:
            continue
        elif (race := _RACE.search(line)) and findings[-1].kind.startswith("Error: Race"):
            findings[-1].other = {"access": race.group(1), "offset": race.group(3),
                                  "line": int(race.group(5)) if race.group(5) else None}  # fmt: skip
            if hazards := _HAZARDS.search(line):
                findings[-1].hazards = int(hazards.group(1))
        elif m := _AT.match(line):
            current = findings[-1]
            current.kernel = current.kernel or m.group(1)
            current.offset = current.offset or m.group(2)
            if m.group(4) and current.line is None:
                current.file, current.line = m.group(3), int(m.group(4))
        elif m := _WHO.search(line):
            findings[-1].thread = [int(x) for x in m.group(1, 2, 3)]
            findings[-1].block = [int(x) for x in m.group(4, 5, 6)]
        elif m := _ACCESS.search(line):
            findings[-1].address, findings[-1].note = m.group(1), m.group(2).strip() or None
        elif m := _NEAREST.search(line):
            findings[-1].nearest = {"bytes": int(m.group(1).replace(",", "")), "side": m.group(2),
                                    "base": m.group(3), "size": int(m.group(4).replace(",", ""))}  # fmt: skip
    return findings[:MAX_FINDINGS]


# ------------------------------------------------------------------------------- in the answer's terms


class Allocation(BaseModel):
    """A buffer as the launcher allocated it: a task tensor or a scratch buffer."""

    name: str
    address: int
    bytes: int
    dtype: str
    shape: list[int]


def allocations(plan: LaunchPlan, addresses: dict[str, int]) -> list[Allocation]:
    return [
        Allocation(name=b.name, address=addresses[b.name], bytes=math.prod(b.shape) * DTYPE_BYTES[b.dtype],
                   dtype=b.dtype, shape=b.shape)
        for b in plan.buffers
        if b.name in addresses
    ]  # fmt: skip


def place(address: int, size: int | None, buffers: list[Allocation], origin: str | None = None) -> str | None:
    """Where a global address lies: against `origin` when the access is known to be computed from that buffer's
    pointer (tools/pointers.py), else against the nearest buffer — inside it (byte offset and element index),
    or how far before its start or past its end. An address further from every buffer than the nearest one's
    own size is said to lie outside them all: nearness then tells nothing about which pointer was meant."""
    if not buffers:
        return None

    def distance(b: Allocation) -> int:
        if b.address <= address < b.address + b.bytes:
            return 0
        return min(abs(address - b.address), abs(address - b.address - b.bytes))

    known = next((b for b in buffers if b.name == origin), None)
    b = known or min(buffers, key=distance)
    what = f"{b.name} ({b.dtype} {b.shape}, {b.bytes:,} bytes)"
    pointer = " — the pointer this access is computed from" if known else ""
    if known is None and distance(b) > b.bytes:
        side = "before the start" if address < b.address else "past the end"
        return (f"outside every task buffer: {distance(b):,} bytes {side} of the nearest, {what} (an address this "
                "far off comes from a wrong base pointer or an index that overflowed)")  # fmt: skip
    if address < b.address:
        return f"{b.address - address:,} bytes before the start of {what}{pointer}"
    if address >= b.address + b.bytes:
        return f"{address - b.address - b.bytes:,} bytes past the end of {what}{pointer}"
    offset = address - b.address
    index = _unravel(offset // DTYPE_BYTES[b.dtype], b.shape)
    overrun = ", and the access runs past its end" if size and offset + size > b.bytes else ""
    return f"inside {what}, at byte {offset:,} = element {index}{overrun}{pointer}"


def _unravel(flat: int, shape: list[int]) -> list[int]:
    out = []
    for n in reversed(shape):
        out.append(flat % n)
        flat //= n
    return out[::-1]


def explain(findings: list[Finding], sources: dict[str, list[str]], buffers: list[Allocation],
            code: AccessCode | None = None) -> list[Finding]:  # fmt: skip
    """The findings with their lines quoted (`sources`: file name → lines) and global addresses placed, against
    the buffer the access's pointer comes from where `code` tells it."""
    for f in findings:
        f.quoted = quote(f.file, f.line, sources)
        if f.other is not None:
            f.other_quoted = quote(f.file, f.other.get("line"), sources)
        if f.address and "__global__" in f.kind:
            origin = code.tensor_of(f) if code else None
            f.placed = place(int(f.address, 16), f.access_bytes, buffers, origin)
    return findings


class AccessCode(BaseModel):
    """The module's PTX and launch plan, to tell which task tensor a faulting access's address comes from."""

    language: str
    ptx: str
    plan: LaunchPlan

    def tensor_of(self, f: Finding) -> str | None:
        """The one task buffer the access on the finding's line is computed from, or None when not one."""
        if f.line is None or f.kernel is None:
            return None
        if self.language == "cuda":
            lines = pointers.cuda_line_statements(self.ptx, SOURCE_NAME, f.line) if f.file == SOURCE_NAME else []
        else:
            lines = [f.line] if f.file in (None, PTX_NAME) else []
        params = {p for line in lines for p in pointers.origins(self.ptx, line)}
        entry = ptx_text.entries(self.ptx).get(f.kernel)
        launch = next((x for x in self.plan.launches if x.kernel == f.kernel), None)
        if entry is None or launch is None or len(entry.params) != len(launch.args):
            return None
        tensors = {launch.args[i].tensor for i, p in enumerate(entry.params) if p.name in params}
        tensors.discard(None)
        return tensors.pop() if len(tensors) == 1 else None


def summary(findings: list[Finding], errors: int) -> str:
    """The findings grouped by instruction (threads of one warp often hit the same one), first of each told."""
    sites: dict[tuple, list[Finding]] = {}
    for f in findings:
        sites.setdefault((f.kind, f.kernel, f.offset, f.line), []).append(f)
    lines = []
    for group in list(sites.values())[:SITES_SHOWN]:
        more = f" (and {len(group) - 1} more threads at the same instruction)" if len(group) > 1 else ""
        lines.append(f"- {group[0].line_text()}{more}")
    if len(sites) > SITES_SHOWN:
        lines.append(f"- … and {len(sites) - SITES_SHOWN} more instructions")
    shown = f"{len(findings)} of {errors:,} reported shown" if errors > len(findings) else f"{errors:,} reported"
    return f"({shown})\n" + "\n".join(lines)


# ------------------------------------------------------------------------------------------- running


def find_sanitizer() -> Path | None:
    candidates = [
        os.environ.get("PTXBENCH_SANITIZER"),
        shutil.which("compute-sanitizer"),
        "/usr/local/cuda/bin/compute-sanitizer",
    ]
    if os.environ.get("CUDA_HOME"):
        candidates.append(os.path.join(os.environ["CUDA_HOME"], "bin", "compute-sanitizer"))
    return next((Path(c) for c in candidates if c and Path(c).is_file()), None)


def sanitizer_stage(
    stage: Stage, cubin: bytes, plan: LaunchPlan, device: int, timeout_s: float,
    sources: dict[str, list[str]] | None = None, note: str = "", code: AccessCode | None = None,
) -> StageResult:  # fmt: skip
    """compute-sanitizer's `stage` tool (memcheck or racecheck) on the launch sequence: passed (nothing found),
    failed (the findings, told in the answer's terms), or skipped (no sanitizer, or it gave no report).
    `note` says what the findings lack (e.g. why there is no line information)."""
    start = time.perf_counter()
    tool = TOOLS[stage]
    sanitizer = find_sanitizer()
    if sanitizer is None:
        return _result(stage, StageState.SKIPPED, "compute-sanitizer is not installed here", start)
    kernels = sorted({launch.kernel for launch in plan.launches})
    with tempfile.TemporaryDirectory(prefix=procs.temp_prefix(tool)) as tmp:
        bundle = launcher.write_bundle(Path(tmp) / "bundle", cubin, plan)
        cmd = [str(sanitizer), "--tool", tool, "--print-limit", str(MAX_FINDINGS)]
        if len(kernels) == 1:
            cmd += ["--kernel-name", f"kns={kernels[0]}"]
        try:
            done = procs.run([*cmd, *launcher.command(bundle)], timeout_s, env=launcher.environment(device))
        except subprocess.TimeoutExpired:
            return _result(stage, StageState.SKIPPED, f"compute-sanitizer did not finish within {timeout_s:.0f} s",
                           start)  # fmt: skip
        written = bundle / launcher.ADDRESSES
        addresses = json.loads(written.read_text()) if written.is_file() else {}
    output = done.stdout + done.stderr
    findings = parse_findings(output)
    counted = _SUMMARY.search(output)
    if counted is None and not findings:
        tail = " ".join(output.split())[-500:]
        return _result(stage, StageState.SKIPPED, f"compute-sanitizer gave no summary: {tail}", start)
    if not findings:
        return _result(stage, StageState.PASSED, f"{tool}: nothing found", start, {"errors": 0})
    explain(findings, sources or {}, allocations(plan, addresses), code)
    errors = int(counted.group(1)) if counted else len(findings)
    what = "shared-memory race(s)" if stage is Stage.RACECHECK else "memory error(s)"
    message = f"compute-sanitizer {tool}: {what} " + summary(findings, errors) + (f"\n{note}" if note else "")
    detail = {"errors": errors, "findings": [f.model_dump() for f in findings], "addresses": addresses}
    return _result(stage, StageState.FAILED, message, start, detail)


def _result(stage: Stage, state: StageState, message: str, start: float, detail: dict | None = None) -> StageResult:
    return StageResult(name=stage, state=state, message=message, detail=detail or {},
                       seconds=time.perf_counter() - start)  # fmt: skip


def sanitize_module(
    stage: Stage, module: CompiledModule, arch: Arch, device: int, timeout_s: float, static_timeout_s: float
) -> StageResult:
    """`stage`'s tool on a copy of the module assembled with line information (tools/lineinfo.py; within the
    static stages' limit), its findings quoting the answer's PTX or CUDA lines; on the module itself, with SASS
    offsets only, when the copy does not assemble."""
    copy = diagnosis_copy(module.language, module.ptx, arch, static_timeout_s)
    sources = answer_sources(module.language, module.ptx, module.cuda_source)
    note = f"No source lines: {copy.note}." if copy.cubin is None else ""
    code = AccessCode(language=module.language, ptx=module.ptx, plan=module.plan)
    return sanitizer_stage(stage, copy.cubin or module.cubin, module.plan, device, timeout_s, sources, note, code)
