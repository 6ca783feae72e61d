"""Routers, stopping rules and summaries: plain functions, no LangGraph, no GPU."""

from __future__ import annotations

import json

import pytest

from agent.loop.config import SolveConfig
from agent.loop.records import Message, Turn
from agent.loop.routing import after_compile, after_extract, after_feedback, stop_reason
from agent.loop.summary import summarize
from tasks.schema import Arch
from tests.agent.helpers import FIXTURES
from tools.evaluation import Evaluation


def test_routers() -> None:
    assert after_extract({"evaluation": None}) == "solution"
    assert after_extract({"evaluation": {"status": "extract_error"}}) == "no_solution"
    assert after_compile({"gpu_pending": True}) == "gpu_ready"
    assert after_compile({"gpu_pending": False}) == "failed_or_no_gpu"
    assert after_feedback({"stop_reason": None}) == "next_turn"
    assert after_feedback({"stop_reason": "solved"}) == "stop"


def result(turn: int, solved: bool = False, tokens: int = 100, seconds: float = 1.0, status: str = "mismatch") -> dict:
    return {"turn": turn, "status": "passed" if solved else status, "solved": solved, "tokens": tokens,
            "seconds": seconds}  # fmt: skip


@pytest.mark.parametrize(
    ("results", "limits", "answers", "reason"),
    [
        ([result(1)], {}, None, None),
        ([result(1), result(2, solved=True)], {}, None, "solved"),
        ([result(1, solved=True), result(2)], {"max_turns": 2}, 2, "solved"),  # solved wins over every limit
        ([result(i) for i in range(1, 9)], {}, None, "max_turns"),
        ([result(1), result(2)], {"max_turns": 2}, 2, "max_turns"),
        ([result(1, tokens=600)], {"max_tokens_total": 500}, None, "token_budget"),
        ([result(1, tokens=400)], {"max_tokens_total": 500}, None, None),
        ([result(1, seconds=30.0)], {"max_wall_s": 20}, None, "wall_budget"),
        ([result(1), result(2)], {}, 2, "policy_exhausted"),
        ([result(1)], {}, 2, None),
        # An unverified attempt at its limit is the reason before the policy's answers, after the user's limits.
        ([result(1), result(2, status="unverified")], {}, 2, "unverified"),
        ([result(1, status="unverified")], {"max_turns": 1}, None, "max_turns"),
        ([result(1, status="unverified", tokens=600)], {"max_tokens_total": 500}, 1, "token_budget"),
        ([result(1, status="unverified")], {"unverified_turns": 2}, None, None),
        ([result(1, status="unverified"), result(2, status="unverified")], {"unverified_turns": 2}, 5, "unverified"),
    ],
)
def test_stop_reason(results: list, limits: dict, answers: int | None, reason: str | None) -> None:
    settings = SolveConfig(task="gemm_n7168_k5120", arch=Arch.SM_90A, **limits)
    assert stop_reason(results, settings, answers) == reason


def turn(index: int, evaluation: str) -> Turn:
    recorded = json.loads((FIXTURES / "evaluations.json").read_text())[evaluation]
    return Turn(
        index=index,
        messages=[Message(role="user", content="x")],
        evaluation=Evaluation.model_validate(recorded),
        prompt_tokens=10,
        completion_tokens=5,
        started_at="2026-01-01T00:00:00+00:00",
    )


def test_summary() -> None:
    turns = [turn(1, "timeout"), turn(2, "passed_slow"), turn(3, "passed_no_targets"), turn(4, "mismatch")]
    s = summarize(turns, target_speedup=1.0, stop_reason="max_turns")
    assert s.outcome == "correct"
    assert s.statuses == ["timeout", "passed", "passed", "mismatch"]
    assert [r.outcome for r in s.per_turn] == ["failed", "correct", "correct", "failed"]
    assert s.best_turn == 3 and s.best_speedup == pytest.approx(0.749 / 0.62)
    assert s.first_correct_turn == 2 and s.first_solved_turn is None
    assert (s.turns, s.prompt_tokens, s.completion_tokens) == (4, 40, 20)
    assert [r.targets_met for r in s.per_turn] == [None, True, False, None]
    solved = summarize([*turns, turn(5, "passed_fast")], target_speedup=1.0, stop_reason="solved")
    assert (solved.outcome, solved.best_turn, solved.first_solved_turn) == ("solved", 5, 5)
    assert summarize([], target_speedup=1.0, stop_reason=None).outcome == "failed"
