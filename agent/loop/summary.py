"""A run's summary.json (agent.loop.records.RunSummary), derived from its turns alone, so it can be rebuilt from
trajectory.jsonl. Turn outcomes are ranked as agent.loop.records.Outcome says."""

from __future__ import annotations

from agent.loop.records import Outcome, RunSummary, StopReason, Turn, TurnRecord
from tools.evaluation import Evaluation, Status


def turn_outcome(turn: Turn, target_speedup: float) -> Outcome:
    return outcome_of(turn.evaluation, target_speedup)


def outcome_of(ev: Evaluation, target_speedup: float) -> Outcome:
    if ev.solved(target_speedup):
        return Outcome.SOLVED
    if ev.correct:
        return Outcome.CORRECT
    return Outcome.UNVERIFIED if ev.status is Status.UNVERIFIED else Outcome.FAILED


def turn_record(turn: Turn, target_speedup: float) -> TurnRecord:
    ev = turn.evaluation
    return TurnRecord(
        turn=turn.index,
        status=ev.status,
        outcome=turn_outcome(turn, target_speedup),
        correct=ev.correct,
        targets_met=ev.targets_met,
        paper_tag=ev.paper_tag,
        speedup=ev.speedup,
        kernel_ms=ev.kernel_ms,
        prompt_tokens=turn.prompt_tokens,
        completion_tokens=turn.completion_tokens,
        model_seconds=round(turn.model_seconds, 3),
        eval_seconds=round(turn.eval_seconds, 3),
    )


def summarize(turns: list[Turn], *, target_speedup: float, stop_reason: StopReason | None, **about) -> RunSummary:
    """The summary of `turns`; `stop_reason` None means the run has not ended (or was killed). `about`: the
    run's id, task, arch, policy and stop detail, recorded as given."""
    records = [turn_record(t, target_speedup) for t in turns]
    best = max(records, key=lambda r: (r.outcome.rank, r.speedup or 0.0, -r.turn), default=None)
    speedups = [r.speedup for r in records if r.correct and r.speedup is not None]
    return RunSummary(
        **about,
        outcome=best.outcome if best else Outcome.FAILED,
        turns=len(records),
        best_turn=best.turn if best else None,
        best_speedup=max(speedups, default=None),
        first_correct_turn=next((r.turn for r in records if r.correct), None),
        first_solved_turn=next((r.turn for r in records if r.outcome is Outcome.SOLVED), None),
        statuses=[r.status for r in records],
        stop_reason=stop_reason,
        target_speedup=target_speedup,
        prompt_tokens=sum(r.prompt_tokens for r in records),
        completion_tokens=sum(r.completion_tokens for r in records),
        model_seconds=round(sum(r.model_seconds for r in records), 3),
        eval_seconds=round(sum(r.eval_seconds for r in records), 3),
        per_turn=records,
        tools=turns[-1].tools if turns else None,
    )
