"""Exporting SFT data from run folders (runs, bench folders, runs dirs), in the chat format that OpenAI-style
fine-tuning and TRL's SFTTrainer read, with a data card beside it (`python -m agent.export_sft` is the
command):

  FILE.jsonl               one example per line: {"messages": [...], "metadata": {...}}
  FILE.holdout.jsonl       the held-out tasks' examples (holdout_tasks= or split_by_task=)
  FILE.card.md, .card.json what is in each file, the filters, the command, what each filter removed

fixit: a failed attempt, its feedback and the passing attempt after it (examples.py says which turns
qualify); kernelgen: a passing attempt. Only the last assistant message carries the loss. tools: a tools run's
whole conversation (tool_calls and tool messages) that submitted a passing answer; every reply carries the loss.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent.loop.records import RunFilter
from agent.loop.store import RunFolder
from agent.loop.writes import open_inside
from agent.sft.card import build_card, write_card
from agent.sft.examples import Example, collect
from agent.sft.filters import Filters, select
from tasks.catalog import get_task


class ExportSettings(BaseModel):
    """What to export, and the filters, in the order they run."""

    model_config = ConfigDict(extra="forbid")
    dirs: list[Path] = Field(min_length=1, description="Run folders, or folders holding them.")
    format: Literal["fixit", "kernelgen", "tools"] = Field(
        description="fixit pairs, kernel generation, or tool-calling conversations of tools runs (required)."
    )
    out: Path = Field(description="The output FILE.jsonl (required).")
    definition: str | None = Field(None, description="Only runs of these definitions (comma-separated).")
    workload: str | None = Field(None, description="Only runs at these workloads (m70, s4096, all; comma-separated).")
    require_targets: bool = Field(False, description="The trained answer's required target instructions ran.")
    min_speedup: float | None = Field(None, gt=0, description="The trained answer is at least this fast.")
    dedup: bool = Field(True, description="Drop repeated answers (same source, comments and spaces aside, and spec).")
    max_tokens: int | None = Field(None, gt=0, description="Drop longer examples (tiktoken).")
    max_per_task: int | None = Field(None, gt=0, description="Keep at most N per task.")
    max_per_error_class: int | None = Field(None, gt=0, description="fixit: keep at most N per failed status.")
    holdout_tasks: str | None = Field(None, description="Hold these tasks out (names or aliases, comma-separated).")
    split_by_task: float | None = Field(None, gt=0, lt=1, description="Or hold out this share of the tasks.")
    seed: int = Field(0, description="Seeds the task split and the caps' draw.")

    @field_validator("out")
    @classmethod
    def _jsonl(cls, value: Path) -> Path:
        if value.suffix != ".jsonl":
            raise ValueError(f"must name a .jsonl file, got {value}")
        return value

    @field_validator("holdout_tasks")
    @classmethod
    def _known_tasks(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return ",".join(sorted({get_task(t.strip()).name for t in value.split(",") if t.strip()}))

    @model_validator(mode="after")
    def _consistent(self) -> ExportSettings:
        if self.format != "fixit" and self.max_per_error_class is not None:
            raise ValueError(
                "max_per_error_class applies to fixit pairs only (kernelgen examples have no failed attempt)"
            )
        if self.holdout_tasks and self.split_by_task is not None:
            raise ValueError("give holdout_tasks or split_by_task, not both")
        return self

    def filters(self) -> Filters:
        return Filters(
            definitions=RunFilter(definition=self.definition).definition,
            workloads=RunFilter(workload=self.workload).workload,
            require_targets=self.require_targets,
            min_speedup=self.min_speedup,
            dedup=self.dedup,
            max_tokens=self.max_tokens,
            holdout_tasks=tuple(self.holdout_tasks.split(",")) if self.holdout_tasks else (),
            split_by_task=self.split_by_task,
            max_per_task=self.max_per_task,
            max_per_error_class=self.max_per_error_class,
            seed=self.seed,
        )


@dataclass(frozen=True)
class Exported:
    candidates: int
    runs: int
    files: dict[str, tuple[Path, int]]  # name → (path, examples)
    card_md: Path
    skipped: list[str]
    lacking: dict[str, int]  # why readable runs gave no candidate: reason → runs


def export(folders: list[RunFolder], settings: ExportSettings, command: str) -> Exported:
    """Select examples from `folders` and write the files and the data card; `command` is recorded in it."""
    filters = settings.filters()
    collected = collect(folders, settings.format)
    candidates, skipped = collected.candidates, collected.skipped
    selection = select(candidates, filters)
    stem = settings.out.with_suffix("")
    paths = {"train": settings.out}
    if filters.split:
        paths["holdout"] = stem.with_name(stem.name + ".holdout.jsonl")
    settings.out.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(paths["train"], selection.train)
    if "holdout" in paths:
        write_jsonl(paths["holdout"], selection.holdout)
    card = build_card(settings.format, selection, filters, paths, command, len(folders), skipped)
    _, card_md = write_card(card, stem)
    files = {name: (path, card["files"][name]["examples"]) for name, path in paths.items()}
    return Exported(len(candidates), len(folders), files, card_md, skipped, collected.lacking)


def write_jsonl(path: Path, examples: list[Example]) -> None:
    with open_inside(path, "w", encoding="utf-8") as f:
        for e in examples:
            f.write(json.dumps(e.line(), ensure_ascii=False) + "\n")
