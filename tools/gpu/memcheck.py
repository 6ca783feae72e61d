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

from pydantic import BaseModel

from tools.gpu import launcher
from tools.plan import LaunchPlan
from tools.schema import Stage, StageResult, StageState

_PREFIX = re.compile(r"^=+\s?")
_KIND = re.compile(r"^(Invalid|Misaligned|Out-of-range|Cuda API error|Program hit|Malloc|Free|Barrier|Warp|Illegal)")
_AT = re.compile(r"^at (?:0x[0-9a-f]+ in )?([\w$.]+)\+?(0x[0-9a-f]+)?")
_WHO = re.compile(r"by thread \((\d+),(\d+),(\d+)\) in block \((\d+),(\d+),(\d+)\)")
_ADDRESS = re.compile(r"Address (0x[0-9a-f]+)(.*)")
MAX_FINDINGS = 20


class Finding(BaseModel):
    kind: str
    kernel: str | None = None
    offset: str | None = None
    thread: list[int] | None = None
    block: list[int] | None = None
    address: str | None = None
    note: str | None = None

    def line(self) -> str:
        where = f" in {self.kernel}{'+' + self.offset if self.offset else ''}" if self.kernel else ""
        who = f" by thread {tuple(self.thread)} of block {tuple(self.block)}" if self.thread else ""
        addr = f" at {self.address}{(' ' + self.note) if self.note else ''}" if self.address else ""
        return f"{self.kind}{where}{who}{addr}"


def find_sanitizer() -> Path | None:
    candidates = [
        os.environ.get("PTXBENCH_SANITIZER"),
        shutil.which("compute-sanitizer"),
        "/usr/local/cuda/bin/compute-sanitizer",
    ]
    if os.environ.get("CUDA_HOME"):
        candidates.append(os.path.join(os.environ["CUDA_HOME"], "bin", "compute-sanitizer"))
    return next((Path(c) for c in candidates if c and Path(c).is_file()), None)


def parse_findings(output: str) -> list[Finding]:
    findings: list[Finding] = []
    for raw in output.splitlines():
        if not raw.startswith("="):
            continue
        line = _PREFIX.sub("", raw).strip()
        if _KIND.match(line):
            findings.append(Finding(kind=line))
        elif not findings:
            continue
        elif m := _AT.match(line):
            findings[-1].kernel = findings[-1].kernel or m.group(1)
            findings[-1].offset = findings[-1].offset or m.group(2)
        elif m := _WHO.search(line):
            findings[-1].thread = [int(x) for x in m.group(1, 2, 3)]
            findings[-1].block = [int(x) for x in m.group(4, 5, 6)]
        elif m := _ADDRESS.search(line):
            findings[-1].address, findings[-1].note = m.group(1), m.group(2).strip() or None
    return findings[:MAX_FINDINGS]


def memcheck_stage(cubin: bytes, plan: LaunchPlan, device: int, timeout_s: float) -> StageResult:
    start = time.perf_counter()
    sanitizer = find_sanitizer()
    if sanitizer is None:
        return _result(StageState.SKIPPED, "compute-sanitizer is not installed here", start)
    kernels = sorted({launch.kernel for launch in plan.launches})
    with tempfile.TemporaryDirectory(prefix="ptxbench-memcheck-") as tmp:
        bundle = launcher.write_bundle(Path(tmp) / "bundle", cubin, plan)
        cmd = [str(sanitizer), "--tool", "memcheck", "--print-limit", str(MAX_FINDINGS)]
        if len(kernels) == 1:
            cmd += ["--kernel-name", f"kns={kernels[0]}"]
        try:
            done = subprocess.run(
                [*cmd, *launcher.command(bundle)],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=launcher.environment(device),
            )
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
    message = f"{errors} memory error(s); first: " + "; ".join(f.line() for f in findings[:5])
    detail = {"errors": errors, "findings": [f.model_dump() for f in findings]}
    return _result(StageState.FAILED, message, start, detail)


def _result(state: StageState, message: str, start: float, detail: dict | None = None) -> StageResult:
    return StageResult(
        name=Stage.MEMCHECK, state=state, message=message, detail=detail or {}, seconds=time.perf_counter() - start
    )
