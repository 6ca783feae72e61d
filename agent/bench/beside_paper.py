"""Our scores beside the paper's published ones (tasks/paper_results.py), for the runs a bench planned with
preset=paper: per model, problem and arch, the share of trajectories correct, correct with the targets executed, and
the best speedup, within turn 8, every prompt variant's trajectories pooled as the paper pools them; each variant's
apart in the CSV and a second table. The paper's cells stand only beside runs on its arch (its GPUs were H100s).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from agent.bench import score
from agent.bench.presets import PAPER
from agent.bench.tables import markdown_table, markdown_text, times
from agent.loop.records import Trajectory
from tasks import paper_results
from tasks.catalog import TASKS
from tasks.paper_results import COLUMNS, PaperResult
from tools.options import Criterion, SpeedupFigure

ALL_VARIANTS = "all"


def preset_runs(trajs: list[Trajectory]) -> list[Trajectory]:
    return [t for t in trajs if t.config.preset == PAPER.name]


def rows(trajs: list[Trajectory]) -> list[dict[str, Any]]:
    """One row per model × problem × arch × mode, variants pooled (variant "all"), then one per variant where there
    are several; the paper's cells beside the pooled rows of its arch."""
    groups: dict[tuple[str, str, str, str], list[Trajectory]] = defaultdict(list)
    for t in preset_runs(trajs):
        task, arch = score._problem(t)
        groups[score.model(t), task, arch, score.mode(t)].append(t)
    out = []
    for (model, task, arch, mode), members in sorted(groups.items(), key=lambda kv: _in_catalog_order(kv[0])):
        variants: dict[str, list[Trajectory]] = defaultdict(list)
        for t in members:
            variants[t.config.variant or "-"].append(t)
        split = sorted(variants.items()) if len(variants) > 1 else []
        for variant, runs in [(ALL_VARIANTS, members), *split]:
            paper = paper_results.published(task) if variant == ALL_VARIANTS and arch == paper_results.ARCH else {}
            out.append({"model": model, "task": task, "arch": arch, "mode": mode, "variant": variant,
                        **_ours(runs), **_paper_cells(paper)})  # fmt: skip
    return out


def _in_catalog_order(key: tuple[str, str, str, str]) -> tuple:
    """Per model, the tasks in the catalog's order (the core five first, in the paper's order)."""
    model, task, *rest = key
    return model, _ORDER.get(task, len(_ORDER)), task, *rest


_ORDER = {name: i for i, name in enumerate(TASKS)}


def _ours(runs: list[Trajectory]) -> dict[str, Any]:
    limit = min(paper_results.TURN_LIMIT, max(score.max_turns(t) for t in runs))
    n = len(runs)
    devices = sorted({turn.evaluation.device for t in runs for turn in t.turns if turn.evaluation.device})
    return {
        "turns_within": limit,
        "trajectories": n,
        "correct": sum(score.correct_at(t, limit) for t in runs) / n,
        "correct_targets": sum(score.targets_at(t, limit) for t in runs) / n,
        "unverified": sum(score.unverified_at(t, limit) for t in runs) / n,
        "best_speedup": max((b for t in runs if (b := score.best_speedup_at(t, limit)) is not None), default=None),
        "criterion": ",".join(sorted({str(t.config.eval.get("criterion", Criterion.PTXBENCH)) for t in runs})),
        "speedup_figure": ",".join(sorted({str(t.config.eval.get("speedup", SpeedupFigure.PAIRED)) for t in runs})),
        "devices": ";".join(devices),
    }


def _paper_cells(paper: dict[str, PaperResult]) -> dict[str, Any]:
    figures = ("model", "trajectories", "correct", "correct_targets", "best_speedup")
    return {f"paper_{c}_{f}": getattr(paper[c], f) if c in paper else None for c in COLUMNS for f in figures}


def _fraction(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _paper_cell(row: dict[str, Any], key: str) -> str:
    if row[f"{key}_model"] is None:
        return "-"
    return (f"{_fraction(row[f'{key}_correct'])} / {_fraction(row[f'{key}_correct_targets'])} / "
            f"{times(row[f'{key}_best_speedup'])} ({row[f'{key}_model']}, {row[f'{key}_trajectories']})")  # fmt: skip


def section(table: list[dict[str, Any]]) -> str:
    """The report's section: the pooled table beside the paper's, then each variant's, and what differs in how
    the two were measured."""
    pooled = [r for r in table if r["variant"] == ALL_VARIANTS]
    devices = sorted({d for r in pooled for d in r["devices"].split(";") if d})
    where = (
        f"ours on {', '.join(map(markdown_text, devices))} (the GPU each evaluation names)"
        if devices
        else "ours on no GPU: every attempt's GPU stages were skipped (unverified), so none is correct yet"
    )
    judged = sorted({(r["criterion"], r["speedup_figure"]) for r in pooled})
    how = "; ".join(f"eval.criterion={c}, eval.speedup={s}" for c, s in judged)
    text = [
        "## Beside the paper (runs of preset=paper)",
        "",
        f"Shares of trajectories within turn {paper_results.TURN_LIMIT}, every prompt variant's pooled as the paper "
        "pools them: correct / correct with the targets executed / best speedup. The paper's numbers were measured "
        f"on {paper_results.GPU}s ({paper_results.ARCH}), {where}; the paper's cells stand only beside runs on "
        f"{paper_results.ARCH}. Ours judged and timed with {how}. Paper cells give the model and its trajectories; "
        f"'-': none published. Source: {paper_results.SOURCE}. beside_paper.csv has every figure.",
        "",
        markdown_table(
            ("model", "task", "arch", "mode", "turns ≤", "runs", "correct", "+targets", "unverified", "best",
             *(f"paper: {label}" for label in COLUMNS.values())),
            [(r["model"], r["task"], r["arch"], r["mode"], r["turns_within"], r["trajectories"],
              _fraction(r["correct"]), _fraction(r["correct_targets"]), _fraction(r["unverified"]),
              times(r["best_speedup"]), *(_paper_cell(r, f"paper_{c}") for c in COLUMNS)) for r in pooled],
        ),
    ]  # fmt: skip
    per_variant = [r for r in table if r["variant"] != ALL_VARIANTS]
    if per_variant:
        text += [
            "",
            "Per prompt variant (ours; agent/bench/presets.py says which of the paper's configurations each stands "
            "for):",
            "",
            markdown_table(
                ("model", "task", "arch", "mode", "variant", "runs", "correct", "+targets", "unverified", "best"),
                [(r["model"], r["task"], r["arch"], r["mode"], r["variant"], r["trajectories"],
                  _fraction(r["correct"]), _fraction(r["correct_targets"]), _fraction(r["unverified"]),
                  times(r["best_speedup"])) for r in per_variant],
            ),
        ]  # fmt: skip
    return "\n".join(text)
