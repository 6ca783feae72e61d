"""The data card written beside an export (FILE.card.json and FILE.card.md): what each file holds (counts
per task, arch, error class and model; token lengths), the filters and the exact command that made it,
and what each filter removed. Coverage and balance matter as much as size, so they are shown, not implied.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agent.loop.writes import write_inside
from agent.sft.examples import Example, Kind
from agent.sft.filters import Filters, Selection

DESCRIPTIONS = {
    "fixit": "repair-conditioned pairs: system prompt, task prompt, a failed attempt (weight 0), the feedback "
    "the loop gave on it, and the passing attempt that followed (weight 1; the reasoning in <think> tags "
    "where it was recorded)",
    "kernelgen": "kernel generation: system prompt, task prompt, and a passing attempt (weight 1; the "
    "reasoning in <think> tags where it was recorded), one per distinct solution",
    "tools": "tool-calling conversations of tools-mode runs that submitted a passing answer: system prompt, task "
    "prompt, each reply with its tool_calls (weight 1) and each result as a tool message; the function schemas in "
    "each line's `tools`",
}
TRAINING = """\
Each line is `{"messages": [...], "metadata": {...}}`. Only the last assistant message carries the loss.

- OpenAI-style fine-tuning reads `messages` and its per-message `weight` (0 or 1, on assistant messages).
- TRL's `SFTTrainer` reads `messages`. With `assistant_only_loss=True` it trains on *every* assistant
  message, the failed attempt included; to train on the last one only, make each line a conversational
  prompt-completion example, which TRL trains on the completion only (`completion_only_loss`, on by
  default for such data):

  ```python
  ds = load_dataset("json", data_files=FILE, split="train").map(
      lambda ex: {"prompt": ex["messages"][:-1], "completion": ex["messages"][-1:]},
      remove_columns=["messages", "metadata"])
  ```
"""

TOOLS_TRAINING = """\
Each line is `{"messages": [...], "tools": [...], "metadata": {...}}`: the whole tool-calling conversation, every
assistant message (its `tool_calls`) carrying the loss (`weight` 1), the tool results and the loop's notices not.

- OpenAI-style fine-tuning reads `messages` (with `tool_calls` and `tool` messages), `tools` and `weight`.
- TRL's `SFTTrainer` reads `messages` and `tools`, rendered through the model's chat template (it must know
  tool calls, as Qwen3's does); `assistant_only_loss=True` trains on the assistant messages alone:

  ```python
  ds = load_dataset("json", data_files=FILE, split="train").remove_columns(["metadata"])
  ```
"""


def build_card(
    kind: Kind,
    selection: Selection,
    filters: Filters,
    paths: dict[str, Path],
    command: str,
    runs: int,
    skipped: list[str],
) -> dict[str, Any]:
    folder = paths["train"].parent
    return {
        "format": kind,
        "description": DESCRIPTIONS[kind],
        "command": relative_paths(command, folder),
        "runs_read": runs,
        "runs_skipped": [relative_paths(line, folder) for line in skipped],
        "filters": {
            **asdict(filters),
            **{k: list(getattr(filters, k)) for k in ("definitions", "workloads", "holdout_tasks")},
        },
        "held_out_tasks": selection.held_out_tasks,
        "funnel": [asdict(s) for s in selection.funnel],
        "files": {
            name: describe(examples, paths[name], kind)
            for name, examples in (("train", selection.train), ("holdout", selection.holdout))
            if name in paths
        },
    }


_ABSOLUTE_PATH = re.compile(r"(?<![\w.~/-])/[^\s'\"`,;()]*")


def relative_paths(text: str, folder: Path) -> str:
    """`text` (a command line, a message) with each absolute path written relative to `folder`, the card's:
    a card travels with its data, so it says where things were beside it, not on the exporting machine."""
    return _ABSOLUTE_PATH.sub(lambda m: os.path.relpath(m.group(), Path(folder).resolve()), text)


def describe(examples: list[Example], path: Path, kind: Kind) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "path": path.name,
        "examples": len(examples),
        "tokens": token_stats([e.tokens for e in examples]),
        "by_task": _count(examples, lambda e: e.task),
        "by_arch": _count(examples, lambda e: e.arch),
        "by_model": _count(examples, lambda e: e.answer.model),
    }
    if kind == "fixit":
        facts["by_error_class"] = _count(examples, lambda e: e.error_class)
        facts["by_failed_attempt_model"] = _count(examples, lambda e: e.wrong.model if e.wrong else None)
        facts["mined"] = sum(e.mined for e in examples)
    return facts


def token_stats(lengths: list[int]) -> dict[str, float] | None:
    """min, median, p90 (nearest rank), max and total; None for no examples."""
    if not lengths:
        return None
    ordered = sorted(lengths)
    p90 = ordered[math.ceil(0.9 * len(ordered)) - 1]
    return {
        "min": ordered[0],
        "median": statistics.median(ordered),
        "p90": p90,
        "max": ordered[-1],
        "total": sum(ordered),
    }


def write_card(card: dict[str, Any], stem: Path) -> tuple[Path, Path]:
    """STEM.card.json and STEM.card.md; returns their paths."""
    json_path, md_path = stem.with_name(stem.name + ".card.json"), stem.with_name(stem.name + ".card.md")
    write_inside(json_path, json.dumps(card, indent=2) + "\n")
    write_inside(md_path, markdown(card))
    return json_path, md_path


def markdown(card: dict[str, Any]) -> str:
    files = card["files"]
    lines = [
        f"# SFT data card: {files['train']['path']}",
        "",
        f"**Format: {card['format']}** — {card['description']}.",
        "",
        f"Made by: `{card['command']}`",
        "",
        f"Runs read: {card['runs_read']}; unreadable, skipped: {len(card['runs_skipped'])}.",
        *(f"- {s}" for s in card["runs_skipped"]),
        "",
        "## Files",
        "",
        _table(
            ("file", "examples", "tokens min", "median", "p90", "max", "total"),
            [(f["path"], f["examples"], *_token_cells(f["tokens"])) for f in files.values()],
        ),
        "",
        "## Filters",
        "",
        _table(("filter", "setting"), [(k, _setting(v)) for k, v in card["filters"].items()]),
        "",
        f"Held-out tasks: {', '.join(card['held_out_tasks']) or 'none'}.",
        "",
        "## What each filter removed",
        "",
        _table(
            ("step", "file", "removed", "kept"),
            [(s["name"], s["file"], s["removed"], s["kept"]) for s in card["funnel"]],
        ),
    ]
    for facts in files.values():
        lines += ["", f"## {facts['path']}", ""]
        if "mined" in facts:
            lines += [f"Pairs mined by a teacher from another run's failed attempt: {facts['mined']}.", ""]
        for key, title in (
            ("by_task", "task"),
            ("by_arch", "arch"),
            ("by_error_class", "error class"),
            ("by_model", "model of the trained answer"),
            ("by_failed_attempt_model", "model of the failed attempt"),
        ):
            if key in facts:
                lines += [_table((title, "examples"), list(facts[key].items())), ""]
    lines += ["## Training on it", "", TOOLS_TRAINING if card["format"] == "tools" else TRAINING]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines))


def _count(examples: list[Example], key: Callable[[Example], Any]) -> dict[str, int]:
    return dict(sorted(Counter(str(key(e)) for e in examples).items()))


def _token_cells(stats: dict[str, float] | None) -> tuple[Any, ...]:
    if stats is None:
        return ("-",) * 5
    return tuple(f"{stats[k]:,}" for k in ("min", "median", "p90", "max", "total"))


def _setting(value: Any) -> str:
    if value is None or value == [] or value is False:
        return "off"
    if value is True:
        return "on"
    return ", ".join(value) if isinstance(value, list) else str(value)


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
