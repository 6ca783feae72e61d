"""One "solved" rule (tools/evaluation.py Evaluation.solved): its verdicts on recorded evaluations, and a guard that
the loop's summary, its feedback and the RL environment ask it rather than compare against the target themselves."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.agent.helpers import recorded_evaluations
from tools.evaluation import Stage, StageState

ROOT = Path(__file__).resolve().parents[2]
RECORDED = recorded_evaluations()
CALLERS = ["agent/loop/summary.py", "agent/loop/feedback.py", "agent/rl/env.py"]


@pytest.mark.parametrize(
    ("name", "target", "solved"),
    [("passed_fast", 1.0, True), ("passed_fast", 1.1, False), ("passed_slow", 0.4, True), ("passed_slow", 1.0, False),
     ("passed_no_targets", 1.0, False), ("mismatch", 0.0, False), ("timeout", 0.0, False)],
)  # fmt: skip
def test_solved_needs_correct_executed_targets_and_the_speedup(name: str, target: float, solved: bool) -> None:
    assert RECORDED[name].solved(target) is solved


def test_targets_not_counted_are_not_solved() -> None:
    fast = RECORDED["passed_fast"]
    stages = [s for s in fast.stages if s.name is not Stage.PROFILE]
    stages.append(fast.stage(Stage.PROFILE).model_copy(update={"state": StageState.SKIPPED, "message": "off"}))
    unprofiled = fast.model_copy(update={"stages": stages, "targets_met": None, "target_counts": None})
    assert fast.solved(1.0) and not unprofiled.solved(1.0)


def _compares_with_the_target(tree: ast.AST) -> list[int]:
    """Lines ordering something against a `target_speedup` (a name or an attribute)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in node.ops):
            for side in [node.left, *node.comparators]:
                named = side.id if isinstance(side, ast.Name) else getattr(side, "attr", None)
                if named == "target_speedup":
                    lines.append(node.lineno)
    return lines


def _calls_solved(tree: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "solved" for n in ast.walk(tree))


def test_there_is_one_solved_rule() -> None:
    calls = {path: _calls_solved(ast.parse((ROOT / path).read_text())) for path in CALLERS}
    assert calls == dict.fromkeys(CALLERS, True)
    sources = [p for floor in ("agent", "tools") for p in (ROOT / floor).rglob("*.py")]
    found = {str(p.relative_to(ROOT)): _compares_with_the_target(ast.parse(p.read_text())) for p in sources}
    assert len(found.pop("tools/evaluation.py")) == 1
    assert {path: lines for path, lines in found.items() if lines} == {}
