"""Where a hung kernel's warps wait. At a time-out, before the worker is killed, cuda-gdb attaches to it in batch
mode and lists every active thread range with its PC (`info cuda threads`), the kernels with their grid and block
(`info cuda kernels`) and each kernel's start address (`info address`, and the focused thread's `x/1i $pc`, which
names its kernel and offset). Each PC becomes a SASS offset, the offset the answer's line through the diagnosis
copy's line table (tools/lineinfo.py), and the threads on one line become warps per block. A PTX line inside an
mbarrier wait loop (the wait, or the branch back to it) is told as the wait, with the barrier and the parity its
operands name.

Bounded: cuda-gdb gets CUDA_GDB_S and the whole location LOCATE_S beyond the time-out. Skipped with its reason where
cuda-gdb is missing, cannot attach or lists no thread; a PC with no line is told by its SASS offset. The attempt
stays a time-out whatever this finds, and the worker is killed and restarted as before."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from pydantic import BaseModel, Field

from tasks.schema import Arch
from tools import procs
from tools.gpu.base import CompiledModule
from tools.lineinfo import LineTable, answer_sources, line_table, quote, where

LOCATE_S = 20.0  # the most a time-out's verdict waits for its location
CUDA_GDB_S = 18.0  # of which cuda-gdb may take: attached to the worker (torch loaded) it took 9.8 s on our H200
# (2026-12-03; 0.9 s to a bare process), and over 12 s once
WARP = 32
GROUPS_SHOWN = 6
PIECES_SHOWN = 4
LISTING_CHARS = 4000
EXPANDED_BLOCKS = 64  # a thread range over more blocks than this is told as one span

_TRIPLE = r"\((\d+),(\d+),(\d+)\)"
_THREADS_ROW = re.compile(
    rf"^\s*\*?\s*{_TRIPLE}\s+{_TRIPLE}\s+{_TRIPLE}\s+{_TRIPLE}\s+(\d+)\s+(0x[0-9a-fA-F]+)\s*(.*)$"
)
_FILE_LINE = re.compile(r"^(\S+)\s+(\d+)$")  # the threads row's tail where the module has line information
_KERNEL_HEADER = re.compile(r"^\s*Kernel\s+(\d+)\s*$")
_KERNELS_ROW = re.compile(r"^\s*\*?\s*(\d+)\s+\S+\s+\d+\s+\d+\s+\w+\s+0x[0-9a-fA-F]+\s+(.*)$")
_DIMS = re.compile(_TRIPLE)
_NAME = re.compile(r"([A-Za-z_$][\w$.]*)")
_ADDRESS = re.compile(r'Symbol "([^"]+)" is .*?at (?:address )?(0x[0-9a-fA-F]+)')
_FOCUS = re.compile(r"=>\s+(0x[0-9a-fA-F]+)\s+<([\w$.]+)\+(\d+)>")
_WAIT = re.compile(r"mbarrier\.(?:try_wait|test_wait)(\.parity)?[\w.:]*\s+[^,]+,\s*\[([^\]]+)\]\s*,\s*([^,;\s]+)")
_BRANCH = re.compile(r"^\s*(?:@!?%?\w+\s+)?bra(?:\.uni)?\b")
_SYMBOL_ADDRESS = r"^\s*(?:mov|cvta\.shared|cvta\.to\.shared)[\w.]*\s+{reg}\s*,\s*([A-Za-z_$][\w$]*)\s*;"


class ThreadRange(BaseModel):
    """One row of `info cuda threads`: consecutive threads at one PC."""

    kernel_id: int | None = None
    first_block: tuple[int, int, int]
    first_thread: tuple[int, int, int]
    last_block: tuple[int, int, int]
    last_thread: tuple[int, int, int]
    count: int
    pc: int
    file: str | None = None
    line: int | None = None


class KernelRow(BaseModel):
    """One row of `info cuda kernels`."""

    id: int
    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]


class Listing(BaseModel):
    """What cuda-gdb printed of the hung process, parsed."""

    threads: list[ThreadRange]
    kernels: dict[int, KernelRow]
    starts: dict[str, int] = Field(description="Kernel name → the address its code starts at.")


def parse_listing(text: str) -> Listing:
    threads: list[ThreadRange] = []
    kernels: dict[int, KernelRow] = {}
    starts: dict[str, int] = {}
    kernel_id: int | None = None
    in_kernels = False
    for raw in text.splitlines():
        if raw.strip().startswith("Kernel Parent"):
            in_kernels = True
            continue
        if m := _KERNEL_HEADER.match(raw):
            kernel_id, in_kernels = int(m.group(1)), False
        elif m := _THREADS_ROW.match(raw):
            g = [int(x) for x in m.groups()[:13]]
            at = _FILE_LINE.match(m.group(15).strip())
            threads.append(ThreadRange(
                kernel_id=kernel_id, first_block=tuple(g[0:3]), first_thread=tuple(g[3:6]),
                last_block=tuple(g[6:9]), last_thread=tuple(g[9:12]), count=g[12], pc=int(m.group(14), 16),
                file=at.group(1) if at else None, line=int(at.group(2)) if at and int(at.group(2)) > 0 else None,
            ))  # fmt: skip
        elif in_kernels and (m := _KERNELS_ROW.match(raw)):
            dims = list(_DIMS.finditer(m.group(2)))  # grid, block (and a cluster, where there is one), then the name
            name = _NAME.search(m.group(2), dims[-1].end()) if dims else None
            if len(dims) >= 2 and name:
                grid, block = (tuple(int(x) for x in d.groups()) for d in dims[:2])
                kernels[int(m.group(1))] = KernelRow(id=int(m.group(1)), name=name.group(1), grid=grid, block=block)
        elif m := _ADDRESS.search(raw):
            starts.setdefault(m.group(1), int(m.group(2), 16))
        elif m := _FOCUS.search(raw):
            starts.setdefault(m.group(2), int(m.group(1), 16) - int(m.group(3)))
    return Listing(threads=threads, kernels=kernels, starts=starts)


# ------------------------------------------------------------------------------------------- attaching


class Snapshot(BaseModel):
    """cuda-gdb's output on the hung process, or why there is none."""

    output: str = ""
    skipped: str = ""
    seconds: float = 0.0


def find_cuda_gdb() -> Path | None:
    candidates = [os.environ.get("PTXBENCH_CUDA_GDB"), shutil.which("cuda-gdb"), "/usr/local/cuda/bin/cuda-gdb"]
    if os.environ.get("CUDA_HOME"):
        candidates.append(os.path.join(os.environ["CUDA_HOME"], "bin", "cuda-gdb"))
    return next((Path(c) for c in candidates if c and Path(c).is_file()), None)


def commands(pid: int, kernels: list[str]) -> list[str]:
    """cuda-gdb's arguments: attach to `pid`, list, detach (batch mode ends it). debuginfod is off: the GPU host
    has no network, and a look-up would spend the budget. (cuda-gdb 13.0 knows no --cuda-use-lockfile option: on
    our H200 it refused to start with it.)"""
    settings = ["set pagination off", "set confirm off", "set debuginfod enabled off"]
    views = ["info cuda kernels", "info cuda threads", "x/1i $pc", *(f"info address {k}" for k in kernels)]
    args = ["-q", "-nx", "-batch", *(a for s in settings for a in ("-iex", s)), "-p", str(pid)]
    return args + [a for view in views for a in ("-ex", view)]


def snapshot(pid: int, kernels: list[str], timeout_s: float = CUDA_GDB_S) -> Snapshot:
    """cuda-gdb attached to the process `pid` while its kernel hangs."""
    start = time.perf_counter()
    cuda_gdb = find_cuda_gdb()
    if cuda_gdb is None:
        return Snapshot(skipped="cuda-gdb is not installed here")
    try:
        done = procs.run([str(cuda_gdb), *commands(pid, kernels)], timeout_s)
    except subprocess.TimeoutExpired:
        return Snapshot(
            skipped=f"cuda-gdb did not finish within {timeout_s:.0f} s", seconds=time.perf_counter() - start
        )
    except OSError as e:
        return Snapshot(skipped=f"cuda-gdb could not start: {e}")
    output = done.stdout + done.stderr
    seconds = time.perf_counter() - start
    if "ptrace: Operation not permitted" in output:
        return Snapshot(skipped="cuda-gdb may not attach here (ptrace: operation not permitted)", seconds=seconds)
    if not parse_listing(output).threads:
        tail = " ".join(output.split())[-300:] or "(no output)"
        return Snapshot(output=output, skipped=f"cuda-gdb listed no thread of a running kernel: {tail}",
                        seconds=seconds)  # fmt: skip
    return Snapshot(output=output, seconds=seconds)


# ------------------------------------------------------------------------------------------- locating


class WarpGroup(BaseModel):
    """The warps waiting on one line (or at one SASS offset, where the line is unknown)."""

    kernel: str
    file: str | None = None
    line: int | None = None
    pc: int = Field(0, description="A PC of these warps, for a group with no line.")
    offset: int | None = Field(None, description="The SASS offset, when there is no line.")
    quoted: str | None = None
    wait: str | None = Field(None, description="An mbarrier wait: its barrier and parity, as the PTX names them.")
    threads: int = 0
    pieces: list[str] = Field(default_factory=list, description="Per block: `block (0,0,0): warps 0–3`.")


class HangReport(BaseModel):
    """Where the warps were at the time-out, or why that is not known."""

    groups: list[WarpGroup] = Field(default_factory=list)
    note: str = Field("", description="Why nothing was located, or what the groups lack.")
    seconds: float = 0.0
    listing: str = Field("", description="cuda-gdb's output, its head, for the record (not the model's feedback).")

    def text(self) -> str:
        if not self.groups:
            return f"Where the warps wait: not located ({self.note})."
        lines = ["Where the warps were at the time-out (cuda-gdb attached to the hung kernel):"]
        for g in self.groups[:GROUPS_SHOWN]:
            if g.line is not None:
                at = where(g.file, g.line)
            elif g.offset is not None:
                at = f"SASS offset {g.offset:#x} (no source line)"
            else:
                at = f"PC {g.pc:#x} (the kernel's start address is unknown)"
            at += f" `{g.quoted}`" if g.quoted else ""
            at += f" ({g.wait})" if g.wait else ""
            shown = "; ".join(g.pieces[:PIECES_SHOWN])
            more = f"; and {len(g.pieces) - PIECES_SHOWN} more blocks" if len(g.pieces) > PIECES_SHOWN else ""
            lines.append(f"- {shown}{more} wait at {at} [{g.threads:,} threads, kernel {g.kernel}]")
        if len(self.groups) > GROUPS_SHOWN:
            lines.append(f"- … and {len(self.groups) - GROUPS_SHOWN} more places")
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)


def _linear(index: tuple[int, int, int], dims: tuple[int, int, int]) -> int:
    return index[0] + dims[0] * (index[1] + dims[1] * index[2])


def _unlinear(index: int, dims: tuple[int, int, int]) -> tuple[int, int, int]:
    return index % dims[0], index // dims[0] % dims[1], index // (dims[0] * dims[1])


def _ranges(numbers: list[int]) -> str:
    """`0–3, 8, 10–11`."""
    out, run = [], []
    for n in sorted(set(numbers)):
        if run and n != run[-1] + 1:
            out.append(run)
            run = []
        run.append(n)
    out += [run] if run else []
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 1 else str(r[0]) for r in out)


def _block(b: tuple[int, int, int]) -> str:
    return f"({b[0]},{b[1]},{b[2]})"


def wait_line(lines: list[str], line: int) -> int:
    """The mbarrier wait a PTX line belongs to: the line itself when it waits, the wait just before a branch that
    loops back to it, else the line."""
    if _WAIT.search(lines[line - 1]):
        return line
    if not _BRANCH.match(lines[line - 1]):
        return line
    for back in range(line - 1, max(0, line - 5), -1):
        if _WAIT.search(lines[back - 1]):
            return back
    return line


def describe_wait(lines: list[str], line: int) -> str | None:
    """`mbarrier `full_bar+8`, phase parity 0` from the wait on `line` and the register moves before it."""
    m = _WAIT.search(lines[line - 1])
    if m is None:
        return None
    parity, address, phase = m.groups()
    base, _, plus = address.replace(" ", "").partition("+")
    if base.startswith("%"):
        pattern = re.compile(_SYMBOL_ADDRESS.format(reg=re.escape(base)))
        symbol = next((s.group(1) for text in reversed(lines[: line - 1]) if (s := pattern.match(text))), None)
        barrier = f"`{symbol}{'+' + plus if plus else ''}` (through {base})" if symbol else f"the address in {base}"
    else:
        barrier = f"`{address.strip()}`"
    if parity:
        waits = f"phase parity {phase}" if phase.isdigit() else f"the phase parity in {phase}"
    else:
        waits = f"the phase token in {phase}"
    return f"mbarrier wait on {barrier}, for {waits}"


def locate(snap: Snapshot, module: CompiledModule, arch: Arch, budget: procs.Budget) -> HangReport:
    """The snapshot's threads on the answer's lines, grouped; the line table is built within `budget`."""
    kept = snap.output[:LISTING_CHARS]
    if snap.skipped:
        return HangReport(note=snap.skipped, seconds=snap.seconds, listing=kept)
    listing = parse_listing(snap.output)
    table = line_table(module.language, module.ptx, module.cubin, arch, budget)
    sources = answer_sources(module.language, module.ptx, module.cuda_source)
    report = group(listing, table, module, sources)
    report.seconds, report.listing = snap.seconds, kept
    return report


def group(listing: Listing, table: LineTable, module: CompiledModule, sources: dict[str, list[str]]) -> HangReport:
    """Thread ranges → warp groups by line; PTX lines in a wait loop are told as the wait."""
    only = module.plan.launches[0].kernel if len({x.kernel for x in module.plan.launches}) == 1 else None
    blocks = {x.kernel: tuple(x.block) for x in module.plan.launches}
    grids = {x.kernel: tuple(x.grid) for x in module.plan.launches}
    groups: dict[tuple, WarpGroup] = {}
    pieces: dict[tuple, dict[tuple[int, int, int], list[int]]] = {}
    no_line = 0
    for row in listing.threads:
        known = listing.kernels.get(row.kernel_id) if row.kernel_id is not None else None
        kernel = known.name if known else only
        if kernel is None:
            continue
        dims = known.block if known else blocks.get(kernel, (row.count, 1, 1))
        start = listing.starts.get(kernel)
        offset = row.pc - start if start is not None and 0 <= row.pc - start < 1 << 26 else None
        if row.line:
            file, line = row.file, row.line
        else:
            file, line = (table.at(kernel, offset) if offset is not None else None) or (None, None)
        if line is not None and file in sources and module.language == "ptx" and line <= len(sources[file]):
            line = wait_line(sources[file], line)
        if line is None:
            no_line += 1
        key = (kernel, file, line, None if line is not None else offset)
        g = groups.setdefault(key, WarpGroup(kernel=kernel, file=file, line=line, pc=row.pc,
                                             offset=None if line is not None else offset))  # fmt: skip
        g.threads += row.count
        per_block = pieces.setdefault(key, {})
        first, last = _linear(row.first_thread, dims) // WARP, _linear(row.last_thread, dims) // WARP
        top = (dims[0] * dims[1] * dims[2] - 1) // WARP
        grid = known.grid if known else grids.get(kernel, (0, 0, 0))
        b0, b1 = _linear(row.first_block, grid), _linear(row.last_block, grid)
        if row.first_block == row.last_block or 0 < b1 - b0 < EXPANDED_BLOCKS:
            for b in range(b0, b1 + 1):
                warps = range(first if b == b0 else 0, (last if b == b1 else top) + 1)
                per_block.setdefault(_unlinear(b, grid) if b0 != b1 else row.first_block, []).extend(warps)
        else:  # a range over many blocks: said as such, not expanded
            blocks_at = f"blocks {_block(row.first_block)}–{_block(row.last_block)}"
            every = first == 0 and last == top
            g.pieces.append(f"{blocks_at}: every warp (0–{last})" if every else f"{blocks_at}: warp {first} of the "
                            f"first to warp {last} of the last")  # fmt: skip
    for key, g in groups.items():
        g.pieces = [f"block {_block(b)}: warps {_ranges(w)}" for b, w in sorted(pieces[key].items())] + g.pieces
        if g.line is not None:
            g.quoted = quote(g.file, g.line, sources)
            if module.language == "ptx" and g.file in sources:
                g.wait = describe_wait(sources[g.file], g.line)
    ranked = sorted(groups.values(), key=lambda g: -g.threads)
    notes = []
    if no_line:
        why = table.note or "the kernel's start address or the line table did not cover them"
        notes.append(f"{no_line} thread range(s) have no source line: {why}.")
    if not ranked:
        notes.append("cuda-gdb's threads belong to no kernel of this answer")
    return HangReport(groups=ranked, note=" ".join(notes))
