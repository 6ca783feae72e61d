"""Tools mode's steps (mode=tools): `agent` asks the policy for a reply that may call the harness's tools,
`tools` runs one call (the run's GPU pool, local or Dask, behind the GPU ones), `finish` writes the run's one
Turn: the submitted answer, or the best evaluated one when the model never submitted.

Every reply and every call is a step line in trajectory.jsonl, written by the node that made it. A node that
runs again after a kill (its checkpoint not yet written) finds its line there and reuses it, never asking the
model or the GPU twice: the recorded run and the checkpoint always agree. Budgets are checked after each
reply's calls; one spent asks the model to submit (one more reply), then the run ends."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from langgraph.runtime import Runtime

from agent.loop import toolcalls
from agent.loop.config import OpenAIConfig
from agent.loop.nodes import write_summary
from agent.loop.records import Message, ReplyStep, StopReason, ToolCall, ToolsOutcome, ToolStep, Turn
from agent.loop.state import LoopState, RunContext
from agent.loop.summary import outcome_of
from agent.loop.tokens import count_text
from tools import pipeline
from tools.evaluation import Evaluation, Stage, StageResult, StageState
from tools.toolbox import report, run_tool, tool_options

SUBMITTED = "\n\nSubmitted: the run ends with this answer."
NOTHING = "no answer was submitted or evaluated in this run"


def agent(state: LoopState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """The model's next reply to the conversation so far (the opening prompts first, and any notice)."""
    ctx = runtime.context
    step = state.get("step", 0) + 1
    if ctx.policy.max_steps is not None and step > ctx.policy.max_steps:
        return {"stop_reason": state.get("budget") or StopReason.POLICY_EXHAUSTED.value}
    new = [] if state.get("chat") else [_system(ctx), {"role": "user", "content": ctx.task_prompt}]
    notice = state.get("notice")
    new += [{"role": "user", "content": notice}] if notice else []
    recorded = next((s for s in ctx.folder.steps() if isinstance(s, ReplyStep) and s.step == step), None)
    if recorded is None:
        recorded = _ask(ctx, [*state.get("chat", []), *new], step, notice)
        ctx.folder.append_step(recorded)
    else:
        ctx.journal.event("step.already_recorded", step=step)
    calls = recorded.tool_calls
    names = ", ".join(c.name for c in calls) or "no tool"
    say(ctx, step, "agent", f"{recorded.completion_tokens:,} tokens in {recorded.model_seconds:.1f} s: calls {names}")
    update: dict[str, Any] = {
        "step": step,
        "chat": [*new, toolcalls.assistant_message(recorded.content, calls)],
        "calls": [c.model_dump() for c in calls],
        "next_call": 0,
        "notice": None,
        "tokens": state.get("tokens", 0) + recorded.prompt_tokens + recorded.completion_tokens,
        "spent_seconds": state.get("spent_seconds", 0.0) + recorded.model_seconds,
    }
    if not calls:  # counted as a call, so a model that never calls one still meets the tool budget
        update |= {"tool_calls": state.get("tool_calls", 0) + 1, "refused": state.get("refused", 0) + 1}
        update |= _after_reply(ctx, {**state, **update}) or {"notice": toolcalls.NO_CALL}
    return update


def _system(ctx: RunContext) -> dict[str, str]:
    return {"role": "system", "content": ctx.system_prompt}


def _ask(ctx: RunContext, messages: list[dict[str, Any]], step: int, notice: str | None) -> ReplyStep:
    llm = ctx.settings.llm
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    start = time.perf_counter()
    reply = ctx.policy.act(messages, step, toolcalls.TOOLS, llm.max_tokens if isinstance(llm, OpenAIConfig) else None)
    seconds = time.perf_counter() - start
    written = reply.text + (reply.reasoning or "") + "".join(c.name + c.arguments for c in reply.tool_calls)
    ctx.journal.event("agent.done", step=step, seconds=round(seconds, 3), finish_reason=reply.finish_reason,
                      tool_calls=[c.name for c in reply.tool_calls])  # fmt: skip
    return ReplyStep(
        step=step,
        notice=notice,
        content=reply.text,
        reasoning=reply.reasoning,
        tool_calls=list(reply.tool_calls),
        finish_reason=reply.finish_reason,
        prompt_tokens=reply.prompt_tokens if reply.prompt_tokens is not None else count_text(json.dumps(messages)),
        completion_tokens=reply.completion_tokens if reply.completion_tokens is not None else count_text(written),
        model_seconds=round(seconds, 3),
        started_at=started_at,
    )


def tools(state: LoopState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """The reply's next tool call. Within the budget one call per step (a checkpoint after each); past it the
    rest of the reply's calls at once, since each is only a line back."""
    ctx = runtime.context
    calls = [ToolCall.model_validate(c) for c in state["calls"]]
    index = state.get("next_call", 0)
    work = dict(state)
    work["cache"] = dict(state.get("cache", {}))
    messages: list[dict[str, Any]] = []
    while True:
        recorded = _call(ctx, work, calls[index], index)
        messages.append(toolcalls.tool_message(calls[index], recorded.result))
        work["spent_seconds"] = work.get("spent_seconds", 0.0) + recorded.seconds
        index += 1
        past = work.get("budget") or work.get("tool_calls", 0) >= ctx.settings.max_tool_calls
        if work.get("submitted") or index == len(calls) or not past:
            break
    update = {k: work.get(k) for k in ("tool_calls", "refused", "evaluations", "cache", "best", "submitted",
                                       "spent_seconds")}  # fmt: skip
    update |= {"chat": messages, "next_call": index}
    if work.get("submitted"):
        update["stop_reason"] = StopReason.SUBMITTED.value
    elif index == len(calls):
        update |= _after_reply(ctx, work)
    return update


def _after_reply(ctx: RunContext, state: dict[str, Any]) -> dict[str, Any]:
    """After a reply's calls: the end of a run that was asked to submit and did not, or a spent budget's ask."""
    if state.get("budget"):
        return {"stop_reason": state["budget"]}
    spent = toolcalls.budget_spent(ctx.settings, state.get("tool_calls", 0), state.get("evaluations", 0),
                                   state.get("tokens", 0), state.get("spent_seconds", 0.0))  # fmt: skip
    if spent is None:
        return {}
    ctx.journal.event("budget.spent", budget=spent.value, step=state.get("step"))
    say(ctx, state.get("step", 0), "budget", f"{spent.value}: asking the model to submit")
    return {"budget": spent.value, "notice": toolcalls.submit_now(spent)}


def _call(ctx: RunContext, work: dict[str, Any], call: ToolCall, index: int) -> ToolStep:
    """Run (or find recorded) one call, counting it in `work` and keeping its evaluation there."""
    step = work["step"]
    recorded = next((s for s in ctx.folder.steps() if isinstance(s, ToolStep) and (s.step, s.call) == (step, index)),
                    None)  # fmt: skip
    parsed = toolcalls.parse(call)
    if recorded is None:
        recorded = _run(ctx, work, call, index, parsed)
        ctx.folder.append_step(recorded)
    else:
        ctx.journal.event("step.already_recorded", step=step, call=index)
    work["tool_calls"] = work.get("tool_calls", 0) + 1
    work["refused"] = work.get("refused", 0) + (recorded.refused is not None)
    work["evaluations"] = work.get("evaluations", 0) + recorded.gpu_evaluation
    if recorded.evaluation is not None and isinstance(parsed, toolcalls.Parsed):
        evaluation = recorded.evaluation.model_dump(mode="json")
        result = recorded.result.removesuffix(SUBMITTED)  # the cache holds the evaluate's text
        work["cache"][parsed.key] = {"result": result, "evaluation": evaluation}
        chosen = {"answer": parsed.answer, "evaluation": evaluation, "step": step, "tool": parsed.name}
        if parsed.name == "submit":
            work["submitted"] = chosen
        if _better(ctx, chosen, work.get("best")):
            work["best"] = chosen
    shown = recorded.refused or (recorded.evaluation.status.value if recorded.evaluation else "ok")
    say(ctx, step, call.name[:9], shown + (" (cached)" if recorded.cached else ""))
    return recorded


def _run(ctx: RunContext, work: dict[str, Any], call: ToolCall, index: int, parsed: Any) -> ToolStep:
    step = work["step"]
    about = {"step": step, "call": index, "id": call.id, "name": call.name, "arguments": call.arguments}
    if isinstance(parsed, toolcalls.Refused):
        return ToolStep(**about, result=parsed.line, refused=parsed.why)
    settings, number = ctx.settings, work.get("tool_calls", 0) + 1
    budget = StopReason(work["budget"]) if work.get("budget") else None
    if parsed.name != "submit" and (budget or number > settings.max_tool_calls):
        return ToolStep(**about, result=toolcalls.past_budget(call.name, budget or StopReason.TOOL_BUDGET),
                        refused="budget")  # fmt: skip
    if parsed.name == "task":
        return ToolStep(**about, result=ctx.task_prompt)
    cached = work["cache"].get(parsed.key)
    if cached is not None:
        result = cached["result"] if parsed.name != "submit" else _submitted(cached["result"])
        return ToolStep(**about, result=result, evaluation=cached["evaluation"], cached=True)
    if parsed.name in toolcalls.EVALUATING and work.get("evaluations", 0) >= settings.max_evaluations:
        return ToolStep(**about, result=toolcalls.past_budget(call.name, StopReason.EVALUATION_BUDGET),
                        refused="budget")  # fmt: skip
    tool = "evaluate" if parsed.name == "submit" else parsed.name
    start = time.perf_counter()
    options = tool_options(tool, ctx.options, parsed.sanitizer)
    evaluation, on_gpu = run_tool(tool, parsed.answer, ctx.task, ctx.arch, options, ctx.gpu, ctx.gpu_unavailable)
    seconds = time.perf_counter() - start
    result = report(evaluation)
    if parsed.name == "submit":
        result = _submitted(result)
    ctx.journal.event("tool.done", step=step, call=index, tool=call.name, status=evaluation.status.value,
                      gpu=on_gpu, seconds=round(seconds, 3))  # fmt: skip
    return ToolStep(**about, result=result, evaluation=evaluation, gpu_evaluation=on_gpu, seconds=round(seconds, 3))


def _submitted(result: str) -> str:
    return result + SUBMITTED


def _better(ctx: RunContext, chosen: dict[str, Any], best: dict[str, Any] | None) -> bool:
    """Ranked as the run's turns are (agent/loop/summary.py): outcome, then speedup, then a full evaluation over a
    compile (which never runs the GPU stages); the earlier on a tie."""
    target = ctx.settings.target_speedup

    def rank(entry: dict[str, Any]) -> tuple[int, float, bool]:
        ev = Evaluation.model_validate(entry["evaluation"])
        return outcome_of(ev, target).rank, ev.speedup or 0.0, entry.get("tool") != "compile"

    return best is None or rank(chosen) > rank(best)


def finish(state: LoopState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """The run's one Turn (once, even when a resumed run repeats this step) and its summary."""
    ctx = runtime.context
    chosen = state.get("submitted") or state.get("best")
    reason = state.get("stop_reason") or StopReason.POLICY_EXHAUSTED.value
    if ctx.folder.turns():
        ctx.journal.event("turn.already_recorded", turn=1)
    else:
        ctx.folder.append_turn(_final_turn(ctx, state, chosen))
    summary = write_summary(ctx, reason)
    told = "submitted" if state.get("submitted") else "not submitted: the run's answer is its best evaluated one"
    if chosen is None:
        told = NOTHING
    say(ctx, state.get("step", 0), "finish", f"{summary.outcome.value} ({told}) → stop: {reason}")
    ctx.journal.event("run.tools_done", stop_reason=reason, submitted=bool(state.get("submitted")),
                      tool_calls=state.get("tool_calls", 0), evaluations=state.get("evaluations", 0))  # fmt: skip
    return {"stop_reason": reason}


def _final_turn(ctx: RunContext, state: LoopState, chosen: dict[str, Any] | None) -> Turn:
    steps = ctx.folder.steps()
    replies = [s for s in steps if isinstance(s, ReplyStep)]
    answer = chosen["answer"] if chosen else ""
    if chosen is not None:
        evaluation = Evaluation.model_validate(chosen["evaluation"])
        static = pipeline.extract(ctx.task, ctx.arch, answer=answer)
    else:
        static = pipeline.Static(stages=[StageResult(name=Stage.EXTRACT, state=StageState.FAILED, message=NOTHING)])
        evaluation = pipeline.evaluation(static, ctx.task, ctx.arch)
    submitted = state.get("submitted") is not None
    if submitted:
        feedback = next((s.result for s in reversed(steps) if isinstance(s, ToolStep) and s.name == "submit"), None)
    else:
        feedback = f"Not submitted: {NOTHING}." if chosen is None else (
            f"Not submitted: the run's answer is its best evaluated one (step {chosen['step']}).")  # fmt: skip
    return Turn(
        index=1,
        messages=[Message(role="system", content=ctx.system_prompt), Message(role="user", content=ctx.task_prompt)],
        response=answer,
        finish_reason=replies[-1].finish_reason if replies else None,
        prompt_tokens=sum(r.prompt_tokens for r in replies),
        completion_tokens=sum(r.completion_tokens for r in replies),
        solution=static.solution,
        evaluation=evaluation,
        feedback=feedback,
        model_seconds=round(sum(r.model_seconds for r in replies), 3),
        eval_seconds=round(sum(s.seconds for s in steps if isinstance(s, ToolStep)), 3),
        started_at=replies[0].started_at if replies else datetime.now(UTC).isoformat(timespec="seconds"),
        tools=ToolsOutcome(
            submitted=submitted,
            step=chosen["step"] if chosen else None,
            replies=len(replies),
            tool_calls=state.get("tool_calls", 0),
            refused=state.get("refused", 0),
            evaluations=state.get("evaluations", 0),
            budget=state.get("budget"),
        ),
    )


def say(ctx: RunContext, step: int, what: str, text: str) -> None:
    ctx.journal.say(f"step {step}  {what:<9} {text}")
