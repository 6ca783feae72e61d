"""Reading PTX text: the module's .version/.target, its .entry parameter lists, its instruction mnemonics."""

from __future__ import annotations

import re

from pydantic import BaseModel

TYPE_BYTES = {"8": 1, "16": 2, "32": 4, "64": 8, "128": 16}
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_ENTRY = re.compile(r"\.entry\s+([\w$.]+)\s*(?:\((.*?)\))?", re.S)  # the parameter list is optional
_PARAM = re.compile(
    r"\.param\s+(?P<attrs>(?:\.(?:ptr|global|shared|const|local|align\s+\d+)\s+)*)"
    r"\.(?P<type>[busf])(?P<bits>8|16|32|64|128)\s+(?:(?:\.ptr|\.global|\.align\s+\d+)\s+)*"
    r"(?P<name>[\w$]+)\s*(?:\[(?P<count>\d+)\])?"
)
_ALIGN = re.compile(r"\.align\s+(\d+)")
_DIRECTIVE = re.compile(r"^\s*\.(version|target)\s+([^\n/]+)", re.M)
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
    return _COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), ptx)


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
    for m in _ENTRY.finditer(text):
        params = []
        for p in _PARAM.finditer(m.group(2) or ""):
            bits = TYPE_BYTES[p.group("bits")]
            count = int(p.group("count") or 1)
            aligns = _ALIGN.findall(p.group(0))
            params.append(Param(name=p.group("name"), type=f".{p.group('type')}{p.group('bits')}",
                                size=bits * count, align=int(aligns[0]) if aligns else bits,
                                array=p.group("count") is not None))  # fmt: skip
        tail = text[m.end() : text.find("{", m.end())]
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
