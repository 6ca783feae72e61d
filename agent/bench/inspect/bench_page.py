"""What a bench page shows: the grid task × (arch, mode, model) of run cards, the headline scores and
single-shot vs repair budgets from the scoring module, the report's plots as inline SVG, and the filters.

Where runs record prompt variants (config.json's `prompt`), the scores are also computed per variant, so
that filtering by one shows that variant's numbers."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.bench import plots, score
from agent.bench.inspect.views import LoadedRun, RunCard
from agent.bench.plan import MODES, Bench
from tools.evaluation import Status

FILTERS = ("model", "task", "definition", "workload", "arch", "mode", "prompt")


@dataclass(frozen=True)
class Column:
    """A column of the grid: one arch × mode × model."""

    arch: str
    mode: str
    model: str

    def filters(self) -> dict[str, str]:
        return {"arch": self.arch, "mode": self.mode, "model": self.model}


@dataclass(frozen=True)
class PromptScore:
    """A score (SuiteScore or BudgetPoint) with the prompt variant its runs share (None: no variants)."""

    prompt: str | None
    value: Any

    def filters(self) -> dict[str, str]:
        g = self.value.group
        values = {"model": g.model, "task": g.task, "arch": g.arch, "mode": g.mode}
        if g.mode == score.ALL:
            del values["mode"]  # budget points compare both modes
        return values | ({"prompt": self.prompt} if self.prompt is not None else {})


@dataclass(frozen=True)
class Unreadable:
    """A run folder the site could not place (its config.json does not parse): where, and why."""

    path: Path
    reason: str


@dataclass(frozen=True)
class BenchPage:
    title: str
    source: str
    cards: list[RunCard]
    bench: Bench | None
    unreadable: list[Unreadable]
    tasks: list[str]
    columns: list[Column]
    cells: dict[tuple[str, Column], list[RunCard]]
    filters: dict[str, list[str]]  # filter → its values, in FILTERS' order
    headline: list[PromptScore]
    per_task: list[PromptScore]
    budget: list[PromptScore]
    plots: dict[str, str]  # plot name → inline SVG
    plots_note: str | None  # why there are none
    attempts: int
    unverified: int
    variants: bool  # the scores are also given per prompt variant


def bench_page(title: str, source: str, runs: list[LoadedRun], cards: list[RunCard], bench: Bench | None,
               unreadable: list[Unreadable]) -> BenchPage:  # fmt: skip
    """The page of `runs` (cards[i] is runs[i]'s card)."""
    trajs = [r.traj for r in runs]
    mode_rank = {m: i for i, m in enumerate(MODES)}
    columns = sorted({Column(c.arch, c.mode, c.model) for c in cards},
                     key=lambda c: (c.arch, mode_rank.get(c.mode, len(MODES)), c.mode, c.model))  # fmt: skip
    cells: dict[tuple[str, Column], list[RunCard]] = defaultdict(list)
    for card in cards:
        cells[(card.task, Column(card.arch, card.mode, card.model))].append(card)
    filters = {f: sorted({c.filters()[f] for c in cards}) for f in FILTERS}
    if len({c.prompt for c in cards}) < 2:
        del filters["prompt"]  # one prompt variant (or none recorded): nothing to filter by
    if len({(c.definition, c.task) for c in cards}) == len({c.definition for c in cards}):
        del filters["definition"], filters["workload"]  # one task per definition: the task filter says it all
    one_arch = len({c.arch for c in cards}) < 2  # then the rows pooled over archs repeat the arch's own
    headline, per_task, budget = [], [], []
    variants = score.by_variant(trajs)
    for prompt, members in variants:
        for s in score.suite_scores(members):
            if not (one_arch and s.group.arch == score.ALL):
                (headline if s.group.task == score.ALL else per_task).append(PromptScore(prompt, s))
        budget += [PromptScore(prompt, p) for p in score.single_vs_multi(members)
                   if not (one_arch and p.group.arch == score.ALL)]  # fmt: skip
    drawn, note = plots.svgs(trajs) if trajs else ({}, None)
    return BenchPage(
        title=title,
        source=source,
        cards=cards,
        bench=bench,
        unreadable=unreadable,
        tasks=sorted({c.task for c in cards}),
        columns=columns,
        cells=dict(cells),
        filters=filters,
        headline=headline,
        per_task=_last_limits(per_task),
        budget=budget,
        plots=drawn,
        plots_note=note,
        attempts=sum(len(t.turns) for t in trajs),
        unverified=sum(t.evaluation.status is Status.UNVERIFIED for traj in trajs for t in traj.turns),
        variants=len(variants) > 1,
    )


def _last_limits(scores: list[PromptScore]) -> list[PromptScore]:
    """Each group's score at its largest turn limit (suite_scores lists the limits in increasing order)."""
    last: dict[tuple[str | None, score.Group], PromptScore] = {}
    for s in scores:
        last[(s.prompt, s.value.group)] = s
    return list(last.values())
