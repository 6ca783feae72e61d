"""One attempt, stage by stage: extract → compile → sass → abi, then the GPU stages (tools/gpu/stages.py: run →
check → time → profile → perf, and the sanitizer's diagnoses).

The static steps run where the caller runs and leave a `Static` record, plain data that the repair loop
keeps between its nodes (its module in the run folder, the rest in its checkpointed state): `extract` (the
answer → a Solution and its concrete LaunchPlan) and `build` (compile, sass, abi → the CompiledModule).
`on_gpu` then runs the GPU stages of that module on a `Gpu` (tools/gpu/base.py), or `gpu_stages` where the
caller has already asked whether that GPU can run the arch. Each step stops at the first failing stage; without a GPU of
the solution's arch the GPU stages are `skipped` with the reason and the attempt is `unverified`, never
`passed`. The stage functions are also what `python -m tools.compile` reports.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel, Field

from tasks.schema import Arch, TargetGroup, Task
from tools import procs, sass
from tools import ptx as ptx_text
from tools.abi import check_abi
from tools.answer import AnswerError, extract_solution
from tools.assemble import CompileResult, compile_source, render_grouped
from tools.crosscheck import cross_check, cross_check_summary
from tools.evaluation import Evaluation, Stage, StageResult, StageState, Status
from tools.gpu.base import CompiledModule, Gpu, Unavailable
from tools.gpu.stages import skipped
from tools.options import EvalOptions
from tools.plan import LaunchPlan, SpecError, launch_dims, plan_launches
from tools.solution import Solution

FAILURE_STATUS = {
    Stage.EXTRACT: Status.EXTRACT_ERROR,
    Stage.COMPILE: Status.COMPILE_ERROR,
    Stage.SASS: Status.COMPILE_ERROR,
    Stage.ABI: Status.ABI_ERROR,
}
PENDING = "the GPU stages run in the next step"
T = TypeVar("T")


class Static(BaseModel):
    """What the static steps produced so far: their stages, and what the next step consumes."""

    stages: list[StageResult] = Field(default_factory=list)
    solution: Solution | None = None
    plan: LaunchPlan | None = None
    module: CompiledModule | None = Field(None, description="Set once compile, sass and abi all passed.")

    @property
    def failed(self) -> StageResult | None:
        return next((s for s in self.stages if s.state is StageState.FAILED), None)


def _timed(stage_fn: Callable[..., T]) -> Callable[..., T]:
    """Record the stage's wall time in its `seconds` (the stage is the result, or the result's first item)."""

    @functools.wraps(stage_fn)
    def timed(*args, **kwargs) -> T:
        start = time.perf_counter()
        out = stage_fn(*args, **kwargs)
        (out[0] if isinstance(out, tuple) else out).seconds = time.perf_counter() - start
        return out

    return timed


# ---------------------------------------------------------------------------------------- extract


def extract(task: Task, arch: Arch, *, answer: str | None = None, solution: Solution | None = None) -> Static:
    """The extract stage: the answer's Solution (or the given one) and its LaunchPlan at the task's dims."""
    stage, solution, plan = extract_stage(task, arch, answer, solution)
    return Static(stages=[stage], solution=solution, plan=plan)


@_timed
def extract_stage(
    task: Task, arch: Arch, answer: str | None, solution: Solution | None
) -> tuple[StageResult, Solution | None, LaunchPlan | None]:
    try:
        solution = solution or extract_solution(answer or "")
        plan = plan_launches(solution.launch, task, arch)
    except (AnswerError, SpecError) as e:
        return StageResult(name=Stage.EXTRACT, state=StageState.FAILED, message=str(e)), None, None
    detail = {"language": solution.language, "source_lines": solution.source.count("\n") + 1,
              "launches": len(solution.launch.launches), "solution_hash": solution.content_hash}  # fmt: skip
    return StageResult(name=Stage.EXTRACT, state=StageState.PASSED, detail=detail), solution, plan


# ---------------------------------------------------------------------------------- compile, sass, abi


@_timed
def compile_stage(language: str, source: str, arch: Arch, timeout_s: float) -> tuple[StageResult, CompileResult]:
    compiled = compile_source(language, source, arch, timeout_s)
    detail = compiled.model_dump(mode="json", exclude={"ptx", "log", "arch", "language"})
    if not compiled.ok:
        return StageResult(
            name=Stage.COMPILE, state=StageState.FAILED, message=compiled.message(), detail=detail
        ), compiled
    notes = render_grouped([d for d in compiled.diagnostics if d.severity != "error"])
    return StageResult(name=Stage.COMPILE, state=StageState.PASSED, message=notes, detail=detail), compiled


@_timed
def sass_stage(compiled: CompileResult, groups: list[TargetGroup], budget: procs.Budget | None = None) -> StageResult:
    """Opcode histograms per kernel, local-memory traffic, and which target groups the SASS holds."""
    try:
        opcodes = sass.full_opcodes(sass.disassemble(compiled.cubin, budget))
    except sass.SassTimeout as e:  # a module too large to disassemble in time is the kernel's problem
        return StageResult(name=Stage.SASS, state=StageState.FAILED, message=str(e))
    except sass.SassError as e:  # a tool failure, not the kernel's
        return StageResult(name=Stage.SASS, state=StageState.SKIPPED, message=f"nvdisasm unavailable: {e}")
    presence = sass.target_presence(groups, compiled.ptx, opcodes)
    kernels = sass.kernel_summaries(opcodes)
    notes = [
        f"{k.name}: local memory traffic {k.local_memory} (spills or a run-time-indexed array)"
        for k in kernels
        if k.local_memory
    ]
    missing = [g for g, p in presence.items() if not p.sass]
    if missing:
        notes.append(f"not in the SASS: {', '.join(missing)} (required at run time)")
    detail = {"kernels": [k.model_dump() for k in kernels], "targets": {g: p.model_dump() for g, p in presence.items()}}
    return StageResult(name=Stage.SASS, state=StageState.PASSED, message="\n".join(notes), detail=detail)


@_timed
def abi_stage(solution: Solution, compiled: CompileResult, task: Task, arch: Arch, plan: LaunchPlan) -> StageResult:
    """The launch spec against the module's .entry parameter lists and directives, then the static
    cross-checks of tensor maps against the descriptors and mbarrier byte counts (tools/crosscheck.py)."""
    entries = ptx_text.entries(compiled.ptx)
    problems = check_abi(solution.launch, entries, arch, launch_dims(task, arch.sm_count), compiled.kernels)
    if problems:
        return StageResult(name=Stage.ABI, state=StageState.FAILED, message="\n".join(problems),
                           detail={"problems": problems})  # fmt: skip
    checks = cross_check(compiled.ptx, plan, task, arch, solution.language)
    detail = {"entries": {n: [p.describe() for p in e.params] for n, e in entries.items()},
              "crosschecks": [c.model_dump() for c in checks]}  # fmt: skip
    mismatches = [c.message for c in checks if c.verdict == "mismatch"]
    if mismatches:
        return StageResult(name=Stage.ABI, state=StageState.FAILED, message="\n".join(mismatches),
                           detail={**detail, "problems": mismatches})  # fmt: skip
    return StageResult(name=Stage.ABI, state=StageState.PASSED, message=cross_check_summary(checks), detail=detail)


def build(static: Static, task: Task, arch: Arch, options: EvalOptions) -> Static:
    """compile → sass → abi on an extracted solution; the record gains the module when all three pass."""
    if static.failed or static.solution is None or static.plan is None:
        return static
    sol = static.solution
    budget = procs.Budget(options.static_timeout_s)  # compile and sass share it; abi only reads text
    stage, compiled = compile_stage(sol.language, sol.source, arch, budget.left())
    stages = [*static.stages, stage]
    if stage.state is StageState.FAILED:
        return static.model_copy(update={"stages": stages})
    stages.append(sass_stage(compiled, task.targets[arch], budget))  # skipped if nvdisasm is missing: our tool
    if stages[-1].state is not StageState.FAILED:
        stages.append(abi_stage(sol, compiled, task, arch, static.plan))
    if stages[-1].state is StageState.FAILED:
        return static.model_copy(update={"stages": stages})
    disassembled = next(s for s in stages if s.name is Stage.SASS)  # skipped without nvdisasm: no opcodes
    opcodes = ({k["name"]: k["opcodes"] for k in disassembled.detail["kernels"]}
               if disassembled.state is StageState.PASSED else None)  # fmt: skip
    module = CompiledModule(language=sol.language, ptx=compiled.ptx, cubin=compiled.cubin, plan=static.plan,
                            launch=sol.launch, kernels=compiled.kernels, opcodes=opcodes,
                            cuda_source=sol.source if sol.language == "cuda" else None)  # fmt: skip
    return static.model_copy(update={"stages": stages, "module": module})


# ---------------------------------------------------------------------------------------- verdicts


def evaluation(static: Static, task: Task, arch: Arch, gpu_reason: str = PENDING) -> Evaluation:
    """The Evaluation the static steps alone support: the failed stage's status, or `unverified` with the
    GPU stages skipped for `gpu_reason`."""
    failed = static.failed
    if failed is not None:
        return _finish(static, task, arch, FAILURE_STATUS[failed.name], f"{failed.name} failed: {failed.message}")
    outcome = skipped(gpu_reason)
    return _finish(static, task, arch, outcome.status, outcome.message, static.stages + outcome.stages)


def on_gpu(static: Static, task: Task, arch: Arch, options: EvalOptions, gpu: Gpu) -> Evaluation:
    """The GPU stages of the built module on `gpu`; skipped (with the reason) where it cannot run them."""
    if static.failed or static.module is None:
        return evaluation(static, task, arch)
    reason = gpu.unavailable_reason(arch)
    if reason:
        return evaluation(static, task, arch, reason)
    return gpu_stages(static, task, arch, options, gpu)


def gpu_stages(static: Static, task: Task, arch: Arch, options: EvalOptions, gpu: Gpu) -> Evaluation:
    """The GPU stages of a built module on a `gpu` the caller has found able to run `arch` (the repair loop asks
    once per run, a round trip to the scheduler on a Dask pool)."""
    outcome = gpu.evaluate(task, arch, static.module, options)
    return _finish(static, task, arch, outcome.status, outcome.message, static.stages + outcome.stages,
                   device=outcome.device, worker=outcome.worker, **outcome.metrics.evaluation_fields())  # fmt: skip


def _finish(
    static: Static, task: Task, arch: Arch, status: Status, message: str, stages: list[StageResult] | None = None,
    **metrics,
) -> Evaluation:  # fmt: skip
    return Evaluation(
        task=task.name,
        arch=arch,
        status=status,
        message=message,
        stages=stages if stages is not None else list(static.stages),
        solution_hash=static.solution.content_hash if static.solution else None,
        **metrics,
    )


def evaluate_answer(
    answer: str, task: Task, arch: Arch, options: EvalOptions | None = None, gpu: Gpu | None = None
) -> Evaluation:
    """Every stage of a model's Markdown answer; `gpu` None: static stages only."""
    return _evaluate(task, arch, options, gpu, answer=answer)


def evaluate_solution(
    solution: Solution, task: Task, arch: Arch, options: EvalOptions | None = None, gpu: Gpu | None = None
) -> Evaluation:
    return _evaluate(task, arch, options, gpu, solution=solution)


def _evaluate(task: Task, arch: Arch, options: EvalOptions | None, gpu: Gpu | None, **given) -> Evaluation:
    options = options or EvalOptions()
    static = build(extract(task, arch, **given), task, arch, options)
    return on_gpu(static, task, arch, options, gpu or Unavailable("no GPU service in this process"))
