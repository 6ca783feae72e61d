"""Exported SFT files read back: each line as the Example it was exported from, each file with its data
card, checked before anything trains on them or rewrites them.

A file's card is FILE.card.json, or for FILE.holdout.jsonl the card of FILE.jsonl; it must list the file
and its example count (a file edited after export no longer matches its card). Lines that are not an
exported example (hand-made data, with require_card=false) get placeholders for what they do not say.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.cli import ConfigError
from agent.loop.writes import open_inside
from agent.sft.examples import Example, Origin
from tools import jsontext
from tools.files import not_a_file

UNKNOWN = "unknown"


class DataError(ConfigError):
    """Data we refuse to use; the message names the file (and line) and what to do (exit 2)."""


@dataclass(frozen=True)
class Record:
    """One line of an exported file: the object as read, and the Example it describes."""

    line: dict[str, Any]
    example: Example
    where: str  # FILE:LINE, for messages


@dataclass(frozen=True)
class DataFile:
    """An exported file: its records, and its data card (None when it has none, or one that does not match)."""

    path: Path
    records: list[Record]
    card: dict[str, Any] | None
    card_path: Path | None

    @property
    def formats(self) -> set[str]:
        return {r.example.kind for r in self.records} or {(self.card or {}).get("format", UNKNOWN)}


def load(path: Path, require_card: bool = True) -> DataFile:
    """The file's examples and its card; DataError for a missing file, a malformed line or a bad card."""
    problem = not_a_file(path)
    if problem:
        raise DataError(f"{path}: {problem.removeprefix('is ')}")
    card_path = find_card(path)
    card = _card(card_path) if card_path else None
    if card is None and require_card:
        raise DataError(
            f"{path}: no data card beside it ({path.with_suffix('.card.json').name}); export it with "
            "python -m agent.sft.export, or give require_card=false to use it without one"
        )
    fallback = (card or {}).get("format", UNKNOWN)
    records = [parse(obj, f"{path}:{n}", fallback) for n, obj in _lines(path)]
    if card is not None:
        listed = next((f for f in card.get("files", {}).values() if f.get("path") == path.name), None)
        if listed is None or listed.get("examples") != len(records):
            if not require_card:
                return DataFile(path, records, None, None)  # a card that describes another file says nothing
            said = "does not list it" if listed is None else f"says {listed.get('examples')} examples"
            raise DataError(
                f"{path}: holds {len(records)} examples but its card {card_path.name} {said}: the file changed "
                "after export (export it again, or give require_card=false)"
            )
    return DataFile(path, records, card, card_path)


def find_card(path: Path) -> Path | None:
    stem = path.with_suffix("")
    names = [stem.name]
    if stem.suffix == ".holdout":
        names.append(stem.with_suffix("").name)
    return next((c for n in names if (c := path.with_name(n + ".card.json")).is_file()), None)


def check_formats(files: list[DataFile], allow_mixed: bool) -> None:
    """Different formats teach different things (repairing vs writing from scratch): mixing them is a
    choice to make explicitly."""
    found = {fmt: f.path.name for f in files for fmt in sorted(f.formats)}
    if len(found) > 1 and not allow_mixed:
        listed = ", ".join(f"{fmt} ({name})" for fmt, name in found.items())
        raise DataError(f"mixed formats: {listed}; give allow_mixed=true to train on them together")


def counts(examples: list[Example]) -> dict[str, dict[str, int]]:
    """What a set of examples covers: per format, task and error class (fix-it pairs only)."""
    return {
        "by_format": dict(sorted(Counter(e.kind for e in examples).items())),
        "by_task": dict(sorted(Counter(e.task for e in examples).items())),
        "by_error_class": dict(sorted(Counter(e.error_class for e in examples if e.error_class).items())),
    }


def split_answer(content: str) -> tuple[str | None, str]:
    """A final answer → (its <think> reasoning, or None when it has none; the answer after it, exactly as
    the model wrote it: only the blank line the exporter puts after </think> is taken off)."""
    if content.startswith("<think>") and "</think>" in content:
        head, _, answer = content.partition("</think>")
        return head.removeprefix("<think>").strip(), answer.removeprefix("\n\n")
    return None, content


def join_answer(reasoning: str, answer: str) -> str:
    """The inverse of split_answer, in the exporter's layout (agent.sft.examples.with_reasoning)."""
    return f"<think>\n{reasoning.strip()}\n</think>\n\n{answer}"


def write_jsonl(path: Path, lines: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_inside(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")


def parse(obj: Any, where: str, fallback_format: str) -> Record:
    """One line's object as a Record; DataError, naming `where`, when it is not an example."""
    if not isinstance(obj, dict) or not isinstance(obj.get("messages"), list):
        raise DataError(f"{where}: not an exported example (expected an object with a 'messages' list)")
    messages = obj["messages"]
    for index, m in enumerate(messages):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise DataError(f"{where}: messages[{index}] needs a string 'role' and 'content'")
    if len(messages) < 2 or messages[-1]["role"] != "assistant":
        raise DataError(f"{where}: needs a prompt and a final assistant message (the trained answer)")
    meta = obj.get("metadata") or {}
    if not isinstance(meta, dict):
        raise DataError(f"{where}: metadata must be an object")
    try:
        answer, wrong = (Origin(**o) if o else None for o in (meta.get("answer"), meta.get("wrong")))
    except TypeError:
        raise DataError(f"{where}: metadata.answer and .wrong must be {{run_id, turn, model}} objects") from None
    example = Example(
        id=meta.get("id") or where,
        kind=meta.get("format") or fallback_format,
        task=meta.get("task") or UNKNOWN,
        arch=meta.get("arch") or UNKNOWN,
        messages=messages,
        answer=answer or Origin(UNKNOWN, 0, UNKNOWN),
        wrong=wrong,
        error_class=meta.get("error_class"),
        speedup=meta.get("speedup"),
        targets_met=meta.get("targets_met"),
        dedup_key="",  # the exporter's concern; nothing downstream deduplicates
        tokens=meta.get("tokens") or 0,
    )
    return Record(obj, example, where)


def _card(path: Path) -> dict[str, Any]:
    try:
        card = jsontext.loads(_text(path))
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not JSON ({e.msg} at line {e.lineno}); export the data again") from None
    except jsontext.JsonRefused as e:
        raise DataError(f"{path}: not a data card we read ({e})") from None
    if not isinstance(card, dict):
        raise DataError(f"{path}: not a data card (expected a JSON object)")
    return card


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.start})") from None


def _lines(path: Path) -> list[tuple[int, Any]]:
    text = _text(path)
    out = []
    # split on newlines only: JSON written with ensure_ascii=False may hold U+2028 inside a string
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            out.append((number, jsontext.loads(line)))  # limits: a line nested deep or a huge number is refused
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{number}: not JSON ({e.msg} at column {e.colno})") from None
        except jsontext.JsonRefused as e:
            raise DataError(f"{path}:{number}: not an example we read ({e})") from None
    return out
