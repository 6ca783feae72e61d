"""The harness as tools a model calls: compile, evaluate, profile and sanitize an answer, and the task's text.
One implementation behind both ways in, the MCP server (tools/mcp) and the repair loop's tools mode
(agent/loop/toolcalls.py): each tool gives an Evaluation and the text a model reads of it, cut with a marker
when long. A bad answer is that text too; nothing here raises for what a model sent."""

from __future__ import annotations

from typing import Literal

from tasks.schema import Arch, Task
from tools import pipeline
from tools.answer import MAX_ANSWER_BYTES
from tools.evaluate import render
from tools.evaluation import Evaluation
from tools.gpu.base import Gpu
from tools.options import EvalOptions, Profile

MAX_REPLY_CHARS = 20_000  # a tool result is read by a model: long reports are cut, and say so
STATIC_ONLY = "compile runs the static stages only: evaluate runs the GPU stages"
Tool = Literal["compile", "evaluate", "profile", "sanitize"]
Sanitizer = Literal["memcheck", "racecheck"]
SANITIZERS: tuple[Sanitizer, ...] = ("memcheck", "racecheck")


def cut(text: str, limit: int = MAX_REPLY_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[cut: {len(text) - limit} more characters not shown]"


def task_text(task: Task) -> str:
    """What the problem is, from the catalog: its sizes, tensors, tolerance, baseline and the instructions each
    arch must execute. (The repair loop's fuller prompt, with the reference code and a worked example, is
    agent.loop.prompts', a layer above this one.)"""
    dims = ", ".join(f"{k}={v}" for k, v in task.dims.items())
    lines = [f"{task.name}: {task.description}", f"sizes: {dims}", "tensors:"]
    for t in task.tensors:
        shape = " × ".join(f"{d}={task.dims[d]}" if d in task.dims else str(d) for d in t.shape)
        lines.append(f"  {t.role} {t.name}: {t.dtype} [{shape}], {t.layout}")
    lines.append(f"correct when: {task.metric} within {task.tolerance:g} of the fp32 reference")
    lines.append(
        f"baseline: {task.baseline.library} ({task.baseline.description})" if task.baseline else "baseline: none"
    )
    for arch, groups in task.targets.items():
        lines.append(f"{arch} must execute: " + "; ".join(g.description for g in groups))
    return "\n".join(lines)


def answer_refusal(answer: str) -> str | None:
    """The one line a tool answers instead of evaluating an answer too large to be one, else None."""
    size = len(answer.encode("utf-8", "surrogatepass"))
    return f"error: the answer is {size:,} bytes; at most {MAX_ANSWER_BYTES:,}" if size > MAX_ANSWER_BYTES else None


def tool_options(tool: Tool, base: EvalOptions, sanitizer: Sanitizer = "memcheck") -> EvalOptions:
    """The evaluation options each tool runs with: profile forces the perf pass, sanitize its sanitizer."""
    if tool == "profile":
        return base.model_copy(update={"profile": Profile.PERF})
    if tool == "sanitize":
        return base.model_copy(update={sanitizer: True})
    return base


def run_tool(
    tool: Tool, answer: str, task: Task, arch: Arch, options: EvalOptions, gpu: Gpu, gpu_unavailable: str | None
) -> tuple[Evaluation, bool]:
    """The tool's Evaluation of `answer` and whether it went to the GPU stages (a GPU evaluation: what a run
    costs). `gpu_unavailable` is why `gpu` cannot run `arch` (None: it can), asked once by the caller; compile
    never goes to the GPU."""
    static = pipeline.build(pipeline.extract(task, arch, answer=answer), task, arch, options)
    reason = STATIC_ONLY if tool == "compile" else gpu_unavailable
    if static.module is None or reason:
        return pipeline.evaluation(static, task, arch, reason or ""), False
    return pipeline.gpu_stages(static, task, arch, options, gpu), True


def report(evaluation: Evaluation) -> str:
    """What a model reads of an evaluation: the stage-by-stage report and its message, cut when long."""
    return cut(render(evaluation) + ("\n" + evaluation.message if evaluation.message else ""))
