"""Static cross-checks of a module against its launch spec, before anything runs: two mistakes that otherwise
cost a GPU run and a turn (garbage results, or a hang) are visible in the text.

- swizzle: the swizzle mode in the wgmma / tcgen05 shared-memory descriptors the kernel builds, against the
  swizzle of the tensor maps that load its operands;
- expect_tx: the byte count an `mbarrier…expect_tx` announces, against the bytes of the TMA copies that complete
  on the same barrier in the same straight-line code.

Each is checked only where the values are constants, or built from recognisable immediates, in the text; anything
else is "could not check", with the reason, never a guess. Register values come from tools/ptx_values.py.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel

from tasks.schema import DTYPE_BYTES, Arch, Task
from tools import ptx as ptx_text
from tools.plan import LaunchPlan, TensorMapPlan
from tools.ptx import Statement
from tools.ptx_values import MAX_DEPTH, RegisterValues

Verdict = Literal["consistent", "mismatch", "unchecked"]
# The swizzle field of a shared-memory matrix descriptor: bits 62-63 on sm_90a, 61-63 on sm_100a.
SWIZZLE_FIELD = {Arch.SM_90A: (62, 2), Arch.SM_100A: (61, 3)}
SWIZZLES = {
    Arch.SM_90A: {0: "none", 1: "128B", 2: "64B", 3: "32B"},
    Arch.SM_100A: {0: "none", 1: "128B (32-byte atoms)", 2: "128B", 4: "64B", 6: "32B"},
}
_BRACKET = re.compile(r"^\[\s*(.*?)\s*\]$")
_BLOCK_END = re.compile(r"^(?:bra|ret|exit|brx|call|trap)\b")


class CrossCheck(BaseModel):
    """One check's outcome, for one launch's kernel."""

    check: Literal["swizzle", "expect_tx"]
    launch: int
    kernel: str
    line: int | None = None
    verdict: Verdict
    message: str


def cross_check(ptx: str, plan: LaunchPlan, task: Task, arch: Arch, language: str = "ptx") -> list[CrossCheck]:
    """Both checks for every launch whose kernel the module defines (`language`: what the answer was written in;
    a CUDA answer's line numbers are those of the PTX NVRTC generated)."""
    bodies = ptx_text.bodies(ptx)
    entries = ptx_text.entries(ptx)
    outputs = {t.name for t in task.outputs}
    results = []
    for index, launch in enumerate(plan.launches):
        body = bodies.get(launch.kernel)
        if body is None or launch.kernel not in entries:
            continue
        params = [p.name for p in entries[launch.kernel].params]
        maps = {params[j]: a.tensor_map for j, a in enumerate(launch.args) if a.tensor_map and j < len(params)}
        kernel = _Kernel(launch.kernel, index, body, maps, language == "cuda")
        results += kernel.swizzle(arch, outputs)
        results += kernel.expect_tx()
    return results


def cross_check_summary(checks: list[CrossCheck], shown: int = 2) -> str:
    """One line per verdict for a module that passed: what was checked, and what could not be, with why."""
    consistent = [c for c in checks if c.verdict == "consistent"]
    unchecked = [c for c in checks if c.verdict == "unchecked"]
    lines = []
    if consistent:
        kinds = sorted({c.check for c in consistent})
        lines.append(f"static cross-checks consistent: {len(consistent)} ({', '.join(kinds)})")
    if unchecked:
        reasons = "; ".join(c.message for c in unchecked[:shown])
        more = f" (and {len(unchecked) - shown} more)" if len(unchecked) > shown else ""
        lines.append(f"could not check {len(unchecked)}: {reasons}{more}")
    return "\n".join(lines)


class _Kernel:
    def __init__(self, name: str, index: int, body: list[Statement], maps: dict[str, TensorMapPlan], generated: bool):
        self.name, self.index, self.body, self.maps = name, index, body, maps
        self.lines_of = " (line numbers of the PTX that NVRTC generated)" if generated else ""
        self.registers = RegisterValues(body)
        self.defs = self.registers.defs

    def _result(self, check: str, verdict: Verdict, message: str, line: int | None = None) -> CrossCheck:
        return CrossCheck(check=check, launch=self.index, kernel=self.name, line=line, verdict=verdict,
                          message=f"launches[{self.index}] ({self.name}): {message}{self.lines_of}")  # fmt: skip

    # ------------------------------------------------------------------------------------ swizzle

    def swizzle(self, arch: Arch, outputs: set[str]) -> list[CrossCheck]:
        mmas = [s for s in self.body if s.opcode.startswith(("wgmma.mma_async", "tcgen05.mma"))]
        if not mmas:
            return []
        loaded = {m.swizzle for m in self.maps.values() if m.tensor not in outputs}
        if not loaded:
            return [self._result("swizzle", "unchecked", "could not check the descriptors' swizzle: no tensor map "
                                 "loads an input or scratch buffer")]  # fmt: skip
        shift, width = SWIZZLE_FIELD[arch]
        names = SWIZZLES[arch]
        found: dict[str, list[int]] = defaultdict(list)  # swizzle name → lines of descriptors declaring it
        unknown = []
        for s in mmas:
            for operand in s.operands[1:3]:  # the A and B descriptors (A is a register list or [tmem] otherwise)
                if not operand.startswith("%"):
                    continue
                values = self.registers.values(operand)
                if values is None:
                    unknown.append(s.line)
                    continue
                for hi, _ in values:
                    mode = ((hi << 32) >> shift) & ((1 << width) - 1)
                    found[names.get(mode, f"invalid ({mode})")].append(s.line)
        if not found:
            where = ", ".join(map(str, sorted(set(unknown))[:3]))
            return [
                self._result(
                    "swizzle",
                    "unchecked",
                    "could not check the descriptors' swizzle: they are not "
                    f"built from constants (the MMA at line {where})",
                    unknown[0] if unknown else None,
                )
            ]
        maps = ", ".join(f"{m.tensor} {m.swizzle}" for m in self.maps.values() if m.tensor not in outputs)
        invalid = [n for n in found if n.startswith("invalid")]
        if invalid or not set(found) & loaded:
            lines = sorted({line for n in found for line in found[n]})
            shown = ", ".join(f"{n} (lines {', '.join(map(str, sorted(set(found[n]))[:4]))})" for n in found)
            return [self._result(
                "swizzle", "mismatch",
                f"the shared-memory descriptors declare swizzle {shown}, but the tensor maps that fill shared memory "
                f"use {maps}: the MMA would read the tiles in another layout than TMA wrote them. Make the "
                "descriptor's swizzle field match the tensor map's swizzle",
                lines[0],
            )]  # fmt: skip
        note = f"; could not check the MMA at line {unknown[0]}" if unknown else ""
        return [self._result("swizzle", "consistent", f"descriptor swizzle {', '.join(found)} matches the tensor "
                             f"maps ({maps}){note}")]  # fmt: skip

    # ---------------------------------------------------------------------------------- expect_tx

    def expect_tx(self) -> list[CrossCheck]:
        blocks = _blocks(self.body)
        expects: dict[str, list[tuple[int, Statement]]] = defaultdict(list)
        loads: dict[str, list[tuple[int, Statement]]] = defaultdict(list)
        for b, block in enumerate(blocks):
            for s in block:
                if s.opcode.startswith(("mbarrier.arrive.expect_tx", "mbarrier.expect_tx")):
                    bar = s.operands[1] if s.opcode.startswith("mbarrier.arrive") else s.operands[0]
                    expects[_key(bar)].append((b, s))
                elif _completes_on_barrier(s):
                    loads[_key(s.operands[2])].append((b, s))
        results = []
        for bar, announced in expects.items():
            results += self._expect_tx_of(bar, announced, loads.get(bar, []))
        return results

    def _expect_tx_of(self, bar: str, announced, arriving) -> list[CrossCheck]:
        first = announced[0][1].line
        if not arriving:
            return [self._result("expect_tx", "unchecked", f"could not check the expect_tx at line {first}: no TMA "
                                 f"copy names the barrier [{bar}] as written there", first)]  # fmt: skip
        by_block: dict[int, list[Statement]] = defaultdict(list)
        for b, s in arriving:
            by_block[b].append(s)
        blocks = {b for b, _ in announced}
        if len(blocks) != len(announced) or set(by_block) != blocks:
            return [self._result("expect_tx", "unchecked", f"could not check the expect_tx at line {first}: the copies "
                                 f"completing on [{bar}] are not all in the same straight-line code as one expect_tx "
                                 "(a loop, or branches, between them)", first)]  # fmt: skip
        results = []
        for b, s in announced:
            results.append(self._compare(bar, s, by_block[b]))
        return results

    def _compare(self, bar: str, expect: Statement, copies: list[Statement]) -> CrossCheck:
        announced = self.registers.constant(expect.operands[-1])
        if announced is None:
            return self._result("expect_tx", "unchecked", f"could not check the expect_tx at line {expect.line}: its "
                                f"byte count {expect.operands[-1]} is not a constant", expect.line)  # fmt: skip
        never = 1 if expect.guard and expect.guard.startswith("!") else 0  # the guard's value that skips it
        if expect.guard and self.registers.constant(expect.guard.lstrip("!")) == never:
            return self._result("expect_tx", "unchecked", f"the expect_tx at line {expect.line} never runs: its "
                                f"predicate {expect.guard} is always false", expect.line)  # fmt: skip
        if not self._same_threads(expect, copies):
            return self._result("expect_tx", "unchecked", f"could not check the expect_tx at line {expect.line}: it "
                                "and the copies completing on it run under different predicates, so different "
                                "threads (how many is not known here) may execute them", expect.line)  # fmt: skip
        parts = []
        for c in copies:
            size = self._copy_bytes(c)
            if isinstance(size, str):
                return self._result("expect_tx", "unchecked", f"could not check the expect_tx at line {expect.line}: "
                                    f"the copy at line {c.line} {size}", expect.line)  # fmt: skip
            parts.append(size)
        total = sum(b for _, b in parts)
        listed = " + ".join(f"{b:,} ({what}, line {c.line})" for (what, b), c in zip(parts, copies, strict=True))
        if total == announced:
            return self._result("expect_tx", "consistent", f"expect_tx {announced:,} at line {expect.line} = {listed}",
                                expect.line)  # fmt: skip
        effect = "hangs: the phase never completes" if announced > total else "lets waiters in before all bytes land"
        return self._result(
            "expect_tx", "mismatch",
            f"the expect_tx at line {expect.line} announces {announced:,} bytes on [{bar}], but the TMA copies that "
            f"complete on it in the same code deliver {listed} = {total:,} bytes: the barrier {effect}. Announce "
            "exactly the sum of the boxes (elements × element size) that complete on it",
            expect.line,
        )  # fmt: skip

    def _same_threads(self, expect: Statement, copies: list[Statement]) -> bool:
        """Whether the same threads execute the expect_tx and every copy: one guard (or none) for all, and the
        guard not redefined among them. Then however many threads that is, both sides scale alike."""
        if any(c.guard != expect.guard for c in copies):
            return False
        if expect.guard is None:
            return True
        lines = [expect.line, *(c.line for c in copies)]
        register = expect.guard.lstrip("!")
        return not any(min(lines) < d.line < max(lines) for d in self.defs.get(register, []))

    def _copy_bytes(self, copy: Statement) -> tuple[str, int] | str:
        """(what, bytes) of a copy, or why it cannot be known here."""
        if any(x in copy.opcode for x in (".multicast", ".cta_group", "im2col", "gather4", "scatter4")):
            return "is multicast, paired or not a plain tile copy (its bytes arrive in other CTAs too)"
        if ".tensor" not in copy.opcode:  # a plain bulk copy: [dst], [src], size, [mbar]
            size = self.registers.constant(copy.operands[2]) if len(copy.operands) > 3 else None
            return ("bulk copy", size) if size is not None else "copies a size that is not a constant"
        source = _BRACKET.match(copy.operands[1])
        tmap = self._param(ptx_text.split_operands(source.group(1))[0]) if source else None
        plan = self.maps.get(tmap or "")
        if plan is None:
            return "reads a tensor map this check cannot trace to a launch argument"
        elements = math.prod(math.ceil(b / s) for b, s in zip(plan.box, plan.element_strides, strict=True))
        return f"{plan.tensor} box {plan.box[::-1]}", elements * DTYPE_BYTES[plan.dtype]

    # ---------------------------------------------------------------------------------- values

    def _param(self, operand: str, seen: frozenset[str] = frozenset()) -> str | None:
        """The .param a tensor-map operand comes from, through `mov` and `cvta.param`."""
        if not operand.startswith("%"):
            return operand if operand in self.maps else None
        if len(seen) > MAX_DEPTH:
            return None
        sources = set()
        for d in self.defs.get(operand, []):
            if not d.opcode.startswith(("mov.", "cvta.param")) or len(d.operands) != 2:
                return None
            if d.operands[1] not in seen | {operand}:  # `cvta.param %rd0, %rd0` adds nothing
                sources.add(self._param(d.operands[1], seen | {operand}))
        return sources.pop() if len(sources) == 1 else None


def _key(operand: str) -> str:
    m = _BRACKET.match(operand.strip())
    return re.sub(r"\s+", "", m.group(1) if m else operand)


def _completes_on_barrier(s: Statement) -> bool:
    """A bulk copy into shared memory whose completion is counted on an mbarrier."""
    return (
        s.opcode.startswith("cp.async.bulk.")
        and ".global" in s.opcode
        and "mbarrier::complete_tx" in s.opcode
        and len(s.operands) >= 3
    )


def _blocks(body: Iterable[Statement]) -> list[list[Statement]]:
    """Straight-line pieces: a label starts one, a branch, return or exit ends one."""
    blocks: list[list[Statement]] = [[]]
    for s in body:
        if s.labels and blocks[-1]:
            blocks.append([])
        if s.opcode:
            blocks[-1].append(s)
        if _BLOCK_END.match(s.opcode):
            blocks.append([])
    return [b for b in blocks if b]
