"""Optional memcheck stage: compute-sanitizer's memcheck on the torch-free launcher (which runs only the
candidate's launches), its findings parsed into kind, kernel, address, block and thread."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, Field

from tools import procs
from tools.gpu import launcher
from tools.plan import LaunchPlan
from tools.schema import Stage, StageResult, StageState

_PREFIX = re.compile(r"^=+\s?")
_KIND = re.compile(
    r"^(Invalid|Misaligned|Out-of-range|Cuda API error|Program hit|Malloc|Free|Barrier|Warp|Illegal|Error: Race)"
)
_SIZE = re.compile(r"of size (\d+) bytes?")
_AT = re.compile(r"^(?:and \w+ access )?at (?:0x[0-9a-f]+ in )?([\w$.]+)\+?(0x[0-9a-f]+)?(?: in (\S+):(\d+))?")
_RACE = re.compile(r"(Write|Read) access at ([\w$.]+)\+(0x[0-9a-f]+)(?: in (\S+):(\d+))?")
_WHO = re.compile(r"by thread \((\d+),(\d+),(\d+)\) in block \((\d+),(\d+),(\d+)\)")
_ACCESS = re.compile(r"(?:Address|Access to) (0x[0-9a-f]+)(.*)")
_NEAREST = re.compile(
    r"and is ([\d,]+) bytes (after|before) the nearest allocation at (0x[0-9a-f]+) of size ([\d,]+) bytes"
)
MAX_FINDINGS = 20


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

    def line_text(self) -> str:
        where = f" in {self.kernel}{'+' + self.offset if self.offset else ''}" if self.kernel else ""
        if self.line is not None:
            where += f" ({self.file}:{self.line})"
        who = f" by thread {tuple(self.thread)} of block {tuple(self.block)}" if self.thread else ""
        addr = f" at {self.address}{(' ' + self.note) if self.note else ''}" if self.address else ""
        return f"{self.kind}{where}{who}{addr}"


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


def find_sanitizer() -> Path | None:
    candidates = [
        os.environ.get("PTXBENCH_SANITIZER"),
        shutil.which("compute-sanitizer"),
        "/usr/local/cuda/bin/compute-sanitizer",
    ]
    if os.environ.get("CUDA_HOME"):
        candidates.append(os.path.join(os.environ["CUDA_HOME"], "bin", "compute-sanitizer"))
    return next((Path(c) for c in candidates if c and Path(c).is_file()), None)


def memcheck_stage(cubin: bytes, plan: LaunchPlan, device: int, timeout_s: float) -> StageResult:
    start = time.perf_counter()
    sanitizer = find_sanitizer()
    if sanitizer is None:
        return _result(StageState.SKIPPED, "compute-sanitizer is not installed here", start)
    kernels = sorted({launch.kernel for launch in plan.launches})
    with tempfile.TemporaryDirectory(prefix=procs.temp_prefix("memcheck")) as tmp:
        bundle = launcher.write_bundle(Path(tmp) / "bundle", cubin, plan)
        cmd = [str(sanitizer), "--tool", "memcheck", "--print-limit", str(MAX_FINDINGS)]
        if len(kernels) == 1:
            cmd += ["--kernel-name", f"kns={kernels[0]}"]
        try:
            done = procs.run([*cmd, *launcher.command(bundle)], timeout_s, env=launcher.environment(device))
        except subprocess.TimeoutExpired:
            return _result(StageState.SKIPPED, f"compute-sanitizer did not finish within {timeout_s:.0f} s", start)
    output = done.stdout + done.stderr
    findings = parse_findings(output)
    summary = re.search(r"ERROR SUMMARY: (\d+) error", output)
    if summary is None and not findings:
        tail = " ".join(output.split())[-500:]
        return _result(StageState.SKIPPED, f"compute-sanitizer gave no summary: {tail}", start)
    if not findings:
        return _result(StageState.PASSED, "memcheck: no errors", start, {"errors": 0})
    errors = int(summary.group(1)) if summary else len(findings)
    message = f"{errors} memory error(s); first: " + "; ".join(f.line_text() for f in findings[:5])
    detail = {"errors": errors, "findings": [f.model_dump() for f in findings]}
    return _result(StageState.FAILED, message, start, detail)


def _result(state: StageState, message: str, start: float, detail: dict | None = None) -> StageResult:
    return StageResult(
        name=Stage.MEMCHECK, state=state, message=message, detail=detail or {}, seconds=time.perf_counter() - start
    )
