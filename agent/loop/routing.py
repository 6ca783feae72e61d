"""Where the loop goes next: plain functions of the state, testable without LangGraph or a GPU."""

from __future__ import annotations

from typing import Literal

from agent.loop.config import SolveConfig
from agent.loop.records import StopReason
from agent.loop.state import LoopState, TurnResult
from tools.evaluation import Status


def start(state: LoopState) -> Literal["turns", "tools"]:
    """The run's mode, which its first input names (a run from before modes has turns)."""
    return "tools" if state.get("mode") == "tools" else "turns"


def after_agent(state: LoopState) -> Literal["tool_calls", "no_tool_call", "stop"]:
    """A reply's calls run one by one; a reply without any is told so and asked again, unless the run ends."""
    if state.get("stop_reason"):
        return "stop"
    return "tool_calls" if state.get("calls") else "no_tool_call"


def after_tools(state: LoopState) -> Literal["next_call", "next_reply", "stop"]:
    if state.get("stop_reason"):
        return "stop"
    return "next_call" if state.get("next_call", 0) < len(state.get("calls", [])) else "next_reply"


def after_extract(state: LoopState) -> Literal["solution", "no_solution"]:
    """An answer that yielded no solution already carries its failed evaluation."""
    return "no_solution" if state.get("evaluation") else "solution"


def after_compile(state: LoopState) -> Literal["gpu_ready", "failed_or_no_gpu"]:
    return "gpu_ready" if state.get("gpu_pending") else "failed_or_no_gpu"


def after_feedback(state: LoopState) -> Literal["next_turn", "stop"]:
    return "stop" if state.get("stop_reason") else "next_turn"


def stop_reason(results: list[TurnResult], settings: SolveConfig, max_answers: int | None) -> StopReason | None:
    """Why the run ends after these turns, or None to go on. Budgets are checked between turns: a turn
    in flight is never cut short. Where several hold at once the first named is the reason: the limits the user
    set, then `unverified`, then an offline policy's answers running out (a reference run without a GPU stops
    `unverified`: that no GPU judged its one answer is what its user must know, not that it had only one)."""
    if any(r["solved"] for r in results):
        return StopReason.SOLVED
    done = len(results)
    if done >= settings.max_turns:
        return StopReason.MAX_TURNS
    if settings.max_tokens_total is not None and sum(r["tokens"] for r in results) >= settings.max_tokens_total:
        return StopReason.TOKEN_BUDGET
    if settings.max_wall_s is not None and sum(r["seconds"] for r in results) >= settings.max_wall_s:
        return StopReason.WALL_BUDGET
    if sum(r["status"] == Status.UNVERIFIED for r in results) >= settings.unverified_turns:
        return StopReason.UNVERIFIED  # nothing more is learned here about a kernel that may already be right
    if max_answers is not None and done >= max_answers:
        return StopReason.POLICY_EXHAUSTED
    return None
