"""Reading PTX text: the module's .version/.target, its .entry parameter lists, its instruction mnemonics."""

from __future__ import annotations

import re

from pydantic import BaseModel

TYPE_BYTES = {"8": 1, "16": 2, "32": 4, "64": 8, "128": 16}
# Every pattern here runs on text a model wrote, so each is linear in it: an unclosed comment runs to the end
# (rather than each of 150,000 openers scanning to the end again), and `^[ \t]*` never crosses lines.
COMMENT = re.compile(r"//[^\n]*|/\*.*?(?:\*/|\Z)", re.S)
_ENTRY = re.compile(r"\.entry\s+([\w$.]+)\s*")
_PARAM = re.compile(
    r"\.param\s+(?P<attrs>(?:\.(?:ptr|global|shared|const|local|align\s+\d+)\s+)*)"
    r"\.(?P<type>[busf])(?P<bits>8|16|32|64|128)\s+(?:(?:\.ptr|\.global|\.align\s+\d+)\s+)*"
    r"(?P<name>[\w$]+)\s*(?:\[(?P<count>\d+)\])?"
)
_ALIGN = re.compile(r"\.align\s+(\d+)")
_DIRECTIVE = re.compile(r"^[ \t]*\.(version|target)[ \t]+([^\n/]+)", re.M)
_STATEMENT_HEAD = re.compile(r"^(?:[\w$]+:\s*)*(?:@!?%?\w+\s+)?([a-z][\w.:]*)")
_BRACED = re.compile(r"\{([^{}]*)\}")
LIST_KEPT = 2  # items kept at each end of a long {…} list


class Param(BaseModel):
    name: str
    type: str  # e.g. ".u64", ".b8"
    size: int  # bytes
    align: int
    array: bool

    def describe(self) -> str:
        array = f"[{self.size // TYPE_BYTES[self.type[2:]]}]" if self.array else ""
        align = f".align {self.align} " if self.array else ""
        return f".param {align}{self.type} {self.name}{array}"


class Entry(BaseModel):
    name: str
    params: list[Param]
    reqntid: list[int] | None = None
    maxntid: list[int] | None = None


def strip_comments(ptx: str) -> str:
    # Keep line numbers: replace each comment by as many newlines as it spanned.
    return COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), ptx)


def directives(ptx: str) -> dict[str, str]:
    """`{'version': '9.0', 'target': 'sm_90a'}` from the module header (first of each)."""
    found: dict[str, str] = {}
    for key, value in _DIRECTIVE.findall(strip_comments(ptx)):
        found.setdefault(key, value.strip().rstrip(";"))
    return found


def entries(ptx: str) -> dict[str, Entry]:
    """Every .entry with its parameters in order, and its thread-count directives."""
    text = strip_comments(ptx)
    found = {}
    heads = list(_ENTRY.finditer(text))
    for i, m in enumerate(heads):
        # An entry's parameter list and directives lie before the next entry: looking no further keeps this
        # linear when thousands of entries never close their parentheses or braces.
        limit = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        close = text.find(")", m.end(), limit) if text.startswith("(", m.end()) else -1
        params = []
        for p in _PARAM.finditer(text[m.end() + 1 : close] if close != -1 else ""):
            bits = TYPE_BYTES[p.group("bits")]
            count = int(p.group("count") or 1)
            aligns = _ALIGN.findall(p.group(0))
            params.append(Param(name=p.group("name"), type=f".{p.group('type')}{p.group('bits')}",
                                size=bits * count, align=int(aligns[0]) if aligns else bits,
                                array=p.group("count") is not None))  # fmt: skip
        brace = text.find("{", m.end(), limit)
        tail = text[close + 1 if close != -1 else m.end() : brace if brace != -1 else limit]
        found[m.group(1)] = Entry(name=m.group(1), params=params, reqntid=_dims(tail, "reqntid"),
                                  maxntid=_dims(tail, "maxntid"))  # fmt: skip
    return found


def _dims(text: str, directive: str) -> list[int] | None:
    m = re.search(rf"\.{directive}\s+([\d\s,]+)", text)
    return [int(x) for x in re.split(r"[\s,]+", m.group(1).strip()) if x] if m else None


def mnemonics(ptx: str) -> set[str]:
    """Instruction mnemonics used in the module (e.g. 'wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16')."""
    found = set()
    for statement in re.split(r"[;{}]", strip_comments(ptx)):
        m = _STATEMENT_HEAD.match(statement.strip())
        if m:
            found.add(m.group(1))
    return found


def elide_lists(line: str, limit: int = 300) -> str:
    """`line` whole if it fits in `limit` characters; else with its long `{…}` operand lists cut in the middle
    (`{%r1, %r2, … 124 more …, %r127, %r128}`), so the operands after a 128-register accumulator list (the
    descriptors and immediates, which are usually what is wrong) stay in view; then cut at `limit`."""
    if len(line) <= limit:
        return line

    def shorten(m: re.Match) -> str:
        items = [x.strip() for x in m.group(1).split(",")]
        if len(items) <= 2 * LIST_KEPT + 1:
            return m.group(0)
        hidden = len(items) - 2 * LIST_KEPT
        return "{" + ", ".join([*items[:LIST_KEPT], f"… {hidden} more …", *items[-LIST_KEPT:]]) + "}"

    line = _BRACED.sub(shorten, line)
    return line if len(line) <= limit else line[: limit - 1] + "…"


class Statement(BaseModel):
    """One statement of a function body: its line, the labels before it, its guard, opcode and operands."""

    line: int
    labels: list[str]
    guard: str | None  # e.g. "%p1" or "!%p1"
    opcode: str
    operands: list[str]


_LABELS = re.compile(r"^((?:[\w$]+\s*:\s*)*)")
_GUARD = re.compile(r"^@(!?%?[\w$]+)\s+")


def split_operands(text: str) -> list[str]:
    """Comma-separated operands, commas inside [] and {} kept."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    return [*out, tail] if tail or out else out


# Debug directives end at the line's end, not at a semicolon: left in, they would swallow the statement after
# them (NVRTC puts a `.loc` before most statements).
_LINE_DIRECTIVE = re.compile(r"^[ \t]*\.(?:loc|file)\b[^\n]*", re.MULTILINE)


def bodies(ptx: str) -> dict[str, list[Statement]]:
    """Every .entry's body as statements (labels that end it are kept with an empty opcode), in order."""
    text = _LINE_DIRECTIVE.sub("", strip_comments(ptx))
    found = {}
    heads = list(_ENTRY.finditer(text))
    for i, m in enumerate(heads):
        limit = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        close = text.find(")", m.end(), limit)
        brace = text.find("{", close if close != -1 else m.end(), limit)
        if brace == -1:
            continue
        depth, end = 0, limit
        for j in range(brace, limit):  # the body's own closing brace (operand lists and scopes nest inside)
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                end = j
                break
        found[m.group(1)] = _statements(text[brace + 1 : end], text.count("\n", 0, brace + 1) + 1)
    return found


def definitions(body: list[Statement]) -> dict[str, list[Statement]]:
    """Register → the statements that write it (their first operand; every one, wherever it is)."""
    defs: dict[str, list[Statement]] = {}
    for s in body:
        if s.operands and s.opcode and not s.opcode.startswith(".") and s.operands[0].startswith("%"):
            defs.setdefault(s.operands[0], []).append(s)
    return defs


def _statements(body: str, first_line: int) -> list[Statement]:
    out, line = [], first_line
    for raw in body.split(";"):
        head = raw.lstrip(" \t\r\n{}")  # scope braces (inline-asm blocks) are not statements
        at = line + raw.count("\n", 0, len(raw) - len(head))
        labels_text = _LABELS.match(head).group(1)
        rest = head[len(labels_text) :]
        stripped = rest.lstrip(" \t\r\n{}")
        at += head.count("\n", 0, len(labels_text) + len(rest) - len(stripped))
        labels = [x.strip() for x in labels_text.split(":") if x.strip()]
        guard = None
        if g := _GUARD.match(stripped):
            guard, stripped = g.group(1), stripped[g.end() :]
        opcode, _, operands = stripped.strip().partition(" ") if stripped.strip() else ("", "", "")
        opcode, _, more = opcode.partition("\t")
        operands = f"{more} {operands}".strip()
        if opcode or labels:
            out.append(Statement(line=at, labels=labels, guard=guard, opcode=opcode,
                                 operands=split_operands(operands)))  # fmt: skip
        line += raw.count("\n")
    return out
