"""A Markdown report of a set of runs, with its tables as CSV and its plots as PNG, from the run folders alone
(`python -m agent.report` is the command).

Writes report.md, scores.csv (every group at every turn limit), budget.csv (single-shot pass@k vs
repair at equal attempt budgets), status_per_turn.csv, trajectories.csv (with each run's definition, workload and
catalog version), perf.csv (every attempt the perf pass profiled: its limiter and figures beside the library's),
workloads.csv (every workload of every shape-general attempt), definitions.csv (by=definition: the scores per
definition, its workloads pooled), beside_paper.csv (runs of preset=paper: our shares beside the paper's published
ones, agent/bench/beside_paper.py), and the plots
success_vs_budget.png, speedup_by_task.png, status_per_turn.png (skipped, and said so, without
matplotlib).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from agent.bench import beside_paper, plots, score
from agent.bench.tables import markdown_table, markdown_text, percent, times, write_csv
from agent.loop.records import Trajectory
from agent.loop.writes import write_inside
from tools.evaluation import Status
from tools.options import Criterion
from tools.perf_report import longest

BUDGETS_SHOWN = (1, 2, 4, 8)
UNFINISHED_LISTED = 10


def write_report(
    trajs: list[Trajectory], out: Path, sources: Sequence[Path], *, by: str = "task", selected: str = ""
) -> Path:
    """report.md, its CSVs and plots in `out`; returns report.md's path. by="definition" adds the scores per
    definition; `selected` says which runs a filter kept, for the header."""
    out.mkdir(parents=True, exist_ok=True)
    scores = _by_prompt(trajs)
    budget = score.single_vs_multi(trajs)
    statuses = score.status_per_turn(trajs)
    write_csv(out / "scores.csv", [{"prompt": prompt, **s.row()} for prompt, s in scores])
    write_csv(out / "budget.csv", [p.row() for p in budget])
    write_csv(out / "status_per_turn.csv", [s.row() for s in statuses])
    write_csv(out / "trajectories.csv", [score.trajectory_row(t) for t in trajs])
    profiled = perf_rows(trajs)
    write_csv(out / "perf.csv", profiled)
    workloads = score.workload_rows(trajs)
    if workloads:
        write_csv(out / "workloads.csv", workloads)
    paper = beside_paper.rows(trajs)
    if paper:
        write_csv(out / "beside_paper.csv", paper)
    drawn, skipped = plots.draw(trajs, out)
    definitions = _per_definition(trajs, out) if by == "definition" else None
    sections = [
        _header(trajs, sources, skipped, selected),
        _headline(scores),
        *([beside_paper.section(paper)] if paper else []),
        _budget(budget, drawn.get("success_vs_budget")),
        *([definitions] if definitions else []),
        *([tools_section(trajs)] if any(score.mode(t) == "tools" for t in trajs) else []),
        _per_task(scores),
        *([_workloads(workloads)] if workloads else []),
        _speedups(trajs, drawn.get("speedup_by_task")),
        _status(statuses, drawn.get("status_per_turn")),
        _limiters(profiled),
        "## Files\n\n" + "\n".join(f"- `{p.name}`" for p in sorted(out.glob("*.csv"))),
    ]
    path = out / "report.md"
    write_inside(path, "\n\n".join(sections) + "\n")
    return path


# What a passed check meant, by the rule that judged it (eval.criterion).
RULE_TEXT = {
    Criterion.PTXBENCH: "relative L2 against the fp32 reference",
    Criterion.PAPER: "the paper's rule: every element within 1e-2 of the library's output",
}


def _header(trajs: list[Trajectory], sources: Sequence[Path], plots_skipped: str | None, selected: str = "") -> str:
    attempts = [t for traj in trajs for t in traj.turns]
    unverified = sum(t.evaluation.status is Status.UNVERIFIED for t in attempts)
    unfinished = [traj.run_id for traj in trajs if not score.finished(traj)]
    models = sorted({score.model(t) for t in trajs})
    judged_by = {t.evaluation.criterion for t in attempts} - {None}
    rules = [RULE_TEXT[c] for c in Criterion if c in judged_by] or [RULE_TEXT[Criterion.PTXBENCH]]
    lines = [
        "# PTXBench report",
        "",
        f"{len(trajs)} runs, {len(attempts)} attempts, from {', '.join(f'`{s}`' for s in sources)}; "
        f"models: {', '.join(map(markdown_text, models))}; "
        f"generated {datetime.now(UTC).isoformat(timespec='seconds')}.",
        "",
        f"- **correct**: a turn passed the check ({'; '.join(rules)}). *Unverified* attempts (GPU stages "
        f"skipped: {unverified} of {len(attempts)} here) count as not correct; **unverified** is the share of runs "
        "not correct with such an attempt, which a GPU of the arch would have decided.",
        "- **+targets**: correct with the arch's target instructions executed, in the same turn.",
        "- **speedup**: baseline (cuBLAS/cuDNN) time / kernel time. **fast_p**: correct with speedup > p — per "
        "trajectory (its best turn within the limit) or per attempt (share of turns within the limit).",
        "- **geomean**: geometric mean of the speedups of correct attempts; *best*: of correct trajectories' best.",
        "- **single** runs are one-turn samples; **multi** runs repair for up to max_turns turns and stop once solved.",
        "- **tools** runs call the harness's tools (compile, evaluate, profile, sanitize) until they submit: scored by "
        "the answer they submitted (or, never submitting, by their best evaluated one) and by what they spent.",
    ]
    if unfinished:
        shown = ", ".join(unfinished[:UNFINISHED_LISTED]) + (" …" if len(unfinished) > UNFINISHED_LISTED else "")
        runs = f"{len(unfinished)} unfinished run{'s' if len(unfinished) > 1 else ''}"
        lines.append(f"- **{runs}** (killed or stopped on an error; scored on the turns they have; resume them "
                     f"for final numbers): {shown}")  # fmt: skip
    old = sum(score.legacy(t) is not None for t in trajs)
    if old:
        lines.append(f"- **legacy**: {old} run{'s' if old > 1 else ''} solved an older definition of their task "
                     "(wave 1's attention: [B,S,H,D], Delta handed in); labelled `(legacy vN)` and pooled only with "
                     "each other, under `all (legacy)`.")  # fmt: skip
    if selected:
        lines.append(f"- **selected**: only the runs with {selected}.")
    if any(t.evaluation.workloads for t in attempts):
        lines.append("- **shape-general** tasks (`<definition>_all`): an attempt is correct only when every workload "
                     "is; its speedup is the minimum over the workloads (the geometric mean beside it in "
                     "workloads.csv).")  # fmt: skip
    if plots_skipped:
        lines.append(f"- Plots skipped: {plots_skipped}.")
    return "\n".join(lines)


def _by_prompt(trajs: list[Trajectory]) -> list[tuple[str, score.SuiteScore]]:
    """The suite scores with the prompt variant their runs ran (config.json's `prompt`): all runs, then each
    variant's, where there are several; "-" where no run records one."""
    named = {score.prompt_variant(t) for t in trajs}
    only = next(iter(named)) if len(named) == 1 else None
    return [
        (prompt or only or "-", s) for prompt, members in score.by_variant(trajs) for s in score.suite_scores(members)
    ]


def _headline(scores: list[tuple[str, score.SuiteScore]]) -> str:
    headers = ("model", "prompt", "arch", "mode", *RATES, "fast_0.8", "fast_1", "fast_1/attempt", "geomean",
               "geomean best")  # fmt: skip
    fast1 = score.FAST_P.index(1.0)
    archs = _archs([s for _, s in scores])
    rows = [
        (g.model, prompt, g.arch, g.mode, *_rates(s), percent(s.fast_traj[score.FAST_P.index(0.8)]),
         percent(s.fast_traj[fast1]), percent(s.fast_turn[fast1]), times(s.geomean_speedup), times(s.geomean_best))
        for prompt, s in scores
        if score.pooled((g := s.group).task) and (not score.pooled(g.arch) or archs > 1)
    ]  # fmt: skip
    return "## Headline (all tasks)\n\n" + markdown_table(headers, rows)


RATES = ("turns ≤", "runs", "correct", "unverified", "+targets")


def _rates(s: score.SuiteScore) -> tuple:
    """The cells every score table starts with, in RATES' order."""
    return s.turn_limit, s.trajectories, percent(s.correct), percent(s.unverified), percent(s.correct_targets)


def _archs(scores: list[score.SuiteScore]) -> int:
    return len({s.group.arch for s in scores if not score.pooled(s.group.arch)})


def _budget(points: list[score.BudgetPoint], plot: str | None) -> str:
    text = [
        "## Single-shot vs repair at equal attempt budgets",
        "",
        "pass@k: the unbiased estimator 1 − C(n−c, k)/C(n, k) over each problem's n single-shot samples (c correct); "
        "repair@k: the share of repair runs correct within k turns; tools@k: the share of tools runs whose result is "
        "correct and which spent at most k GPU evaluations. Pooled rows are means over problems; "
        "'-': k exceeds the samples or the turns, or no runs of that mode.",
    ]
    if not points:
        return "\n".join([*text, "", "(needs runs of two modes of a problem: single, multi, tools)"])
    if plot:
        text += ["", f"![success vs attempt budget]({plot})"]
    tools = any(p.tools_n for p in points)
    headers = ("model", "task", "arch", "k", "pass@k", "repair@k", *(("tools@k",) if tools else ()),
               "fast_1 pass@k", "fast_1 repair@k", *(("fast_1 tools@k",) if tools else ()))  # fmt: skip
    rows = [
        (
            g.model,
            g.task,
            g.arch,
            p.k,
            percent(p.pass_at_k),
            percent(p.repair_at_k),
            *((percent(p.tools_at_k),) if tools else ()),
            percent(p.fast1_pass_at_k),
            percent(p.fast1_repair_at_k),
            *((percent(p.fast1_tools_at_k),) if tools else ()),
        )
        for p in points
        if p.k in BUDGETS_SHOWN
        and not (score.pooled((g := p.group).task) and score.pooled(g.arch) and _single_arch(points))
    ]
    return "\n".join([*text, "", markdown_table(headers, rows)])


def tools_section(trajs: list[Trajectory]) -> str:
    """Tools runs per model, task and arch: how many submitted, how many were correct, and what they spent."""
    groups: dict[tuple[str, str, str], list[Trajectory]] = {}
    for t in trajs:
        if score.mode(t) == "tools":
            task, arch = score._problem(t)
            groups.setdefault((score.model(t), task, arch), []).append(t)
    headers = ("model", "task", "arch", "runs", "submitted", "correct", "unverified", "evaluations (mean)",
               "tool calls (mean)", "refused (mean)", "ended at a budget")  # fmt: skip
    rows = []
    for key, runs in sorted(groups.items()):
        spent = [score.tools_row(t) for t in runs]
        n = len(runs)
        rows.append((*key, n, percent(sum(bool(r["submitted"]) for r in spent) / n),
                     percent(sum(score.correct_at(t, 1) for t in runs) / n),
                     percent(sum(score.unverified_at(t, 1) for t in runs) / n),
                     f"{sum(score.evaluations(t) for t in runs) / n:.1f}",
                     f"{sum(r['tool_calls'] or 0 for r in spent) / n:.1f}",
                     f"{sum(r['refused_calls'] or 0 for r in spent) / n:.1f}",
                     sum(r["budget"] is not None and not r["submitted"] for r in spent)))  # fmt: skip
    text = ("## Tools mode: what was submitted, and what it spent\n\nA run that never submitted is scored by "
            "its best evaluated answer (`submitted` counts the others). Evaluations are GPU evaluations; tool "
            "calls count the refused ones (bad arguments, unknown tools, calls past the budget).")  # fmt: skip
    return text + "\n\n" + markdown_table(headers, rows)


def _single_arch(points: list[score.BudgetPoint]) -> bool:
    return len({p.group.arch for p in points if not score.pooled(p.group.arch)}) == 1


def _per_task(scores: list[tuple[str, score.SuiteScore]]) -> str:
    last = {}
    for prompt, s in scores:
        if not score.pooled(s.group.task):
            last[(prompt, s.group)] = s  # suite_scores lists limits in increasing order: the last is the largest
    headers = ("model", "prompt", "task", "arch", "mode", *RATES, "fast_1", "best", "geomean best", "unfinished")
    rows = [
        (g.model, prompt, g.task, g.arch, g.mode, *_rates(s), percent(s.fast_traj[score.FAST_P.index(1.0)]),
         times(s.best_speedup), times(s.geomean_best), s.unfinished)
        for (prompt, g), s in last.items()
    ]  # fmt: skip
    return "## Per task (at each mode's last turn)\n\n" + markdown_table(headers, rows)


def _per_definition(trajs: list[Trajectory], out: Path) -> str:
    """The scores per definition × arch, its workloads (and its `_all` runs) pooled, at each mode's last turn."""
    groups = score.by_definition(trajs)
    scores = [score.suite_score(g, members, max(score.max_turns(t) for t in members)) for g, members in groups.items()]
    write_csv(out / "definitions.csv", [s.row() for s in scores])
    headers = ("model", "definition", "arch", "mode", *RATES, "fast_1", "best", "geomean best", "workloads")
    rows = [
        (s.group.model, s.group.task, s.group.arch, s.group.mode, *_rates(s),
         percent(s.fast_traj[score.FAST_P.index(1.0)]), times(s.best_speedup), times(s.geomean_best),
         ", ".join(sorted({t.config.workload for t in groups[s.group]})))
        for s in scores
    ]  # fmt: skip
    return "## Per definition (its workloads pooled, at each mode's last turn)\n\n" + markdown_table(headers, rows)


def _workloads(rows: list[dict]) -> str:
    """Per shape-general task and workload: how many attempts passed there, and their median speedup."""
    groups: dict[tuple[str, str, str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["model"], row["task"], row["arch"], row["workload"]), []).append(row)
    headers = ("model", "task", "arch", "workload", "attempts", "passed", "median speedup")
    table = []
    for key, group in groups.items():
        speedups = [r["speedup"] for r in group if r["speedup"] is not None]
        passed = sum(r["status"] == Status.PASSED for r in group)
        table.append((*key, len(group), passed, times(statistics.median(speedups) if speedups else None)))
    return "## Shape-general tasks, per workload (every attempt's; workloads.csv has each)\n\n" + markdown_table(
        headers, table
    )


def _speedups(trajs: list[Trajectory], plot: str | None) -> str:
    best: dict[tuple[str, str, str, str], list[float]] = {}
    for t in trajs:
        row = score.trajectory_row(t)
        values = best.setdefault((row["model"], row["task"], row["arch"], row["mode"]), [])
        if row["best_speedup"] is not None:
            values.append(row["best_speedup"])
    headers = ("model", "task", "arch", "mode", "correct runs", "min", "median", "max")
    rows = [
        (
            *key,
            len(v),
            times(min(v, default=None)),
            times(statistics.median(v) if v else None),
            times(max(v, default=None)),
        )
        for key, v in sorted(best.items())
    ]
    text = ["## Speedup distribution (best speedup of each correct run)"]
    if plot:
        text += ["", f"![speedup by task]({plot})"]
    return "\n".join([*text, "", markdown_table(headers, rows)])


def _status(statuses: list[score.TurnStatus], plot: str | None) -> str:
    text = [
        "## Status per turn (all tasks and archs)",
        "",
        "format = no parsable answer; runtime = launch or run-time error; not reached = the run had stopped "
        "(solved, out of answers, or unfinished).",
    ]
    if plot:
        text += ["", f"![status per turn]({plot})"]
    pooled = [s for s in statuses if score.pooled(s.group.task) and score.pooled(s.group.arch)]
    columns = [c for c in (*score.CLASSES, score.NOT_REACHED) if any(s.counts.get(c) for s in pooled)]
    headers = ("model", "mode", "turn", *(c.replace("_", " ") for c in columns))
    rows = [(s.group.model, s.group.mode, s.turn, *(s.counts.get(c, 0) for c in columns)) for s in pooled]
    return "\n".join([*text, "", markdown_table(headers, rows)])


def perf_rows(trajs: list[Trajectory]) -> list[dict]:
    """One row per attempt the perf pass profiled: the limiter named, and the longest launch's figures beside
    the library's longest."""
    rows = []
    for traj in trajs:
        about = score.trajectory_row(traj)
        for turn in traj.turns:
            report = turn.evaluation.perf
            if report is None:
                continue
            ours, lib = longest(report.launches), longest(report.baseline) if report.baseline else None
            rows.append({
                **{k: about[k] for k in ("run_id", "model", "task", "arch", "mode")},
                "turn": turn.index, "speedup": turn.evaluation.speedup, "limiter": report.limiter,
                "kernel": ours.kernel, "tensor_pipe_pct": ours.tensor_pipe_pct,
                "l2_throughput_pct": ours.l2_throughput_pct, "dram_throughput_pct": ours.dram_throughput_pct,
                "waves_per_sm": ours.waves_per_sm, "library_kernel": lib.kernel if lib else None,
                "library_tensor_pipe_pct": lib.tensor_pipe_pct if lib else None,
            })  # fmt: skip
    return rows


def _limiters(rows: list[dict]) -> str:
    """How often each limiter was named, per model, task and arch."""
    text = ["## Where the time goes (attempts the perf pass profiled; every one in perf.csv)"]
    if not rows:
        return "\n".join([*text, "", "No attempt was profiled by the perf pass (eval.profile=perf, or auto below "
                                        "the target speedup, on a GPU with Nsight Compute)."])  # fmt: skip
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["model"], row["task"], row["arch"]), []).append(row)
    headers = ("model", "task", "arch", "attempts", "limiters named", "median tensor pipe % (yours / library)")
    table = []
    for key, group in sorted(groups.items()):
        named = Counter(r["limiter"] or "none" for r in group)
        ours = [r["tensor_pipe_pct"] for r in group if r["tensor_pipe_pct"] is not None]
        lib = [r["library_tensor_pipe_pct"] for r in group if r["library_tensor_pipe_pct"] is not None]
        share = " / ".join(f"{statistics.median(v):.0f}" if v else "-" for v in (ours, lib))
        table.append((*key, len(group), ", ".join(f"{n} {c}" for n, c in named.most_common()), share))
    return "\n".join([*text, "", markdown_table(headers, table)])
