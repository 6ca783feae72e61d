"""Which `.entry` parameter a memory access's address is computed from, read from the PTX text: the address
register of the access is followed back through the definitions of its function (all of them: a flow-
insensitive reading, as tools/ptx_values.py's) to the `ld.param` loads it starts from. It answers "the store
ran past the end of C" where the address alone, far from every buffer, cannot say which one the kernel meant.

A PTX answer names the access by its line; a CUDA answer by its CUDA line, which NVRTC's `.loc` directives
map to the PTX statements it became. Anything the reading cannot follow (a pointer loaded from memory, more
than MAX_DEFINITIONS definitions back) adds no parameter: the answer is then "not known", never a guess."""

from __future__ import annotations

import re

from tools import ptx as ptx_text
from tools.ptx import Statement

MAX_DEFINITIONS = 256  # definitions visited from one access: address code takes a handful
NOT_GLOBAL = {"param", "shared", "local", "const"}  # state spaces an address into a task buffer is not in
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]+)"')
_REGISTER = re.compile(r"%[\w$]+")
_PARAM = re.compile(r"\[\s*([A-Za-z_$][\w$]*)\s*(?:\+\s*\d+)?\s*\]")


def global_access(opcode: str) -> bool:
    """A load, store, atomic or reduction in the global (or generic) state space."""
    parts = opcode.split(".")
    return parts[0] in ("ld", "st", "atom", "red") and not (len(parts) > 1 and parts[1] in NOT_GLOBAL)


def _function_at(ptx: str, line: int) -> tuple[list[Statement], Statement] | None:
    """The body holding the statement on `line`, and that statement."""
    for body in ptx_text.bodies(ptx).values():
        found = next((s for s in body if s.line == line), None)
        if found is not None:
            return body, found
    return None


def origins(ptx: str, line: int) -> set[str]:
    """The parameters the address of the global access on PTX `line` is computed from (empty: not known)."""
    located = _function_at(ptx, line)
    if located is None or not global_access(located[1].opcode):
        return set()
    body, access = located
    address = next((op for op in access.operands if op.startswith("[")), None)
    if address is None:
        return set()
    defs = ptx_text.definitions(body)
    found, seen = set(), set()
    todo = _REGISTER.findall(address)
    while todo and len(seen) < MAX_DEFINITIONS:
        register = todo.pop()
        if register in seen:
            continue
        seen.add(register)
        for d in defs.get(register, []):
            if d.opcode.startswith("ld.param"):
                found |= {m.group(1) for op in d.operands[1:] if (m := _PARAM.match(op))}
            elif not d.opcode.startswith(("ld.", "atom.")):  # a pointer loaded from memory is not followed
                todo += [r for op in d.operands[1:] for r in _REGISTER.findall(op)]
    return found


def cuda_line_statements(ptx: str, source_name: str, line: int) -> list[int]:
    """The PTX lines of the global memory accesses NVRTC's `.loc` directives attribute to `line` of
    `source_name`."""
    files = {m.group(1) for text in ptx.splitlines() if (m := _FILE.match(text)) and m.group(2).endswith(source_name)}
    attributed, current = set(), False
    for number, text in enumerate(ptx.splitlines(), start=1):
        if m := _LOC.match(text):
            current = m.group(1) in files and int(m.group(2)) == line
        elif current:
            attributed.add(number)
    return [s.line for body in ptx_text.bodies(ptx).values() for s in body
            if s.line in attributed and global_access(s.opcode)]  # fmt: skip
