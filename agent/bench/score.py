"""Benchmark metrics from trajectories alone, as the paper defines them (correct, correct with the target
instructions executed, best speedup and fast_p at turn limits 1, 4 and 8) plus pass@k: pure functions, so the
bench's closing table, the report and tests compute the same numbers.

A trajectory is correct at turn limit t when one of its turns ≤ t passed the check; `unverified` attempts
(GPU stages skipped) never count as correct. Speedup is baseline time / kernel time, known only for
correct, timed attempts; fast_p asks for a speedup strictly above p. Single-shot samples (max_turns = 1)
and repair trajectories (max_turns > 1) are compared at equal attempt budgets: pass@k over k independent
samples (the unbiased estimator) against correct within k turns of repair.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

from agent.loop.records import Trajectory, Turn
from tasks.catalog import get_task
from tasks.schema import UnknownName
from tools.evaluation import Status

TURN_LIMITS = (1, 4, 8)
FAST_P = (0.0, 0.5, 0.8, 1.0)
ALL = "all"
LEGACY_ALL = "all (legacy)"  # legacy runs pooled with each other, never with today's
ERROR_CLASS = {
    Status.EXTRACT_ERROR: "format",
    Status.COMPILE_ERROR: "compile",
    Status.ABI_ERROR: "abi",
    Status.LAUNCH_ERROR: "runtime",
    Status.RUNTIME_ERROR: "runtime",
    Status.TIMEOUT: "timeout",
    Status.MISMATCH: "mismatch",
    Status.UNVERIFIED: "unverified",
    Status.PASSED: "passed",
}
CLASSES = ("passed", "unverified", "mismatch", "timeout", "runtime", "abi", "compile", "format")
NOT_REACHED = "not_reached"  # the trajectory had stopped before this turn (solved, out of answers, or killed)
# What a reader calls each class where one word alone would mislead ("compile" reads as "it compiled").
LABELS = {"passed": "passed", "unverified": "unverified", "mismatch": "mismatch", "timeout": "timeout",
          "runtime": "runtime error", "abi": "ABI error", "compile": "compile error", "format": "no answer",
          NOT_REACHED: "not reached"}  # fmt: skip

# ------------------------------------------------------------------------------------ one trajectory


def mode(traj: Trajectory) -> str:
    """'tools' for a tools-mode run (its one turn: what it submitted), 'single' for a one-turn run (a single-shot
    sample), 'multi' for a repair run."""
    if traj.config.mode == "tools":
        return "tools"
    return "single" if max_turns(traj) == 1 else "multi"


def evaluations(traj: Trajectory) -> int:
    """The GPU evaluations a run spent: a tools run's count, else its turns (one evaluation each)."""
    outcome = traj.turns[-1].tools if traj.turns else None
    return outcome.evaluations if outcome is not None else len(traj.turns)


def model(traj: Trajectory) -> str:
    """The model behind a run's answers (agent/loop/records.py's PolicyRecord.model_name)."""
    return traj.config.llm.model_name


NO_PROMPT = "(none)"  # the prompt variant of a run that records none, where others do
ALL_PROMPTS = "all"  # the scores pooled over every prompt variant


def prompt_variant(traj: Trajectory) -> str | None:
    """The prompt variant (knowledge parts) the run recorded in config.json, where it records one; a run shown
    repair notes (feedback.notes) is a variant of its own, named by its notes file: `full + notes 3b3d8bce`."""
    recorded = traj.config.model_extra or {}
    value = recorded.get("prompt")
    if value is not None and not isinstance(value, str):
        value = json.dumps(value, sort_keys=True)
    notes = recorded.get("notes_sha256")
    return f"{value or NO_PROMPT} + notes {str(notes)[:8]}" if notes else value


def by_variant(trajs: list[Trajectory]) -> list[tuple[str | None, list[Trajectory]]]:
    """All runs together, then, where they ran several prompt variants, each variant's runs; with one variant,
    its runs under None."""
    variants: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        variants[prompt_variant(t) or NO_PROMPT].append(t)
    if len(variants) < 2:
        return [(None, trajs)] if trajs else []
    return [(ALL_PROMPTS, trajs), *sorted(variants.items())]


def max_turns(traj: Trajectory) -> int:
    return traj.config.max_turns


def finished(traj: Trajectory) -> bool:
    """Whether the run ended by a stopping rule (not killed, not stopped on an error)."""
    return traj.summary is not None and traj.summary.finished


def turns_within(traj: Trajectory, limit: int) -> list[Turn]:
    return [t for t in traj.turns if t.index <= limit]


def _correct_turns(traj: Trajectory, limit: int) -> list[Turn]:
    return [t for t in turns_within(traj, limit) if t.evaluation.status is Status.PASSED]


def correct_at(traj: Trajectory, limit: int) -> bool:
    return bool(_correct_turns(traj, limit))


def unverified_at(traj: Trajectory, limit: int) -> bool:
    """Not correct within the limit, but an attempt ≤ limit ran everything that runs without a GPU and passed
    it: a GPU would have decided it (no GPU of the arch was there)."""
    return not correct_at(traj, limit) and any(
        t.evaluation.status is Status.UNVERIFIED for t in turns_within(traj, limit)
    )


def targets_at(traj: Trajectory, limit: int) -> bool:
    """Correct with the target instructions executed, in one and the same turn ≤ limit."""
    return any(t.evaluation.targets_met is True for t in _correct_turns(traj, limit))


def best_speedup_at(traj: Trajectory, limit: int) -> float | None:
    speedups = [t.evaluation.speedup for t in _correct_turns(traj, limit) if t.evaluation.speedup is not None]
    return max(speedups, default=None)


def fast_at(traj: Trajectory, limit: int, p: float) -> bool:
    best = best_speedup_at(traj, limit)
    return best is not None and best > p


def first_turn(traj: Trajectory, with_targets: bool = False) -> int | None:
    """The first correct turn (with its targets executed, if asked)."""
    for t in traj.turns:
        if t.evaluation.status is Status.PASSED and (t.evaluation.targets_met is True or not with_targets):
            return t.index
    return None


def turn_limits(turns: int) -> tuple[int, ...]:
    """The paper's limits 1, 4, 8 that a run of `turns` turns reaches, and `turns` itself."""
    return tuple(sorted({t for t in TURN_LIMITS if t <= turns} | {turns}))


# ------------------------------------------------------------------------------------------ pooled


def geomean(values: Iterable[float]) -> float | None:
    values = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k from n samples of which c are correct: 1 − C(n−c, k) / C(n, k), the chance that
    k samples drawn without replacement hold at least one correct (exactly 1 when n − c < k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 ≤ c ≤ n and 1 ≤ k ≤ n (got n={n}, c={c}, k={k})")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass(frozen=True, order=True)
class Group:
    """What a set of trajectories are samples of; `task` and `arch` may be ALL (pooled)."""

    model: str
    task: str
    arch: str
    mode: str


def pooled(label: str) -> bool:
    """Whether a group's task or arch label pools several (ALL, or LEGACY_ALL)."""
    return label in (ALL, LEGACY_ALL)


def legacy(traj: Trajectory) -> str | None:
    """Why a run solved another definition of its task than today's catalog holds (wave 1's attention tasks),
    or None. Such runs are scored apart: their task and pooled labels say "legacy", so they never mix."""
    try:
        task = get_task(traj.config.task)
    except UnknownName:
        return f"{traj.config.task} is no longer a task"
    if traj.config.task_version == task.version:
        return None
    return f"{traj.config.task} was definition v{traj.config.task_version}; {task.name} is now v{task.version}"


def _problem(traj: Trajectory) -> tuple[str, str]:
    """The problem a run solved: task and arch; a legacy run's task is labelled so."""
    task = traj.config.task
    return (f"{task} (legacy v{traj.config.task_version})" if legacy(traj) else task), traj.config.arch


def by_definition(trajs: list[Trajectory]) -> dict[Group, list[Trajectory]]:
    """Trajectories per definition × arch (every workload of it pooled, its `_all` runs among them), for each model
    and mode: `agent.report by=definition`."""
    out: dict[Group, list[Trajectory]] = defaultdict(list)
    for traj in trajs:
        label = traj.config.definition + (" (legacy)" if legacy(traj) else "")
        out[Group(model(traj), label, traj.config.arch, mode(traj))].append(traj)
    return dict(sorted(out.items()))


def workload_rows(trajs: list[Trajectory]) -> list[dict[str, Any]]:
    """One row per workload of every shape-general attempt: its status, times and speedup beside the attempt's."""
    rows = []
    for traj in trajs:
        for turn in traj.turns:
            e = turn.evaluation
            for w in e.workloads or []:
                rows.append({
                    "run_id": traj.run_id, "model": model(traj), "task": traj.config.task,
                    "definition": traj.config.definition, "arch": traj.config.arch, "mode": mode(traj),
                    "turn": turn.index, "workload": _workload_label(w.name), "member": w.name,
                    **{f"dim_{k}": v for k, v in w.dims.items()},
                    "status": w.status.value, "kernel_ms": w.kernel_ms, "baseline_ms": w.baseline_ms,
                    "speedup": w.speedup, "attempt_status": e.status.value, "attempt_speedup_min": e.speedup,
                    "attempt_speedup_geomean": e.speedup_geomean,
                })  # fmt: skip
    return rows


def _workload_label(member: str) -> str:
    try:
        return get_task(member).workload
    except UnknownName:
        return member


def grouped(trajs: list[Trajectory], by_mode: bool = True) -> dict[Group, list[Trajectory]]:
    """Trajectories per problem (task × arch), per arch over all tasks, and over everything, for each model
    (and mode): the three levels every table reports."""
    out: dict[Group, list[Trajectory]] = defaultdict(list)
    for traj in trajs:
        task, arch = _problem(traj)
        m = mode(traj) if by_mode else ALL
        every = LEGACY_ALL if legacy(traj) else ALL
        for g_task, g_arch in ((task, arch), (every, arch), (every, every)):
            out[Group(model(traj), g_task, g_arch, m)].append(traj)
    return dict(sorted(out.items()))


# ------------------------------------------------------------------------------------- suite scores


@dataclass(frozen=True)
class SuiteScore:
    """A group's rates at one turn limit. unverified: share of trajectories not correct but with an unverified
    attempt (unverified_at), kept apart from correct so a run without a GPU does not read as failed.
    fast_traj[i]: share of trajectories correct with best speedup > FAST_P[i] within the limit; fast_turn[i]:
    share of attempts (turns ≤ limit) correct with speedup > FAST_P[i]. geomean_speedup: over correct attempts;
    geomean_best: over correct trajectories' best."""

    group: Group
    turn_limit: int
    trajectories: int
    unfinished: int
    attempts: int
    correct: float
    unverified: float
    correct_targets: float
    fast_traj: tuple[float, ...]
    fast_turn: tuple[float | None, ...]
    geomean_speedup: float | None
    geomean_best: float | None
    best_speedup: float | None

    def row(self) -> dict[str, Any]:
        row = {f.name: getattr(self.group, f.name) for f in fields(Group)}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("fast_traj", "fast_turn"):
                kind = f.name.split("_")[1]
                row |= {f"fast_{p:g}_{kind}": v for p, v in zip(FAST_P, value, strict=True)}
            elif f.name != "group":
                row[f.name] = value
        return row


def suite_score(group: Group, trajs: list[Trajectory], limit: int) -> SuiteScore:
    n = len(trajs)
    attempts = [t for traj in trajs for t in turns_within(traj, limit)]
    correct = [t for t in attempts if t.evaluation.status is Status.PASSED]
    speedups = [t.evaluation.speedup for t in correct if t.evaluation.speedup is not None]
    bests = [b for b in (best_speedup_at(traj, limit) for traj in trajs) if b is not None]
    return SuiteScore(
        group=group,
        turn_limit=limit,
        trajectories=n,
        unfinished=sum(not finished(traj) for traj in trajs),
        attempts=len(attempts),
        correct=sum(correct_at(traj, limit) for traj in trajs) / n,
        unverified=sum(unverified_at(traj, limit) for traj in trajs) / n,
        correct_targets=sum(targets_at(traj, limit) for traj in trajs) / n,
        fast_traj=tuple(sum(fast_at(traj, limit, p) for traj in trajs) / n for p in FAST_P),
        fast_turn=tuple(sum(s > p for s in speedups) / len(attempts) if attempts else None for p in FAST_P),
        geomean_speedup=geomean(speedups),
        geomean_best=geomean(bests),
        best_speedup=max(bests, default=None),
    )


def suite_scores(trajs: list[Trajectory]) -> list[SuiteScore]:
    """Every group at every turn limit its runs reach (1, 4, 8 and their max_turns)."""
    return [
        suite_score(group, members, limit)
        for group, members in grouped(trajs).items()
        for limit in turn_limits(max(max_turns(t) for t in members))
    ]


# --------------------------------------------------------------------------- single-shot vs repair


@dataclass(frozen=True)
class BudgetPoint:
    """One attempt budget k for a problem (or the mean over the problems of a pooled group). Single-shot:
    pass@k from single_n samples; repair: the share of repair trajectories correct within k turns. The
    fast1_ columns ask the same for a correct attempt faster than the baseline. None: k is beyond the
    samples (k > single_n) or beyond the repair runs' max_turns, or there are no runs of that mode."""

    group: Group
    k: int
    single_n: int
    single_correct: int
    pass_at_k: float | None
    fast1_pass_at_k: float | None
    multi_n: int
    repair_at_k: float | None
    fast1_repair_at_k: float | None
    tools_n: int = 0
    tools_at_k: float | None = None  # the share of tools runs whose result is correct, spending ≤ k evaluations
    fast1_tools_at_k: float | None = None

    def row(self) -> dict[str, Any]:
        row = {f.name: getattr(self.group, f.name) for f in fields(Group) if f.name != "mode"}
        return row | {f.name: getattr(self, f.name) for f in fields(self) if f.name != "group"}


def _sampled(singles: list[Trajectory], k: int) -> tuple[float | None, float | None]:
    """(pass@k, fast_1 pass@k) of one problem's single-shot samples; None beyond the samples."""
    n = len(singles)
    if k > n:
        return None, None
    correct = sum(correct_at(t, 1) for t in singles)
    return pass_at_k(n, correct, k), pass_at_k(n, sum(fast_at(t, 1, 1.0) for t in singles), k)


def _repaired(multis: list[Trajectory], k: int) -> tuple[float | None, float | None]:
    """(correct within k turns, fast_1 within k turns) over one problem's repair runs; None beyond them."""
    if k > min(max_turns(t) for t in multis):
        return None, None
    n = len(multis)
    return sum(correct_at(t, k) for t in multis) / n, sum(fast_at(t, k, 1.0) for t in multis) / n


def _tooled(runs: list[Trajectory], k: int) -> tuple[float, float]:
    """(correct, fast_1) over one problem's tools runs: each scored by its result, counted at budget k when it
    spent at most k GPU evaluations."""
    within = [t for t in runs if evaluations(t) <= k]
    n = len(runs)
    return sum(correct_at(t, 1) for t in within) / n, sum(fast_at(t, 1, 1.0) for t in within) / n


def _pooled(values: list[float | None]) -> float | None:
    """The mean over problems, each weighed equally; None when a problem's value is undefined."""
    return None if None in values else sum(values) / len(values)  # type: ignore[arg-type]


def single_vs_multi(trajs: list[Trajectory]) -> list[BudgetPoint]:
    """Budgets k = 1 … max(samples, max_turns) for every problem and pooled group that has runs of two of the
    modes (single, multi, tools); a pooled group's values are means over its problems (each side over the
    problems it ran). k counts GPU evaluations: k samples, k turns, or a tools run's evaluations."""
    points = []
    for group, members in grouped(trajs, by_mode=False).items():
        problems: dict[tuple[str, str], list[Trajectory]] = defaultdict(list)
        for traj in members:
            problems[_problem(traj)].append(traj)
        singles = [s for s in ([t for t in ts if mode(t) == "single"] for ts in problems.values()) if s]
        multis = [m for m in ([t for t in ts if mode(t) == "multi"] for ts in problems.values()) if m]
        tooled = [m for m in ([t for t in ts if mode(t) == "tools"] for ts in problems.values()) if m]
        if sum(map(bool, (singles, multis, tooled))) < 2:
            continue
        top = max([len(s) for s in singles] + [max_turns(t) for m in multis + tooled for t in m])
        for k in range(1, top + 1):
            sampled = [_sampled(s, k) for s in singles] or [(None, None)]
            repaired = [_repaired(m, k) for m in multis] or [(None, None)]
            tools = [_tooled(m, k) for m in tooled]
            points.append(
                BudgetPoint(
                    group=group,
                    k=k,
                    single_n=sum(len(s) for s in singles),
                    single_correct=sum(correct_at(t, 1) for s in singles for t in s),
                    pass_at_k=_pooled([v for v, _ in sampled]),
                    fast1_pass_at_k=_pooled([v for _, v in sampled]),
                    multi_n=sum(len(m) for m in multis),
                    repair_at_k=_pooled([v for v, _ in repaired]),
                    fast1_repair_at_k=_pooled([v for _, v in repaired]),
                    tools_n=sum(len(m) for m in tooled),
                    tools_at_k=_pooled([v for v, _ in tools]) if tools else None,
                    fast1_tools_at_k=_pooled([v for _, v in tools]) if tools else None,
                )
            )
    return points


# --------------------------------------------------------------------------------- status per turn


@dataclass(frozen=True)
class TurnStatus:
    """How a group's trajectories fared at turn `turn`: error-class counts (CLASSES) and NOT_REACHED."""

    group: Group
    turn: int
    counts: dict[str, int]

    def row(self) -> dict[str, Any]:
        row = {f.name: getattr(self.group, f.name) for f in fields(Group)}
        return row | {"turn": self.turn} | {c: self.counts.get(c, 0) for c in (*CLASSES, NOT_REACHED)}


def status_per_turn(trajs: list[Trajectory]) -> list[TurnStatus]:
    out = []
    for group, members in grouped(trajs).items():
        for index in range(1, max(max_turns(t) for t in members) + 1):
            counts: Counter[str] = Counter()
            for traj in members:
                turn = next((t for t in traj.turns if t.index == index), None)
                counts[ERROR_CLASS[turn.evaluation.status] if turn else NOT_REACHED] += 1
            out.append(TurnStatus(group, index, dict(counts)))
    return out


# ------------------------------------------------------------------------------------ trajectories


def trajectory_row(traj: Trajectory) -> dict[str, Any]:
    """One trajectory, flat: enough to recompute correct@t (first_correct ≤ t) and to plot speedups."""
    task, arch = _problem(traj)
    correct = _correct_turns(traj, max_turns(traj))
    best = best_speedup_at(traj, max_turns(traj))
    return {
        "run_id": traj.run_id,
        "model": model(traj),
        "task": task,
        "definition": traj.config.definition,
        "workload": traj.config.workload,
        "catalog_version": traj.config.catalog_version,
        "arch": arch,
        "mode": mode(traj),
        "max_turns": max_turns(traj),
        "turns": len(traj.turns),
        "stop_reason": traj.summary.stop_reason.value if traj.summary and traj.summary.stop_reason else None,
        "statuses": ";".join(t.evaluation.status.value for t in traj.turns),
        "first_correct": first_turn(traj),
        "first_correct_targets": first_turn(traj, with_targets=True),
        "best_speedup": best,
        "best_speedup_turn": next(
            (t.index for t in correct if best is not None and t.evaluation.speedup == best), None
        ),
        "evaluations": evaluations(traj),
        **tools_row(traj),
    }


def tools_row(traj: Trajectory) -> dict[str, Any]:
    """A tools run's end and spend (empty cells for the other modes)."""
    outcome = traj.turns[-1].tools if traj.turns else None
    if outcome is None:
        return {"submitted": None, "tool_calls": None, "refused_calls": None, "budget": None}
    return {"submitted": outcome.submitted, "tool_calls": outcome.tool_calls, "refused_calls": outcome.refused,
            "budget": outcome.budget}  # fmt: skip
