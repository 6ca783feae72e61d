"""The exporter's filters, in the order they run, each counting what it removed: the runs' definition and
workload, the quality bar (targets met, a minimum speedup), de-duplication, a token cap, the split by task, and
balance caps per task and per error class (applied to each output file on its own).

Everything is deterministic: candidates arrive sorted, duplicates keep the first, and caps keep a subset
drawn by a seeded hash of each example's id, so adding runs does not reshuffle what was kept before.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from dataclasses import dataclass

from agent.loop.records import RunFilter
from agent.sft.examples import Example


@dataclass(frozen=True)
class Filters:
    definitions: tuple[str, ...] = ()  # only examples of runs of these definitions (empty: any)
    workloads: tuple[str, ...] = ()  # and at these workloads ('m70', 's4096', 'all'; empty: any)
    require_targets: bool = False  # the passing attempt executed its required target instructions
    min_speedup: float | None = None  # the passing attempt is at least this fast (unmeasured: removed)
    dedup: bool = True  # one example per distinct (normalised) answer, or pair of answers
    max_tokens: int | None = None  # the whole conversation, counted with tiktoken
    holdout_tasks: tuple[str, ...] = ()  # these tasks go to the holdout file
    split_by_task: float | None = None  # or this share of the tasks, drawn with `seed`
    max_per_task: int | None = None
    max_per_error_class: int | None = None
    seed: int = 0

    @property
    def split(self) -> bool:
        """Whether a holdout file is written."""
        return bool(self.holdout_tasks) or self.split_by_task is not None


@dataclass(frozen=True)
class Step:
    """One filter's effect on one set of examples."""

    name: str
    removed: int
    kept: int
    file: str = "all"


@dataclass
class Selection:
    train: list[Example]
    holdout: list[Example]
    held_out_tasks: list[str]
    funnel: list[Step]


def select(candidates: list[Example], filters: Filters) -> Selection:
    """The examples each file gets, and what every filter removed on the way."""
    funnel = [Step("candidates", 0, len(candidates))]
    kept = candidates

    def step(name: str, survivors: list[Example]) -> None:
        nonlocal kept
        funnel.append(Step(name, len(kept) - len(survivors), len(survivors)))
        kept = survivors

    runs = RunFilter(definition=filters.definitions, workload=filters.workloads)
    if runs:
        step("definition/workload", [e for e in kept if runs.matches_task(e.task)])
    if filters.require_targets:
        step("require_targets", [e for e in kept if e.targets_met is True])
    if filters.min_speedup is not None:
        step("min_speedup", [e for e in kept if e.speedup is not None and e.speedup >= filters.min_speedup])
    if filters.dedup:
        step("dedup", dedupe(kept))
    if filters.max_tokens is not None:
        step("max_tokens", [e for e in kept if e.tokens <= filters.max_tokens])
    held = held_out_tasks(candidates, filters)
    files: dict[str, list[Example]] = {}
    for file in ("train", "holdout") if filters.split else ("train",):
        files[file], removed = cap([e for e in kept if (e.task in held) == (file == "holdout")], filters)
        funnel += [Step(name, n, len(files[file]), file) for name, n in removed.items()]
    return Selection(files["train"], files.get("holdout", []), sorted(held), funnel)


def dedupe(examples: list[Example]) -> list[Example]:
    """The first example of each dedup key."""
    seen: set[str] = set()
    out = []
    for e in examples:
        if e.dedup_key not in seen:
            seen.add(e.dedup_key)
            out.append(e)
    return out


def held_out_tasks(candidates: list[Example], filters: Filters) -> set[str]:
    """The named tasks; or a seeded draw of `split_by_task` of the tasks the candidates cover (drawn
    before the other filters, so changing them does not move a task between the files). At least one
    task is held out and one kept when there are two or more."""
    if filters.split_by_task is None:
        return set(filters.holdout_tasks)
    tasks = sorted({e.task for e in candidates})
    if len(tasks) < 2:
        return set()
    count = min(max(round(filters.split_by_task * len(tasks)), 1), len(tasks) - 1)
    return set(random.Random(filters.seed).sample(tasks, count))


def cap(examples: list[Example], filters: Filters) -> tuple[list[Example], dict[str, int]]:
    """At most `max_per_task` examples per task and `max_per_error_class` per error class; a seeded draw
    decides which, and each refusal is charged to the cap that was full (the task's first)."""
    removed = {
        name: 0
        for name, limit in (
            ("max_per_task", filters.max_per_task),
            ("max_per_error_class", filters.max_per_error_class),
        )
        if limit is not None
    }
    if not removed:
        return examples, removed
    tasks: Counter[str] = Counter()
    classes: Counter[str | None] = Counter()
    chosen = set()
    for e in sorted(examples, key=lambda e: _draw(filters.seed, e.id)):
        if filters.max_per_task is not None and tasks[e.task] >= filters.max_per_task:
            removed["max_per_task"] += 1
        elif filters.max_per_error_class is not None and classes[e.error_class] >= filters.max_per_error_class:
            removed["max_per_error_class"] += 1
        else:
            tasks[e.task] += 1
            classes[e.error_class] += 1
            chosen.add(e.id)
    return [e for e in examples if e.id in chosen], removed


def _draw(seed: int, key: str) -> str:
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()
