"""A model's Markdown answer → Solution: one source block (```ptx or ```cuda) and one ```json LaunchSpec.

The answer is read outside the reply's reasoning: a reasoning model's `<think>…</think>` (Qwen3, QwQ), or a
`</think>` with no opening (DeepSeek-R1, whose chat template opens the reasoning in the prompt) never supplies
the source or the spec, however many drafts it holds. Every refusal is an AnswerError whose message says what
was found, where, and what was expected.
"""

from __future__ import annotations

import json
import re

from pydantic import ValidationError

from tools.jsontext import JsonRefused, loads
from tools.solution import ARG_KINDS, LaunchSpec, Solution

MAX_ANSWER_BYTES = 8 << 20

SOURCE_TAGS = {"ptx": "ptx", "cuda": "cuda", "cu": "cuda", "c++": "cuda", "cpp": "cuda"}
SPEC_TAGS = {"json"}
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)[^`]*$")
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


class AnswerError(ValueError):
    """An answer that cannot become a Solution; the message is meant for the model."""


def extract_solution(markdown: str) -> Solution:
    """The Solution an answer holds outside its reasoning, or AnswerError."""
    if len(markdown.encode("utf-8", "replace")) > MAX_ANSWER_BYTES:
        raise AnswerError(f"the answer is larger than {MAX_ANSWER_BYTES >> 20} MB")
    answer, unclosed = outside_reasoning(markdown)
    blocks = _fenced_blocks(answer)
    sources = [b for b in blocks if b[0] in SOURCE_TAGS]
    specs = [b for b in blocks if b[0] in SPEC_TAGS]
    if not sources:
        if unclosed is not None:
            raise AnswerError(f"the reply ends inside its reasoning ({THINK_OPEN} at line {unclosed} is never "
                              f"closed), so it holds no answer: close the reasoning with {THINK_CLOSE} and put "
                              "the ```ptx (or ```cuda) block and the ```json launch spec after it")  # fmt: skip
        others = sorted({b[0] or "(untagged)" for b in blocks})
        seen = f" (found blocks tagged: {', '.join(others)})" if others else ""
        drafts = len([b for b in _fenced_blocks(markdown) if b[0] in SOURCE_TAGS])
        where = f" outside the reasoning ({drafts} inside {THINK_OPEN}…{THINK_CLOSE}, not read)" if drafts else ""
        raise AnswerError(f"no ```ptx or ```cuda source block found{where}{seen}; put the whole kernel in one "
                          "```ptx (or ```cuda) block and the launch spec in one ```json block after it")  # fmt: skip
    if len(sources) > 1:
        lines = ", ".join(str(b[1]) for b in sources)
        raise AnswerError(
            f"{len(sources)} source blocks found (opening at lines {lines}); give exactly one "
            "```ptx or ```cuda block holding the whole module"
        )
    if not specs:
        raise AnswerError("no ```json launch spec block found; give exactly one, after the source block")
    if len(specs) > 1:
        lines = ", ".join(str(b[1]) for b in specs)
        raise AnswerError(f"{len(specs)} ```json blocks found (opening at lines {lines}); give exactly one")
    tag, _, source = sources[0]
    if not source.strip():
        raise AnswerError(f"the ```{tag} block is empty")
    return Solution(language=SOURCE_TAGS[tag], source=source, launch=parse_launch_spec(specs[0][2], specs[0][1]))


def outside_reasoning(text: str) -> tuple[str, int | None]:
    """`text` with its reasoning blanked (each reasoning line left empty, so line numbers stay the reply's), and
    the line of a `<think>` never closed (the reply ends inside it), or None. Reasoning: everything before a
    first `</think>` that no `<think>` opens, every `<think>…</think>`, and everything after an unclosed
    `<think>`."""
    kept, pos, unclosed = [], 0, None
    first_close, first_open = text.find(THINK_CLOSE), text.find(THINK_OPEN)
    if first_close != -1 and (first_open == -1 or first_close < first_open):
        kept.append(_blank(text[: first_close + len(THINK_CLOSE)]))
        pos = first_close + len(THINK_CLOSE)
    while (start := text.find(THINK_OPEN, pos)) != -1:
        kept.append(text[pos:start])
        end = text.find(THINK_CLOSE, start)
        if end == -1:
            unclosed = text.count("\n", 0, start) + 1
            pos = start
            break
        kept.append(_blank(text[start : end + len(THINK_CLOSE)]))
        pos = end + len(THINK_CLOSE)
    kept.append(_blank(text[pos:]) if unclosed is not None else text[pos:])
    return "".join(kept), unclosed


def _blank(reasoning: str) -> str:
    return "\n" * reasoning.count("\n")


def parse_launch_spec(text: str, first_line: int = 0) -> LaunchSpec:
    """A LaunchSpec from JSON text; `first_line` is where the block starts in the answer (for messages)."""
    try:
        data = loads(text)
    except JsonRefused as e:
        raise AnswerError(f"the launch spec is refused: {e}") from None
    except json.JSONDecodeError as e:
        where = f"line {e.lineno} column {e.colno} of the json block"
        if first_line:
            where += f" (line {first_line + e.lineno} of the answer)"
        raise AnswerError(f"the launch spec is not valid JSON: {e.msg} at {where}") from None
    if not isinstance(data, dict):
        raise AnswerError(f"the launch spec must be a JSON object with 'launches', got a {type(data).__name__}")
    try:
        return LaunchSpec.model_validate(data)
    except ValidationError as e:
        raise AnswerError("the launch spec does not match the schema:\n" + format_validation_error(e)) from None


def format_validation_error(error: ValidationError, limit: int = 12) -> str:
    """Pydantic's errors as `path: message` lines, e.g. `launches[0].args[2].box: field required`."""
    lines = []
    for item in error.errors()[:limit]:
        path = _path(item["loc"])
        msg = item["msg"]
        if item["type"] == "extra_forbidden":
            msg = "unknown field"
        elif item["type"] == "missing":
            msg = "required field is missing"
        elif item["type"] == "literal_error":
            msg = f"{msg}, got {item.get('input')!r}"
        elif item["type"] == "value_error":
            msg = msg.removeprefix("Value error, ")
        lines.append(f"- {path or '(top level)'}: {msg}")
    if len(error.errors()) > limit:
        lines.append(f"- … and {len(error.errors()) - limit} more")
    return "\n".join(lines)


def _path(loc: tuple) -> str:
    out = ""
    for i, part in enumerate(loc):
        # Pydantic puts the union tag ('tensor_map') after an arg's index; it is not a real field.
        if part in ARG_KINDS and i >= 2 and loc[i - 2] == "args" and isinstance(loc[i - 1], int):
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _fenced_blocks(markdown: str) -> list[tuple[str, int, str]]:
    """(tag, 1-based line of the opening fence, body) for each fenced block."""
    blocks = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, tag, start = m.group(1), m.group(2).lower(), i
        i += 1
        body = []
        while i < len(lines) and not (
            lines[i].strip().startswith(fence[0] * len(fence)) and lines[i].strip().strip(fence[0]) == ""
        ):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise AnswerError(
                f"the ```{tag} block opened at line {start + 1} is never closed (was the answer cut off?)"
            )
        blocks.append((tag, start + 1, "\n".join(body) + "\n"))
        i += 1
    return blocks
