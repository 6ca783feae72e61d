"""A cubin's SASS through nvdisasm: opcode histograms per kernel, static presence of target groups,
and local-memory traffic."""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

from pydantic import BaseModel

from tasks.schema import TargetGroup
from tools import procs
from tools import ptx as ptx_text
from tools.toolchain import ToolNotFound, find_tool

_SECTION = re.compile(r"^\s*\.text\.([\w$.]+):")
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[\w]+)*)")
LOCAL_MEMORY_OPCODES = ("LDL", "STL")


class SassError(RuntimeError):
    """nvdisasm is missing or failed: our tool's problem, not the kernel's."""


class SassTimeout(SassError):
    """nvdisasm ran out of the static stages' time: the module is too large, which is the kernel's problem."""


class TargetPresence(BaseModel):
    """Whether a target group appears in the source (PTX mnemonics) and in the cubin (SASS opcodes)."""

    ptx: bool
    sass: bool
    ptx_matches: list[str] = []
    sass_matches: dict[str, int] = {}  # opcode with modifiers → static count


class KernelSass(BaseModel):
    name: str
    instructions: int
    opcodes: dict[str, int]  # base opcode → static count
    local_memory: dict[str, int]  # LDL/STL static counts


def disassemble(cubin: bytes, budget: procs.Budget | None = None, line_info: bool = False) -> str:
    """nvdisasm's SASS listing; `line_info`: with its `//## File "…", line N` marks (a module assembled with
    line information)."""
    budget = budget or procs.Budget(60.0)
    try:
        tool = find_tool("nvdisasm")
    except ToolNotFound as e:
        raise SassError(str(e)) from None
    with tempfile.TemporaryDirectory(prefix=procs.temp_prefix("sass")) as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        try:
            flags = ["-c", "-g"] if line_info else ["-c"]
            done = procs.run([str(tool.path), *flags, str(path)], budget.left())
        except subprocess.TimeoutExpired:
            raise SassTimeout(budget.exceeded("nvdisasm")) from None
    if done.returncode != 0:
        raise SassError(f"nvdisasm failed: {done.stderr.strip()[:500]}")
    return done.stdout


def full_opcodes(sass: str) -> dict[str, Counter[str]]:
    """Kernel name → static count of each opcode with its modifiers (e.g. 'HGMMA.64x128x16.F32.BF16')."""
    kernels: dict[str, Counter[str]] = {}
    current: Counter[str] | None = None
    for line in sass.splitlines():
        section = _SECTION.match(line)
        if section:
            current = kernels.setdefault(section.group(1), Counter())
            continue
        m = _INSTRUCTION.match(line)
        if m and current is not None:
            current[m.group(1)] += 1
    return kernels


def kernel_summaries(opcodes: dict[str, Counter[str]]) -> list[KernelSass]:
    out = []
    for name, counts in opcodes.items():
        base: Counter[str] = Counter()
        for op, n in counts.items():
            base[op.split(".")[0]] += n
        out.append(KernelSass(
            name=name,
            instructions=sum(counts.values()),
            opcodes=dict(base.most_common()),
            local_memory={op: base[op] for op in LOCAL_MEMORY_OPCODES if base[op]},
        ))  # fmt: skip
    return out


def target_presence(groups: list[TargetGroup], ptx: str, opcodes: dict[str, Counter[str]]) -> dict[str, TargetPresence]:
    """Static presence of each group: a PTX mnemonic in the source, a SASS opcode in the cubin."""
    mnemonics = ptx_text.mnemonics(ptx)
    all_ops: Counter[str] = Counter()
    for counts in opcodes.values():
        all_ops.update(counts)
    out = {}
    for g in groups:
        ptx_hits = sorted(m for m in mnemonics if any(re.search(p, m) for p in g.ptx_patterns))
        sass_hits = {op: n for op, n in all_ops.items() if any(re.search(p, op) for p in g.sass_patterns)}
        out[g.name] = TargetPresence(ptx=bool(ptx_hits), sass=bool(sass_hits), ptx_matches=ptx_hits[:8],
                                     sass_matches=dict(sorted(sass_hits.items())))  # fmt: skip
    return out
