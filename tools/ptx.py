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
