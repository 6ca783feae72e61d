"""CUDA C++ (with inline PTX) → PTX through NVRTC, in a child process so that a compiler crash or hang
costs only that process. Only headers NVRTC ships (the CUDA runtime wheel's include folder) may be
included, or tested with __has_include: any other name would read the host's files, or tell the model
(through #error) which of them exist."""

from __future__ import annotations

import bisect
import json
import re
import subprocess
import sys
from pathlib import Path

from tools import procs
from tools.toolchain import cuda_include_dir

SOURCE_NAME = "answer.cu"
_INCLUDE = re.compile(r"^[\s\ufeff]*(?:#|%:|\?\?=)\s*include(?:_next)?\b\s*(.*)$")
_PP_NAME = re.compile(r'^(<([^<>]+)>|"([^"]+)")')
_IF = re.compile(r"^[\s\ufeff]*(?:#|%:|\?\?=)\s*(?:if|elif)\b")
_DEFINE = re.compile(r"^[\s\ufeff]*(?:#|%:|\?\?=)\s*define\s+([A-Za-z_]\w*)(.*)$")
# Identifiers and the paste operator, with string and character literals matched only to be stepped over.
_WORD = re.compile(r'"(?:\\.|[^"\\\n])*"?|\'(?:\\.|[^\'\\\n])*\'?|(?P<word>[A-Za-z_]\w*|##|%:%:)')
_HAS_INCLUDE = {"__has_include", "__has_include_next"}
_HAS_INCLUDE_OPERAND = re.compile(r'\s*\(\s*(<[^<>]+>|"[^"]+")\s*\)')
SHIPPED_EXAMPLES = "(e.g. <cuda_bf16.h>, <cuda_fp16.h>, <cuda_fp8.h>, <cuda_pipeline.h>)"
# The tokens that decide where comments are: literals (a comment opener inside one is text), identifiers and
# pp-numbers (so that `u8"`, `R"` and digit separators like 1'000 read as the compiler reads them), comments.
_TOKEN = re.compile(
    r'(?P<raw>(?:u8|[uUL])?R"(?P<delim>[^()\\\s"]{0,16})\(.*?\)(?P=delim)")'
    r'|(?P<bad_raw>(?:u8|[uUL])?R")'
    r'|(?:u8|[uUL])?"(?:\\[^\n]|[^"\\\n])*"?'  # an unclosed literal ends with its line, as in the compiler
    r"|(?:u8|[uUL])?'(?:\\[^\n]|[^'\\\n])*'?"
    r"|[A-Za-z_]\w*"
    r"|\.?\d(?:[eEpP][+-]|'\w|[\w.])*"
    r"|(?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z))",  # an unclosed comment runs to the end
    re.S,
)


class IncludeRefused(ValueError):
    def __init__(self, line: int, message: str):
        self.line = line
        super().__init__(message)


def check_includes(source: str) -> None:
    """Raise IncludeRefused for an #include, or a __has_include test, of anything but a header in the CUDA
    include folder, and for anything that could build such a test where we cannot see it."""
    include_dir = cuda_include_dir()
    lines = _logical_lines(source)
    pasting = _pasting_macros(lines)
    for number, line in lines:
        words = [m for m in _WORD.finditer(line) if m.group("word")]
        for m in words:
            if m.group("word") in _HAS_INCLUDE:
                _check_has_include(number, line, m.end(), include_dir)
        if _IF.match(line) and (used := sorted({m.group("word") for m in words} & pasting)):
            raise IncludeRefused(
                number,
                f"#if/#elif may not use {used[0]}: it pastes tokens (##), which can build a __has_include test "
                "of a host file",
            )
        m = _INCLUDE.match(line)
        if not m:
            continue
        name_match = _PP_NAME.match(m.group(1).strip())
        if not name_match:
            raise IncludeRefused(number, '#include must name a header literally (<name> or "name")')
        if not _shipped(name_match.group(2) or name_match.group(3), include_dir):
            raise IncludeRefused(
                number,
                f"#include {name_match.group(1)} is refused: only the headers NVRTC ships may be included "
                + SHIPPED_EXAMPLES,
            )


def _check_has_include(number: int, line: str, end: int, include_dir: Path | None) -> None:
    operand = _HAS_INCLUDE_OPERAND.match(line, end)
    if operand is None:
        raise IncludeRefused(number, "__has_include must test a header named literally: __has_include(<name>)")
    name = _PP_NAME.match(operand.group(1))
    if not _shipped(name.group(2) or name.group(3), include_dir):
        raise IncludeRefused(
            number,
            f"__has_include({operand.group(1)}) is refused: only the headers NVRTC ships may be tested "
            + SHIPPED_EXAMPLES,
        )


def _pasting_macros(lines: list[tuple[int, str]]) -> set[str]:
    """Macros that paste tokens, or expand to one that does (to a fixed point): in #if they could build
    `__has_include` out of pieces that no check sees."""
    bodies = {}
    for _, line in lines:
        if m := _DEFINE.match(line):
            bodies[m.group(1)] = {w.group("word") for w in _WORD.finditer(m.group(2)) if w.group("word")}
    pasting = {name for name, words in bodies.items() if words & {"##", "%:%:"}}
    grown = True
    while grown:
        more = {name for name, words in bodies.items() if words & pasting} - pasting
        pasting |= more
        grown = bool(more)
    return pasting


def _logical_lines(source: str) -> list[tuple[int, str]]:
    """(first physical line number, text) of each line as the preprocessor reads directives: backslash-continued
    lines joined (translation phase 2), then comments replaced by a space (phase 3), so that neither
    `#/**/include` nor a comment opener inside a string literal hides an #include."""
    starts, pieces, splices, length = [], [], [], 0
    continued = False
    for number, line in enumerate(source.replace("\r\n", "\n").split("\n"), start=1):
        if not continued:
            starts.append(number)
        continued = line.endswith("\\")
        pieces.append(line[:-1] if continued else line + "\n")
        length += len(pieces[-1])
        if continued:
            splices.append(length)
    text = "".join(pieces)

    def blank(m: re.Match) -> str:
        if m.group("comment"):
            return " " + "\n" * m.group(0).count("\n")
        # The compiler undoes line splices inside a raw string, so a splice there would shift where it ends.
        spliced = m.group("raw") and bisect.bisect_right(splices, m.start()) < bisect.bisect_left(splices, m.end())
        if spliced or m.group("bad_raw"):
            line = starts[text.count("\n", 0, m.start())]
            raise IncludeRefused(line, "a raw string literal that is unterminated or holds a line splice is refused")
        return m.group(0)

    return list(zip(starts, _TOKEN.sub(blank, text).split("\n"), strict=False))


def _shipped(name: str, include_dir: Path | None) -> bool:
    if include_dir is None or "\0" in name or name.startswith(("/", "\\")) or ".." in Path(name).parts:
        return False
    path = (include_dir / name).resolve()
    return path.is_file() and path.is_relative_to(include_dir.resolve())


def lower_to_ptx(source: str, arch: str, budget: procs.Budget) -> tuple[str | None, str]:
    """(PTX or None, NVRTC's log). `arch` is e.g. 'sm_90a'."""
    request = json.dumps({"source": source, "arch": arch})
    try:
        done = procs.run([sys.executable, "-m", "tools.nvrtc"], budget.left(), input=request)
    except subprocess.TimeoutExpired:
        return None, budget.exceeded("NVRTC")
    if done.returncode != 0:
        return None, f"NVRTC crashed (exit code {done.returncode}): {done.stderr.strip()[-2000:]}"
    reply = json.loads(done.stdout)
    return reply["ptx"], reply["log"]


def _compile_here(source: str, arch: str) -> dict:
    from cuda.bindings import nvrtc

    include_dir = cuda_include_dir()
    options = [f"--gpu-architecture=compute_{arch.removeprefix('sm_')}", "-lineinfo", "--std=c++17"]
    if include_dir:
        options.append(f"--include-path={include_dir}")
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), SOURCE_NAME.encode(), 0, [], [])
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return {"ptx": None, "log": f"nvrtcCreateProgram failed: {err}"}
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        log_text = log.rstrip(b"\0 ").decode(errors="replace")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return {"ptx": None, "log": log_text or str(err)}
        _, size = nvrtc.nvrtcGetPTXSize(prog)
        ptx = b" " * size
        nvrtc.nvrtcGetPTX(prog, ptx)
        return {"ptx": ptx.rstrip(b"\0").decode(), "log": log_text}
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def version() -> str:
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


if __name__ == "__main__":
    req = json.loads(sys.stdin.read())
    print(json.dumps(_compile_here(req["source"], req["arch"])))
