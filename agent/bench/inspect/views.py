"""What both kinds of page show of a run: a run folder as read (`LoadedRun`), its card on a bench page
(`RunCard`), and blocks of text ready for a page (`Text`). Verdicts come from the scoring module and the run's
summary, never recomputed here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from markupsafe import Markup

from agent.bench import score
from agent.bench.inspect.highlight import highlight
from agent.loop.records import Outcome, RunSummary, Trajectory
from agent.loop.summary import summarize

# Longer texts start folded, and their markup is parsed only when opened (a <template> until then), so that a
# 20,000-line answer costs the page nothing until someone reads it.
FOLD_LINES = 400
FOLD_CHARS = 40_000


@dataclass(frozen=True)
class Text:
    """A block of text as HTML (escaped, coloured when it is a source), with its size."""

    html: Markup
    lines: int
    chars: int

    @property
    def folded(self) -> bool:
        return self.lines > FOLD_LINES or self.chars > FOLD_CHARS


def text(value: str, language: str = "") -> Text:
    """`value` for a page: coloured as `language` ('ptx', 'cuda', 'json'), plain otherwise."""
    return Text(html=highlight(value, language), lines=value.count("\n") + 1, chars=len(value))


def json_text(value: Any) -> Text:
    return text(json.dumps(value, indent=2, sort_keys=True, default=str), "json")


@dataclass(frozen=True)
class LoadedRun:
    """A run folder as read: its trajectory, and what of it could not be read (shown, never dropped)."""

    path: Path
    traj: Trajectory
    problems: tuple[str, ...] = ()

    @property
    def summary(self) -> RunSummary:
        """summary.json, or, where it is missing or unreadable, the same summary derived from the turns."""
        if self.traj.summary is not None:
            return self.traj.summary
        config = self.traj.config
        return summarize(self.traj.turns, target_speedup=config.target_speedup, stop_reason=None,
                         run_id=self.traj.run_id, task=config.task, arch=config.arch, policy=config.policy)  # fmt: skip


def furthest_class(traj: Trajectory) -> str:
    """The error class of the turn that got furthest (score.CLASSES lists them best first)."""
    classes = [score.ERROR_CLASS[t.evaluation.status] for t in traj.turns]
    return min(classes, key=score.CLASSES.index, default=score.NOT_REACHED)


@dataclass(frozen=True)
class RunCard:
    """One run as a bench page lists it, and as its own page's header shows it."""

    run_id: str
    href: str
    task: str
    definition: str
    workload: str  # 'm70', 's4096', 'all' (a shape-general task)
    arch: str
    mode: str
    model: str
    prompt: str | None
    status: str
    solved: bool
    best_speedup: float | None
    turns: int
    max_turns: int
    turn_classes: tuple[str, ...]
    first_correct: int | None
    stop: str
    tokens: int
    model_seconds: float
    eval_seconds: float
    problems: tuple[str, ...]

    def filters(self) -> dict[str, str]:
        """The values a bench page's filters match this run on."""
        return {"model": self.model, "task": self.task, "definition": self.definition, "workload": self.workload,
                "arch": self.arch, "mode": self.mode, "prompt": self.prompt or score.NO_PROMPT}  # fmt: skip


def run_card(run: LoadedRun, href: str) -> RunCard:
    row = score.trajectory_row(run.traj)
    summary = run.summary
    return RunCard(
        run_id=run.traj.run_id,
        href=href,
        task=row["task"],
        definition=row["definition"],
        workload=row["workload"],
        arch=row["arch"],
        mode=row["mode"],
        model=row["model"],
        prompt=score.prompt_variant(run.traj),
        status=furthest_class(run.traj),
        solved=summary.outcome is Outcome.SOLVED,
        best_speedup=row["best_speedup"],
        turns=row["turns"],
        max_turns=row["max_turns"],
        turn_classes=tuple(score.ERROR_CLASS[t.evaluation.status] for t in run.traj.turns),
        first_correct=row["first_correct"],
        stop=row["stop_reason"] or "unfinished",
        tokens=summary.prompt_tokens + summary.completion_tokens,
        model_seconds=summary.model_seconds,
        eval_seconds=summary.eval_seconds,
        problems=run.problems,
    )
