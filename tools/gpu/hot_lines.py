"""Where in the kernel the perf pass's time goes, line by line: Nsight Compute's per-instruction counters of each
SASS instruction (its source page, `--print-source sass`, from the SourceCounters section) summed per line of the
answer through the diagnosis copy's line table (tools/lineinfo.py), and the few lines with the most shared-memory
bank conflicts, stall samples and executed instructions told; beside them, the registers each warpgroup holds after
the answer's `setmaxnreg`, read from its PTX.

The source page is one block per profiled launch: a `"Kernel Name","…"` row, a header row (Address, Source, then
a column per counter), then a row per SASS instruction from the kernel's first. The Address column is the
instruction's address; its offset is that less the block's first."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass

from tools import ptx as ptx_text
from tools.assemble import PTX_NAME
from tools.lineinfo import LineTable, quote, where
from tools.nvrtc import SOURCE_NAME
from tools.perf_report import HotLine, KernelPerf, RegisterSetting

TOP = 3  # lines told per counter
# HotLine field → ncu's column names for it, newest first
COLUMNS = {
    "bank_conflicts": ("L1 Wavefronts Shared Excessive",),
    "stall_samples": ("Warp Stall Sampling (All Samples)", "Warp Stall Sampling (All Cycles)", "Sampling Data (All)"),
    "executed": ("Instructions Executed", "Warp Instructions Executed"),
}
SAID = {  # HotLine field → how the feedback names it
    "bank_conflicts": "shared-memory bank conflicts (excess wavefronts)",
    "stall_samples": "warp stall samples",
    "executed": "instructions executed (warp-level)",
}
_SETMAXNREG = re.compile(r"^setmaxnreg\.(inc|dec)\b")
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\b")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]+)"')


@dataclass
class Instruction:
    """One SASS instruction's counters, summed over the launches of its kernel that were profiled."""

    offset: int
    sass: str
    counts: dict[str, float]


def _number(cell: str) -> float:
    try:
        return float(cell.replace(",", ""))
    except ValueError:  # "", "-", "n/a"
        return 0.0


def _address(cell: str) -> int | None:
    try:
        return int(cell.strip(), 16)
    except ValueError:
        return None


def parse_source_page(text: str) -> dict[str, list[Instruction]]:
    """ncu's `--page source --csv --print-source sass` → kernel name → its instructions by offset, each counter
    summed over the kernel's blocks (one per profiled launch). Rows that do not read are left out."""
    kernels: dict[str, dict[int, Instruction]] = {}
    kernel, header, first = "", None, None  # a page without a name row: its one kernel (plan_kernel)
    for row in csv.reader(line for line in text.splitlines() if line.startswith('"')):
        if len(row) >= 2 and row[0] in ("Kernel Name", "Function Name"):
            kernel, header = row[1], None
            continue
        if "Address" in row and "Source" in row:  # a block's header (a page of several launches repeats it)
            header, first = {name: i for i, name in reversed(list(enumerate(row)))}, None  # the first Source: SASS
            continue
        if header is None or len(row) <= header["Address"]:
            continue
        address = _address(row[header["Address"]])
        if address is None:
            continue
        first = address if first is None else first
        found = kernels.setdefault(kernel, {})
        offset = address - first
        instruction = found.setdefault(offset, Instruction(offset=offset, sass=row[header["Source"]].strip(),
                                                           counts=dict.fromkeys(COLUMNS, 0.0)))  # fmt: skip
        for field, names in COLUMNS.items():
            column = next((header[n] for n in names if n in header), None)
            if column is not None and column < len(row):
                instruction.counts[field] += _number(row[column])
    return {name: sorted(found.values(), key=lambda i: i.offset) for name, found in kernels.items()}


def plan_kernel(name: str, kernels: list[str]) -> str | None:
    """The plan's kernel an ncu name is (ncu may print a C++ kernel's signature), or None."""
    for kernel in kernels:
        if name == kernel or name.removeprefix("void ").split("(")[0] == kernel:
            return kernel
    return kernels[0] if len(kernels) == 1 else None


def hot_lines(page: dict[str, list[Instruction]], table: LineTable, sources: dict[str, list[str]],
              kernels: list[str]) -> tuple[list[HotLine], str | None]:  # fmt: skip
    """The lines with the most of each counter (TOP each, the union in order of the counters), and a note on what
    is missing (instructions with no line, a page with no instruction)."""
    lines: dict[tuple[str, str, int], HotLine] = {}
    unplaced = 0.0
    for name, instructions in page.items():
        kernel = plan_kernel(name, kernels)
        for ins in instructions:
            at = table.at(kernel, ins.offset) if kernel else None
            if at is None:
                unplaced += ins.counts["executed"]
                continue
            hot = lines.setdefault((kernel, *at), HotLine(kernel=kernel, file=at[0], line=at[1]))
            for field, value in ins.counts.items():
                setattr(hot, field, getattr(hot, field) + value)
    if not lines:
        why = table.note or "no instruction of the profiled kernels has a line in the line table"
        return [], f"no per-line counters: {why}"
    chosen: dict[tuple[str, str, int], HotLine] = {}
    for field in COLUMNS:
        ranked = sorted((h for h in lines.values() if getattr(h, field) > 0), key=lambda h: -getattr(h, field))
        chosen |= {(h.kernel, h.file, h.line): h for h in ranked[:TOP]}
    for hot in chosen.values():
        hot.quoted = quote(hot.file, hot.line, sources)
    executed = sum(h.executed for h in lines.values()) + unplaced
    note = None
    if unplaced and executed and unplaced / executed > 0.05:
        note = f"{unplaced / executed:.0%} of the executed instructions have no line of yours"
    return list(chosen.values()), note


def register_settings(ptx: str, language: str) -> list[RegisterSetting]:
    """Every `setmaxnreg` of the module's kernels, at the answer's line: the PTX line for a PTX answer, the CUDA
    line NVRTC's `.loc` gives it for a CUDA answer (left out where there is none)."""
    lines = ptx.splitlines()
    files = {m.group(1): m.group(2) for text in lines if (m := _FILE.match(text))}
    found = []
    for kernel, body in ptx_text.bodies(ptx).items():
        for s in body:
            setting = _SETMAXNREG.match(s.opcode)
            if setting is None or not s.operands or not s.operands[-1].isdigit():
                continue
            if language == "ptx":
                file, line = PTX_NAME, s.line
            else:
                loc = next((x for text in reversed(lines[: s.line - 1]) if (x := _LOC.match(text))), None)
                if loc is None or not files.get(loc.group(1), "").endswith(SOURCE_NAME):
                    continue
                file, line = SOURCE_NAME, int(loc.group(2))
            registers = int(s.operands[-1])
            found.append(RegisterSetting(kernel=kernel, action=setting.group(1), registers=registers, file=file,
                                         line=line))  # fmt: skip
    return found


# ------------------------------------------------------------------------------------------- the text


def _share(value: float, total: float) -> str:
    return f" ({100 * value / total:.0f}%)" if total else ""


def hot_lines_text(hot: list[HotLine], note: str | None) -> str:
    """`Where in the kernel` for the model: per counter, the lines with the most of it and their share."""
    if not hot:
        return f"Where in the kernel: {note}." if note else ""
    out = ["Where in the kernel (Nsight Compute's per-instruction counters, summed per line of yours):"]
    for field, said in SAID.items():
        ranked = sorted((h for h in hot if getattr(h, field) > 0), key=lambda h: -getattr(h, field))[:TOP]
        if not ranked:
            out.append(f"- {said}: none")
            continue
        total = sum(getattr(h, field) for h in hot)  # of the lines shown: a floor of each one's share
        cells = [f"{where(h.file, h.line)}" + (f" `{h.quoted}`" if h.quoted else "")
                 + f" {getattr(h, field):,.0f}{_share(getattr(h, field), total)}" for h in ranked]  # fmt: skip
        out.append(f"- {said}: " + "; ".join(cells))
    if note:
        out.append(f"({note})")
    return "\n".join(out)


def registers_text(settings: list[RegisterSetting], launches: list[KernelPerf]) -> str:
    """What each warpgroup holds after setmaxnreg, beside the launch's count."""
    if not settings:
        return ""
    parts = []
    for kernel in dict.fromkeys(s.kernel for s in settings):
        launch = next((k for k in launches if k.kernel.removeprefix("void ").split("(")[0] == kernel), None)
        given = f"launches with {launch.registers} per thread; " if launch and launch.registers else ""
        each = ", ".join(f"setmaxnreg.{s.action} {s.registers} at {where(s.file, s.line)}"
                         for s in settings if s.kernel == kernel)  # fmt: skip
        parts.append(f"`{kernel}` {given}{each}: a warpgroup past each holds that many registers per thread")
    return "Registers per warpgroup: " + "; ".join(parts) + "."
