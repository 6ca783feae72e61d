"""Tools mode's function tools: their chat-completions schemas, the parse of a call, and the budgets. The tools
are the harness's own (tools/toolbox.py, which the MCP server shares): each returns the report a model reads,
and a call that cannot run (malformed arguments, an unknown tool, a call past the budget) is answered with one
line as its result, never an exception. Testable without LangGraph or a GPU."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from agent.loop.config import SolveConfig
from agent.loop.records import StopReason, ToolCall
from tools.jsontext import JsonRefused, loads
from tools.toolbox import SANITIZERS, answer_refusal

ANSWER = {
    "type": "string",
    "description": "Markdown: one ```ptx (or ```cuda) source block and one ```json launch spec.",
}


def _function(name: str, description: str, **properties: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}


TOOLS: list[dict[str, Any]] = [
    _function("compile", "The static stages: assembly, resources, SASS target instructions, launch-spec cross-checks. "
              "No GPU; seconds.", answer=ANSWER),
    _function("evaluate", "Every stage: verdict against the fp32 reference, timing against the baseline, executed "
              "target instructions, and where the time goes when slower. One GPU evaluation.", answer=ANSWER),
    _function("profile", "Evaluate with the perf pass always on (where the time goes). One GPU evaluation.",
              answer=ANSWER),
    _function("sanitize", "Evaluate under compute-sanitizer: memcheck (bad accesses) or racecheck (shared-memory "
              "races). One GPU evaluation.", answer=ANSWER,
              tool={"type": "string", "enum": list(SANITIZERS)}),
    _function("task", "The task's text again."),
    _function("submit", "End the run with this answer, evaluated as the final one.", answer=ANSWER),
]  # fmt: skip
TOOL_NAMES = tuple(t["function"]["name"] for t in TOOLS)
EVALUATING = frozenset({"evaluate", "profile", "sanitize"})  # each a GPU evaluation, within max_evaluations

NO_CALL = (
    "Your reply called no tool. Work through the tools: evaluate(answer) to test an answer, submit(answer) "
    "to end the run with it."
)


@dataclass(frozen=True)
class Parsed:
    """A call that can run: its tool, the answer it carries (None for task) and, for sanitize, which tool."""

    name: str
    answer: str | None = None
    sanitizer: str = "memcheck"

    @property
    def key(self) -> str:
        """What makes two calls the same evaluation (a submit is the evaluate of its answer)."""
        digest = hashlib.sha256((self.answer or "").encode("utf-8", "surrogatepass")).hexdigest()
        tool = "evaluate" if self.name == "submit" else self.name
        return f"{tool}:{self.sanitizer}:{digest}" if tool == "sanitize" else f"{tool}:{digest}"


@dataclass(frozen=True)
class Refused:
    """A call answered with one line: why (bad_arguments, unknown_tool, budget) and the line."""

    why: str
    line: str


def parse(call: ToolCall) -> Parsed | Refused:
    if call.name not in TOOL_NAMES:
        return Refused("unknown_tool", f"error: there is no tool {call.name[:80]!r}; the tools are "
                       f"{', '.join(TOOL_NAMES)}")  # fmt: skip
    try:
        arguments = loads(call.arguments) if call.arguments.strip() else {}
    except (json.JSONDecodeError, JsonRefused) as e:
        return Refused("bad_arguments", f"error: the arguments of {call.name} are not JSON ({_line(e)}); send an "
                       'object, e.g. {"answer": "..."}')  # fmt: skip
    if not isinstance(arguments, dict):
        return Refused("bad_arguments", f"error: the arguments of {call.name} must be a JSON object, not "
                       f"{type(arguments).__name__}")  # fmt: skip
    if call.name == "task":
        return Parsed("task")
    answer = arguments.get("answer")
    if not isinstance(answer, str):
        return Refused("bad_arguments", f"error: {call.name} needs `answer`, a string: the Markdown answer with "
                       "its source block and ```json launch spec")  # fmt: skip
    if refusal := answer_refusal(answer):
        return Refused("bad_arguments", refusal)
    sanitizer = arguments.get("tool", "memcheck") if call.name == "sanitize" else "memcheck"
    if sanitizer not in SANITIZERS:
        return Refused("bad_arguments", f"error: sanitize's `tool` is one of {', '.join(SANITIZERS)}, not "
                       f"{str(sanitizer)[:40]!r}")  # fmt: skip
    return Parsed(call.name, answer, sanitizer)


def budget_spent(
    settings: SolveConfig, tool_calls: int, evaluations: int, tokens: int, seconds: float
) -> StopReason | None:
    """The first budget these counts have reached, or None."""
    if tool_calls >= settings.max_tool_calls:
        return StopReason.TOOL_BUDGET
    if evaluations >= settings.max_evaluations:
        return StopReason.EVALUATION_BUDGET
    if settings.max_tokens_total is not None and tokens >= settings.max_tokens_total:
        return StopReason.TOKEN_BUDGET
    if settings.max_wall_s is not None and seconds >= settings.max_wall_s:
        return StopReason.WALL_BUDGET
    return None


def submit_now(budget: StopReason) -> str:
    """What the model is told when a budget runs out: one more reply, in which only submit runs."""
    spent = {StopReason.TOOL_BUDGET: "the tool calls (max_tool_calls)",
             StopReason.EVALUATION_BUDGET: "the GPU evaluations (max_evaluations)",
             StopReason.TOKEN_BUDGET: "the tokens (max_tokens_total)",
             StopReason.WALL_BUDGET: "the time (max_wall_s)"}[budget]  # fmt: skip
    return (f"The budget is spent: {spent}. Call submit(answer) now with your best answer; this is your last "
            "reply, and any other tool call is refused.")  # fmt: skip


def past_budget(name: str, budget: StopReason | None) -> str:
    """The line a call past the budget gets back."""
    told = f" ({budget.value})" if budget else ""
    return f"error: {name} refused: the budget is spent{told}; only submit(answer) runs now"


def assistant_message(text: str, calls: list[ToolCall]) -> dict[str, Any]:
    """A reply as the chat-completions conversation carries it (what the next request sends back)."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
        ]
    return message


def tool_message(call: ToolCall, result: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call.id, "content": result}


def _line(error: Exception) -> str:
    return " ".join(str(error).split())[:160]
