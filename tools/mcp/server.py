"""The MCP tools over one GPU pool: list_tasks, task_prompt, compile, evaluate, profile, sanitize. Each takes
typed inputs and returns text a model reads (the harness's own report of the attempt, cut with a marker when
long); a bad task, arch or answer is that text too — a tool never raises to the client."""

from __future__ import annotations

from typing import Annotated, Literal

import anyio
from mcp.server.mcpserver import MCPServer
from pydantic import Field

from tasks.catalog import TASKS, get_task
from tasks.schema import Arch, Task
from tools.answer import MAX_ANSWER_BYTES
from tools.evaluate import render
from tools.gpu.base import Gpu, Unavailable
from tools.options import EvalOptions, Profile
from tools.pipeline import evaluate_answer

MAX_REPLY_CHARS = 20_000  # a tool result is read by a model: long reports are cut, and say so
INSTRUCTIONS = """PTXBench evaluates GPU kernels written in PTX (or CUDA with inline PTX) for Hopper (sm_90a) and
Blackwell (sm_100a). An answer is Markdown with one ```ptx (or ```cuda) block and one ```json launch spec.
Start with list_tasks and task_prompt; compile for the static stages (fast, no GPU), evaluate for the verdict
against the fp32 reference, the timing against the library baseline and the executed tensor-core and TMA
instructions; profile for where the time goes; sanitize for memory faults or shared-memory races."""

TaskName = Annotated[str, Field(description="A task's name or alias, as list_tasks gives it (e.g. gemm).")]
ArchName = Annotated[str, Field(description="sm_90a (Hopper, H100/H200) or sm_100a (Blackwell, B200).")]
AnswerText = Annotated[
    str, Field(description="Markdown: one ```ptx or ```cuda source block and one ```json launch spec block.")
]


def cut(text: str, limit: int = MAX_REPLY_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[cut: {len(text) - limit} more characters not shown]"


def _problem(task: str, arch: str) -> tuple[Task, Arch] | str:
    try:
        return get_task(task), Arch.resolve(arch)
    except ValueError as e:
        return f"error: {e}"


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


def build_server(gpu: Gpu | None = None, options: EvalOptions | None = None) -> MCPServer:
    """The server; `gpu` runs the GPU stages (None: static stages only, every verdict unverified)."""
    gpu = gpu or Unavailable("this MCP server has no GPU pool (python -m tools.mcp --pool …)")
    base = options or EvalOptions()
    static_only = Unavailable("compile runs the static stages only: evaluate runs the GPU stages")
    server = MCPServer("ptxbench", instructions=INSTRUCTIONS)

    async def run(task: str, arch: str, answer: str, options: EvalOptions, on: Gpu) -> str:
        found = _problem(task, arch)
        if isinstance(found, str):
            return found
        if len(answer.encode()) > MAX_ANSWER_BYTES:
            return f"error: the answer is {len(answer.encode()):,} bytes; at most {MAX_ANSWER_BYTES:,}"
        evaluation = await anyio.to_thread.run_sync(evaluate_answer, answer, *found, options, on)
        return cut(render(evaluation) + ("\n" + evaluation.message if evaluation.message else ""))

    @server.tool()
    def list_tasks() -> str:
        """Every task: its name, what it computes, and its shapes."""
        return "\n".join(f"{t.name}: {t.description}" for t in TASKS.values())

    @server.tool()
    def task_prompt(task: TaskName) -> str:
        """The task's problem in full: tensors, shapes, dtypes, the baseline, the instructions it must execute."""
        try:
            return task_text(get_task(task))
        except ValueError as e:
            return f"error: {e}"

    @server.tool()
    async def compile(task: TaskName, arch: ArchName, answer: AnswerText) -> str:
        """The static stages: extract, NVRTC/ptxas, the SASS's target instructions, the launch spec against the
        kernel's parameters. No GPU; seconds."""
        return await run(task, arch, answer, base, static_only)

    @server.tool()
    async def evaluate(task: TaskName, arch: ArchName, answer: AnswerText) -> str:
        """Every stage: compile, run, check against the fp32 reference, time against the baseline library,
        count the executed target instructions, and where the time goes when slower than the baseline."""
        return await run(task, arch, answer, base, gpu)

    @server.tool()
    async def profile(task: TaskName, arch: ArchName, answer: AnswerText) -> str:
        """Evaluate with the perf pass always on: where the kernel's time goes beside the baseline's kernels."""
        return await run(task, arch, answer, base.model_copy(update={"profile": Profile.PERF}), gpu)

    @server.tool()
    async def sanitize(task: TaskName, arch: ArchName, answer: AnswerText,
                       tool: Literal["memcheck", "racecheck"] = "memcheck") -> str:  # fmt: skip
        """Evaluate under compute-sanitizer: memcheck (out-of-bounds and misaligned accesses, located to a
        line) or racecheck (shared-memory races, on a mismatch)."""
        return await run(task, arch, answer, base.model_copy(update={tool: True}), gpu)

    return server
