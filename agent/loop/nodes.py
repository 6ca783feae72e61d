"""The loop's steps. Each takes the state and the run context and returns only the keys it changes; a
failing kernel is data (an Evaluation) for the model, never an exception. Only a policy that cannot
answer raises, which ends the run with its checkpoint intact for resume=RUN_ID."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from langgraph.runtime import Runtime

from agent.loop import reply as replies
from agent.loop.config import OpenAIConfig
from agent.loop.conversation import Fitted, fit
from agent.loop.feedback import feedback_message, outcome_summary
from agent.loop.policies import ContextOverflow, ModelError
from agent.loop.records import Message, Outcome, RunSummary, Turn
from agent.loop.routing import stop_reason
from agent.loop.state import LoopState, RunContext, TurnResult
from agent.loop.summary import summarize, turn_outcome
from agent.loop.tokens import count_text
from agent.notes.retrieve import notes_feedback
from tools import pipeline
from tools.evaluation import Evaluation, Stage, StageResult, StageState
from tools.pipeline import Static

TRUNCATED = (
    "the answer was cut off at the output token limit (finish_reason=length) before it ended, so it was "
    "not evaluated. Write a shorter answer: a few lines of prose, then the two blocks, with no "
    "commented-out or repeated code."
)


def generate(state: LoopState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """Ask the policy for this turn's answer."""
    ctx = runtime.context
    turn = state.get("turn", 0) + 1
    history = state.get("history", [])
    fitted = _fitted(ctx, turn, history)
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    start = time.perf_counter()
    try:
        reply = ctx.policy.respond(fitted.messages, turn, fitted.max_tokens)
    except ContextOverflow as e:  # the endpoint counts otherwise than we do: compact everything older, once
        fitted = _fitted(ctx, turn, history, (e, fitted))
        reply = ctx.policy.respond(fitted.messages, turn, fitted.max_tokens)  # a second refusal ends the run
    seconds = time.perf_counter() - start
    messages, prompt_estimate = fitted.messages, fitted.prompt_tokens
    kept = replies.keep(reply, ctx.folder.path / "attempts", turn)
    completion = reply.completion_tokens
    if completion is None:  # counted on what is kept; the rest of a cut field estimated at 4 bytes a token
        completion = count_text(kept["text"]) + (count_text(kept["reasoning"]) if kept["reasoning"] else 0)
        completion += sum(cut["bytes"] // 4 for cut in kept["cuts"])
    for cut in kept["cuts"]:
        ctx.journal.event("generate.cut", turn=turn, **cut)
        say(ctx, turn, "generate", f"the {cut['field']} is {cut['bytes']:,} bytes: kept whole in {cut['archive']}")
    if kept["lone_surrogates"]:
        counts = {field: len(found) for field, found in kept["lone_surrogates"].items()}
        ctx.journal.event("generate.lone_surrogates", turn=turn, **counts)
    answer = {
        **kept,
        "finish_reason": reply.finish_reason,
        "prompt_tokens": reply.prompt_tokens if reply.prompt_tokens is not None else prompt_estimate,
        "completion_tokens": completion,
        "unreadable": reply.unreadable,
    }
    ctx.journal.event(
        "generate.done",
        turn=turn,
        seconds=round(seconds, 3),
        finish_reason=reply.finish_reason,
        prompt_tokens=answer["prompt_tokens"],
        completion_tokens=completion,
        reasoning_chars=len(reply.reasoning or ""),
    )
    say(ctx, turn, "generate", f"{completion:,} tokens in {seconds:.1f} s (finish: {reply.finish_reason})")
    return {
        "turn": turn,
        "messages": [m.model_dump() for m in messages],
        "reply": answer,
        "started_at": started_at,
        "model_seconds": seconds,
        "static": None,
        "module": None,
        "evaluation": None,
        "eval_seconds": 0.0,
        "gpu_pending": False,
    }


def _fitted(ctx: RunContext, turn: int, history: list, refused: tuple[ContextOverflow, Fitted] | None = None) -> Fitted:
    """This turn's conversation within the model's context window (llm.context_tokens), saying what fitting it
    took; after the endpoint refused a request (the error, and what was sent) as too long, every earlier attempt
    compacted and the window corrected by the endpoint's own count where its message gives one."""
    llm = ctx.settings.llm
    guarded = isinstance(llm, OpenAIConfig)
    context = llm.context_tokens if guarded else None
    compacted = 0
    if refused is not None:
        error, sent = refused
        context = error.limit or context
        if context is not None and error.prompt_tokens is not None:  # its tokenizer counts more than ours
            context -= max(error.prompt_tokens - sent.prompt_tokens, 0)
        compacted = len(history)
        ctx.journal.event("llm.context_refused", turn=turn, message=str(error), limit=error.limit,
                          endpoint_prompt_tokens=error.prompt_tokens, retry_context_tokens=context)  # fmt: skip
        say(ctx, turn, "generate", "the endpoint refused the request as too long: compacted, asking once more")
    fitted = fit(ctx.system_prompt, ctx.task_prompt, history, ctx.settings.history, context_tokens=context,
                 max_tokens=llm.max_tokens if guarded else None, floor=llm.min_output_tokens if guarded else 0,
                 compacted=compacted)  # fmt: skip
    ctx.journal.event("turn.start", turn=turn, messages=len(fitted.messages),
                      prompt_tokens_estimate=fitted.prompt_tokens)  # fmt: skip
    if fitted.lowered_from is not None:
        ctx.journal.event("llm.max_tokens_lowered", turn=turn, to=fitted.max_tokens, setting=fitted.lowered_from,
                          prompt_tokens=fitted.prompt_tokens, context_tokens=context)  # fmt: skip
    if fitted.compacted:
        ctx.journal.event("conversation.compacted", turn=turn, attempts=fitted.compacted,
                          prompt_tokens=fitted.prompt_tokens, context_tokens=context)  # fmt: skip
    if not fitted.fits:
        raise ModelError(
            f"the prompt is {fitted.prompt_tokens:,} tokens with every earlier attempt compacted, which leaves "
            f"fewer than llm.min_output_tokens={llm.min_output_tokens:,} of llm.context_tokens={context:,} for the "
            "answer: raise llm.context_tokens, or lower llm.min_output_tokens or the prompt (prompt=base)"
        )
    notes = [f"max_tokens {fitted.lowered_from:,} → {fitted.max_tokens:,}"] if fitted.lowered_from else []
    notes += [f"{fitted.compacted} earlier attempt(s) as one line"] if fitted.compacted else []
    shown = f" ({'; '.join(notes)} to fit {context:,})" if notes else ""
    say(ctx, turn, "generate", f"{len(fitted.messages)} messages, {fitted.prompt_tokens:,} prompt tokens{shown} …")
    return fitted


def extract(state: LoopState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """The extract stage: the answer's Solution and its concrete launch plan (a cut-off answer, a bad spec or a
    bad block size is refused here)."""
    ctx = runtime.context
    reply = state["reply"]
    if reply.get("unreadable"):  # a stream, only tool calls, nothing written: said once, not retried
        static = Static(stages=[StageResult(name=Stage.EXTRACT, state=StageState.FAILED, message=reply["unreadable"])])
    elif reply["finish_reason"] == "length":  # a truncated module is never worth assembling
        static = Static(stages=[StageResult(name=Stage.EXTRACT, state=StageState.FAILED, message=TRUNCATED)])
    else:
        static = pipeline.extract(ctx.task, ctx.arch, answer=replies.whole_answer(reply, ctx.folder.path))
    if static.failed:
        failure = pipeline.evaluation(static, ctx.task, ctx.arch)
        ctx.journal.event("extract.failed", turn=state["turn"], message=failure.message)
        say(ctx, state["turn"], "extract", f"extract_error: {_first_line(static.failed.message)}")
        return {"evaluation": failure.model_dump(mode="json")}
    solution = static.solution
    ctx.journal.event("extract.done", turn=state["turn"], language=solution.language, hash=solution.content_hash)
    launches = len(solution.launch.launches)
    say(ctx, state["turn"], "extract", f"{solution.language} source, {launches} launch{'es' if launches > 1 else ''}")
    return {"static": static.model_dump(mode="json")}


def compile_(state: LoopState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """The static stages on the extracted solution: compile (ptxas / NVRTC), sass (nvdisasm), abi. The built module
    goes to the run folder for the GPU step; the turn's evaluation is written here only when no GPU step follows
    (a failed stage, or a run whose GPU cannot run the arch)."""
    ctx = runtime.context
    start = time.perf_counter()
    static = pipeline.build(Static.model_validate(state["static"]), ctx.task, ctx.arch, ctx.options)
    seconds = time.perf_counter() - start
    pending = static.module is not None and ctx.gpu_unavailable is None
    update: dict[str, Any] = {
        "static": static.model_dump(mode="json", exclude={"module"}),
        "eval_seconds": seconds,
        "gpu_pending": pending,
    }
    if pending:
        update["module"] = ctx.folder.keep_module(state["turn"], static.module)
        _report_built(ctx, state["turn"], static, seconds)
    else:
        evaluation = pipeline.evaluation(static, ctx.task, ctx.arch, ctx.gpu_unavailable or "")
        update["evaluation"] = evaluation.model_dump(mode="json")
        _report(ctx, state["turn"], "compile", evaluation, seconds, static=True)
    return update


def gpu(state: LoopState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """The GPU stages of the built module: run, check, time, profile."""
    ctx = runtime.context
    say(ctx, state["turn"], "gpu", "running on the GPU …")
    start = time.perf_counter()
    static = Static.model_validate(state["static"])
    if state.get("module"):  # else a checkpoint from before KeptModule: the module is inside `static`
        static = static.model_copy(update={"module": ctx.folder.module(state["module"])})
    if ctx.gpu_unavailable:  # a run resumed at this step on a GPU that cannot run the arch
        evaluation = pipeline.evaluation(static, ctx.task, ctx.arch, ctx.gpu_unavailable)
    else:
        evaluation = pipeline.gpu_stages(static, ctx.task, ctx.arch, ctx.options, ctx.gpu)
    seconds = time.perf_counter() - start
    _report(ctx, state["turn"], "gpu", evaluation, seconds, static=False)
    return {
        "evaluation": evaluation.model_dump(mode="json"),
        "eval_seconds": state.get("eval_seconds", 0.0) + seconds,
        "gpu_pending": False,
    }


def feedback(state: LoopState, runtime: Runtime[RunContext]) -> dict[str, Any]:
    """Finish the turn: the feedback message, the turn written to the run folder (once, even when a
    resumed run repeats this step), the summary, and whether to stop."""
    ctx = runtime.context
    settings = ctx.settings
    index = state["turn"]
    evaluation = Evaluation.model_validate(state["evaluation"])
    message = feedback_message(
        evaluation, ctx.task, ctx.arch, turn=index, max_turns=settings.max_turns, target_speedup=settings.target_speedup
    )
    notes_shown = None
    if ctx.notes is not None:
        section, notes_shown = notes_feedback(
            ctx.notes, evaluation, ctx.task, str(ctx.arch), settings.feedback, settings.target_speedup
        )
        message += f"\n\n{section}" if section else ""
    reply = state["reply"]
    turn = Turn(
        index=index,
        messages=[Message(**m) for m in state["messages"]],
        response=reply["text"],
        reasoning=reply["reasoning"],
        finish_reason=reply["finish_reason"],
        prompt_tokens=reply["prompt_tokens"],
        completion_tokens=reply["completion_tokens"],
        solution=Static.model_validate(state["static"]).solution if state.get("static") else None,
        evaluation=evaluation,
        feedback=message,
        cuts=reply.get("cuts", []),
        lone_surrogates=reply.get("lone_surrogates", {}),
        model_seconds=state["model_seconds"],
        eval_seconds=state.get("eval_seconds", 0.0),
        started_at=state["started_at"],
        notes_shown=notes_shown,
    )
    if any(t.index == index for t in ctx.folder.turns()):
        ctx.journal.event("turn.already_recorded", turn=index)
    else:
        ctx.folder.append_turn(turn)
    outcome = turn_outcome(turn, settings.target_speedup)
    result = TurnResult(
        turn=index,
        status=evaluation.status.value,
        solved=outcome is Outcome.SOLVED,
        tokens=turn.prompt_tokens + turn.completion_tokens,
        seconds=turn.model_seconds + turn.eval_seconds,
    )
    results = [*state.get("results", []), result]
    stop = stop_reason(results, settings, ctx.policy.max_answers)
    reason = stop.value if stop else None  # the state holds plain JSON
    write_summary(ctx, reason)
    ctx.journal.event(
        "turn.done",
        turn=index,
        status=result["status"],
        outcome=outcome.value,
        stop_reason=reason,
        speedup=evaluation.speedup,
        targets_met=evaluation.targets_met,
    )
    shown = evaluation.status.value + (f" ({outcome})" if outcome.value != evaluation.status.value else "")
    say(ctx, index, "feedback", shown + (f" → stop: {reason}" if reason else " → next turn"))
    told = outcome_summary(evaluation, index)
    return {
        "history": [{"turn": index, "response": turn.response, "feedback": message, "outcome": told}],
        "results": [result],
        "stop_reason": reason,
    }


def write_summary(ctx: RunContext, stop_reason: str | None, detail: str | None = None) -> RunSummary:
    """summary.json from the run folder's turns; returns what it wrote."""
    summary = summarize(
        ctx.folder.turns(),
        target_speedup=ctx.settings.target_speedup,
        stop_reason=stop_reason,
        run_id=ctx.folder.run_id,
        task=ctx.task.name,
        arch=str(ctx.arch),
        policy=ctx.policy.describe(),
        stop_detail=detail,
        mode=ctx.settings.mode,
    )
    ctx.folder.write_summary(summary)
    return summary


def say(ctx: RunContext, turn: int, step: str, text: str) -> None:
    ctx.journal.say(f"turn {turn}/{ctx.settings.max_turns}  {step:<9} {text}")


def _report_built(ctx: RunContext, turn: int, static: Static, seconds: float) -> None:
    """A module that passed the static stages, with the GPU stages next."""
    stages = [s.name.value for s in static.stages if s.state is not StageState.SKIPPED]
    ctx.journal.event("compile.done", turn=turn, status="built", stages=stages, seconds=round(seconds, 3))
    say(ctx, turn, "compile", f"compiled ({_registers(static.stages)}) in {seconds:.1f} s; GPU stages next")


def _registers(stages: list[StageResult]) -> str:
    compiled = next((s for s in stages if s.name is Stage.COMPILE), None)
    kernels = compiled.detail.get("kernels", []) if compiled else []
    return ", ".join(f"{k['name']} {k['registers']} regs" for k in kernels[:3]) or "no kernels reported"


def _report(ctx: RunContext, turn: int, step: str, evaluation: Evaluation, seconds: float, *, static: bool) -> None:
    stages = [s.name.value for s in evaluation.stages if s.state is not StageState.SKIPPED]
    ctx.journal.event(
        f"{step}.done",
        turn=turn,
        status=evaluation.status.value,
        stages=stages,
        seconds=round(seconds, 3),
        message=evaluation.message[:2000],
    )
    failed = next((s for s in evaluation.stages if s.state is StageState.FAILED), None)
    if failed is not None:
        text = f"{evaluation.status.value} at {failed.name.value}: {_first_line(failed.message)}"
    elif static:  # built, and the run's GPU cannot run it: why is said once, when the run starts (agent/loop/run.py)
        text = f"compiled ({_registers(evaluation.stages)}) in {seconds:.1f} s; GPU stages skipped"
    else:
        text = f"{evaluation.status.value}"
        if evaluation.speedup is not None:
            text += f": {evaluation.kernel_ms:.4f} ms, {evaluation.speedup:.3f}× {ctx.task.baseline.library}"
        if evaluation.targets_met is not None:
            text += ", targets met" if evaluation.targets_met else ", targets NOT met"
    say(ctx, turn, step, text)


def _first_line(text: str, limit: int = 160) -> str:
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    return line if len(line) <= limit else line[:limit] + "…"
