"""Which `.entry` parameter a memory access's address is computed from, read from the PTX text: the address
register of the access is followed back through the definitions of its function (all of them: a flow-
insensitive reading) to the `ld.param` loads it starts from. It answers "the store ran past the end of C"
where the address alone, far from every buffer, cannot say which one the kernel meant.

A PTX answer names the access by its line; a CUDA answer by its CUDA line, which NVRTC's `.loc` directives
map to the PTX statements it became. Anything the reading cannot follow (a pointer loaded from memory, more
than MAX_DEFINITIONS definitions back) adds no parameter: the answer is then "not known", never a guess."""

from __future__ import annotations

import re

from tools import ptx as ptx_text

MAX_DEFINITIONS = 256  # definitions visited from one access: address code takes a handful
NOT_GLOBAL = {"param", "shared", "local", "const"}  # state spaces an address into a task buffer is not in
_STATEMENT = re.compile(r"^\s*(?:@!?%[\w$]+\s+)?([a-z][\w.:]*)\s+(.*?);?\s*$")
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]+)"')
_REGISTER = re.compile(r"%[\w$]+")
_PARAM = re.compile(r"\[\s*([A-Za-z_$][\w$]*)\s*(?:\+\s*\d+)?\s*\]")
NO_DESTINATION = ("st.", "red.", "bar", "barrier", "membar", "fence", "ret", "exit", "bra", "cp.async", "mbarrier.",
                  "prefetch", "wgmma.fence", "wgmma.commit", "wgmma.wait", "tcgen05.")  # fmt: skip


def _functions(ptx: str) -> list[tuple[int, int, str]]:
    """(first line, last line, name) of each `.entry`, 1-based lines of the text as given."""
    lines = ptx.splitlines()
    starts = [(i + 1, m.group(1)) for i, line in enumerate(lines) if (m := re.search(r"\.entry\s+([\w$]+)", line))]
    return [(start, (starts[k + 1][0] - 1) if k + 1 < len(starts) else len(lines), name)
            for k, (start, name) in enumerate(starts)]  # fmt: skip


def _parsed(line: str) -> tuple[str, list[str]] | None:
    m = _STATEMENT.match(ptx_text.strip_comments(line))
    if not m or m.group(1).startswith("."):
        return None
    return m.group(1), ptx_text.split_operands(m.group(2))


def global_access(opcode: str) -> bool:
    """A load, store, atomic or reduction in the global (or generic) state space."""
    parts = opcode.split(".")
    return parts[0] in ("ld", "st", "atom", "red") and not (len(parts) > 1 and parts[1] in NOT_GLOBAL)


def entry_of(ptx: str, line: int) -> str | None:
    return next((name for first, last, name in _functions(ptx) if first <= line <= last), None)


def origins(ptx: str, line: int) -> set[str]:
    """The parameters the address of the memory access on PTX `line` is computed from (empty: not known)."""
    lines = ptx.splitlines()
    span = next(((first, last) for first, last, _ in _functions(ptx) if first <= line <= last), None)
    access = _parsed(lines[line - 1]) if span and 0 < line <= len(lines) else None
    if access is None or not global_access(access[0]):
        return set()
    address = next((op for op in access[1] if op.startswith("[")), None)
    if address is None:
        return set()
    definitions: dict[str, list[tuple[str, list[str]]]] = {}
    for text in lines[span[0] - 1 : span[1]]:
        parsed = _parsed(text)
        if parsed and parsed[1] and not parsed[0].startswith(NO_DESTINATION) and parsed[1][0].startswith("%"):
            definitions.setdefault(parsed[1][0], []).append(parsed)
    found, seen = set(), set()
    todo = _REGISTER.findall(address)
    while todo and len(seen) < MAX_DEFINITIONS:
        register = todo.pop()
        if register in seen:
            continue
        seen.add(register)
        for opcode, operands in definitions.get(register, []):
            if opcode.startswith("ld.param"):
                found |= {m.group(1) for op in operands[1:] if (m := _PARAM.match(op))}
            elif not opcode.startswith(("ld.", "atom.")):  # a pointer loaded from memory is not followed
                todo += [r for op in operands[1:] for r in _REGISTER.findall(op)]
    return found


def cuda_line_statements(ptx: str, source_name: str, line: int) -> list[int]:
    """The PTX lines of the global memory accesses NVRTC's `.loc` directives attribute to `line` of
    `source_name`."""
    files = {m.group(1) for text in ptx.splitlines() if (m := _FILE.match(text)) and m.group(2).endswith(source_name)}
    out, current = [], False
    for number, text in enumerate(ptx.splitlines(), start=1):
        if m := _LOC.match(text):
            current = m.group(1) in files and int(m.group(2)) == line
        elif current and (parsed := _parsed(text)) and global_access(parsed[0]):
            out.append(number)
    return out
