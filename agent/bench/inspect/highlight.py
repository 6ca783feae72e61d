"""Syntax colouring for the sources the inspector shows (PTX, CUDA C++, JSON): text → escaped HTML with
`<span class="tok-X">` around the tokens worth colouring. A small lexer of our own per language, one regular
expression each; whatever it does not recognise is kept as plain (escaped) text, so nothing is ever lost."""

from __future__ import annotations

import html
import re
from collections.abc import Callable

from markupsafe import Markup, escape

# Token classes (the CSS colours them): comment, string, number, keyword, type, directive, register,
# opcode, label, preprocessor line, JSON key, JSON literal.
COMMENT, STRING, NUMBER, KEYWORD, TYPE = "c", "s", "n", "k", "t"
DIRECTIVE, REGISTER, OPCODE, LABEL, PREPROCESSOR, KEY, LITERAL = "d", "r", "o", "l", "p", "y", "b"

_COMMENT = r"//[^\n]*|/\*.*?(?:\*/|\Z)"
_STRING = r'"(?:[^"\\\n]|\\.)*"?'

PTX = re.compile(
    rf"(?P<comment>{_COMMENT})|(?P<string>{_STRING})"
    r"|(?P<guard>@!?%[\w$]+)"
    r"|(?P<register>%[A-Za-z_$][\w$]*(?:\.[xyzw]\b)?)"
    r"|(?P<label>^[ \t]*[A-Za-z_$][\w$]*:)"
    r"|(?P<number>0[fFdD][0-9A-Fa-f]+|0[xX][0-9A-Fa-f]+U?|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?U?)"
    r"|(?P<word>[A-Za-z_$][\w$]*(?:\.[\w:]+)*)"
    r"|(?P<directive>\.[A-Za-z_]\w*)"
    r"|(?P<boundary>[;{}\n])",
    re.S | re.M,
)
PTX_TYPES = frozenset(f".{kind}{bits}" for kind in "bus" for bits in (8, 16, 32, 64, 128)) | {
    ".f16", ".f16x2", ".bf16", ".bf16x2", ".f32", ".f64", ".tf32", ".e4m3", ".e5m2", ".pred",
}  # fmt: skip

CUDA = re.compile(
    rf"(?P<comment>{_COMMENT})|(?P<string>{_STRING})|(?P<char>'(?:[^'\\\n]|\\.)*')"
    r"|(?P<preprocessor>^[ \t]*#[^\n]*)"
    r"|(?P<number>0[xX][0-9A-Fa-f]+[uUlL]*|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?[fFuUlL]*)"
    r"|(?P<word>[A-Za-z_]\w*)",
    re.S | re.M,
)
CUDA_KEYWORDS = frozenset(
    (
        "asm", "volatile", "__global__", "__device__", "__host__", "__shared__", "__constant__", "__forceinline__",
        "__noinline__", "__restrict__", "__launch_bounds__", "__cluster_dims__", "__grid_constant__", "extern",
        "static", "inline", "const", "constexpr", "if", "else", "for", "while", "do", "switch", "case", "default",
        "break", "continue", "return", "goto", "sizeof", "alignof", "alignas", "struct", "union", "class", "enum",
        "template", "typename", "namespace", "using", "typedef", "true", "false", "nullptr",
    )
)  # fmt: skip
CUDA_TYPES = frozenset(
    (
        "void", "bool", "char", "short", "int", "long", "float", "double", "unsigned", "signed", "auto", "size_t",
        "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "half", "__half",
        "__half2", "__nv_bfloat16", "__nv_bfloat162", "float2", "float4", "int2", "int4", "uint2", "uint4", "dim3",
        "CUtensorMap",
    )
)  # fmt: skip

JSON = re.compile(
    r'(?P<key>"(?:[^"\\\n]|\\.)*"(?=\s*:))|(?P<string>"(?:[^"\\\n]|\\.)*"?)'
    r"|(?P<number>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|(?P<literal>\b(?:true|false|null)\b)"
)


def highlight(text: str, language: str) -> Markup:
    """`text` as HTML, coloured as `language` ('ptx', 'cuda', 'json'; anything else: plain)."""
    lexer = LEXERS.get(language)
    return lexer(text) if lexer else escape(text)


def _spans(text: str, pattern: re.Pattern[str], classify: Callable[[re.Match[str]], str | None]) -> Markup:
    out, at = [], 0
    for m in pattern.finditer(text):
        out.append(html.escape(text[at : m.start()]))
        cls = classify(m)
        token = html.escape(m.group())
        out.append(f'<span class="tok-{cls}">{token}</span>' if cls else token)
        at = m.end()
    out.append(html.escape(text[at:]))
    return Markup("".join(out))  # every piece of the text went through html.escape


def _ptx(text: str) -> Markup:
    # An opcode is the first word of a statement: after a line start, ';', '{' or '}' (and a guard, if any),
    # with nothing but blanks between.
    state = {"end": 0, "statement_start": True}

    def classify(m: re.Match[str]) -> str | None:
        kind, token = m.lastgroup, m.group()
        starts = state["statement_start"] and not text[state["end"] : m.start()].strip()
        state["end"] = m.end()
        state["statement_start"] = kind == "boundary" or (kind == "guard" and starts)
        if kind == "word":
            return OPCODE if starts else None
        if kind == "directive":
            return TYPE if token in PTX_TYPES else DIRECTIVE
        return {"comment": COMMENT, "string": STRING, "guard": REGISTER, "register": REGISTER, "label": LABEL,
                "number": NUMBER}.get(kind)  # fmt: skip

    return _spans(text, PTX, classify)


def _cuda(text: str) -> Markup:
    def classify(m: re.Match[str]) -> str | None:
        kind, token = m.lastgroup, m.group()
        if kind == "word":
            return KEYWORD if token in CUDA_KEYWORDS else TYPE if token in CUDA_TYPES else None
        return {"comment": COMMENT, "string": STRING, "char": STRING, "preprocessor": PREPROCESSOR,
                "number": NUMBER}[kind]  # fmt: skip

    return _spans(text, CUDA, classify)


def _json(text: str) -> Markup:
    classes = {"key": KEY, "string": STRING, "number": NUMBER, "literal": LITERAL}
    return _spans(text, JSON, lambda m: classes[m.lastgroup])


LEXERS: dict[str, Callable[[str], Markup]] = {"ptx": _ptx, "cuda": _cuda, "json": _json}
