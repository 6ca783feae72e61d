"""One attempt, stage by stage: extract → compile → sass → abi → run → check → time → profile.

The evaluator stops at the first failing stage; later stages are left out. GPU stages run in the GPU
service's worker process; without a GPU of the solution's arch they are `skipped` with the reason, and
the attempt is `unverified`, never `passed`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tools import ptx as ptx_text
from tools import sass
from tools.abi import check_abi
from tools.answer import AnswerError, extract_solution
from tools.compiler import CompileResult, compile_source
from tools.plan import LaunchPlan, SpecError, plan_launches
from tools.schema import Arch, Evaluation, Solution, Stage, StageResult, StageState, Status, Task

if TYPE_CHECKING:
    from tools.gpu.service import GpuService

GPU_STAGES = (Stage.RUN, Stage.CHECK, Stage.TIME, Stage.PROFILE)


@dataclass
class EvalOptions:
    """What to run and how hard."""

    trials: int = 3  # correctness trials, each on fresh inputs
    seed: int | None = None  # None: a fresh seed per attempt (recorded in the check stage)
    time: bool = True  # time against the baseline
    profile: bool = True  # count executed instructions with Nsight Compute
    memcheck: bool = False  # compute-sanitizer on the candidate's kernels
    timeout_s: float = 120.0  # wall-clock limit for the GPU stages of one attempt


@dataclass
class Artifacts:
    """What the static stages produced, for the GPU stages and for reports."""

    solution: Solution | None = None
    plan: LaunchPlan | None = None
    compiled: CompileResult | None = None


def evaluate_answer(
    answer: str, task: Task, arch: Arch, options: EvalOptions | None = None, gpu: GpuService | None = None
) -> Evaluation:
    """Evaluate a model's Markdown answer."""
    attempt = Attempt(task, arch, options)
    return attempt.static(answer=answer) or attempt.on_gpu(gpu)


def evaluate_solution(
    solution: Solution, task: Task, arch: Arch, options: EvalOptions | None = None, gpu: GpuService | None = None
) -> Evaluation:
    attempt = Attempt(task, arch, options)
    return attempt.static(solution=solution) or attempt.on_gpu(gpu)


class Attempt:
    """One attempt in two steps: `static()` on this machine, then `on_gpu()` on what it produced, so a
    caller that shows the steps apart (the repair loop's graph) compiles only once."""

    def __init__(self, task: Task, arch: Arch, options: EvalOptions | None = None):
        self.task, self.arch, self.options = task, arch, options or EvalOptions()
        self.stages: list[StageResult] = []
        self.art = Artifacts()

    def static(self, answer: str | None = None, solution: Solution | None = None) -> Evaluation | None:
        """extract → compile → sass → abi: the Evaluation of the first failing stage, or None when all passed."""
        steps: list[tuple[Stage, Status, Callable[[], StageResult]]] = [
            (Stage.EXTRACT, Status.EXTRACT_ERROR, lambda: self._extract(answer, solution)),
            (Stage.COMPILE, Status.COMPILE_ERROR, self._compile),
            (Stage.SASS, Status.COMPILE_ERROR, self._sass),
            (Stage.ABI, Status.ABI_ERROR, self._abi),
        ]
        for stage, failure_status, step in steps:
            start = time.perf_counter()
            result = step()
            result.seconds = time.perf_counter() - start
            self.stages.append(result)
            if result.state is StageState.FAILED:
                return self._finish(failure_status, f"{stage} failed: {result.message}")
        return None

    def _extract(self, answer: str | None, solution: Solution | None) -> StageResult:
        try:
            self.art.solution = solution or extract_solution(answer or "")
            self.art.plan = plan_launches(self.art.solution.launch, self.task, self.arch)
        except (AnswerError, SpecError) as e:
            return StageResult(name=Stage.EXTRACT, state=StageState.FAILED, message=str(e))
        sol = self.art.solution
        detail = {
            "language": sol.language,
            "source_lines": sol.source.count("\n") + 1,
            "launches": len(sol.launch.launches),
            "solution_hash": sol.content_hash,
        }
        return StageResult(name=Stage.EXTRACT, state=StageState.PASSED, detail=detail)

    def _compile(self) -> StageResult:
        sol = self.art.solution
        compiled = compile_source(sol.language, sol.source, self.arch, self.options.timeout_s)
        self.art.compiled = compiled
        detail = compiled.model_dump(mode="json", exclude={"ptx", "log", "arch", "language"})
        if not compiled.ok:
            return StageResult(name=Stage.COMPILE, state=StageState.FAILED, message=compiled.message(), detail=detail)
        warnings = [d.render() for d in compiled.diagnostics if d.severity == "warning"]
        return StageResult(name=Stage.COMPILE, state=StageState.PASSED, message="\n".join(warnings[:5]), detail=detail)

    def _sass(self) -> StageResult:
        try:
            opcodes = sass.full_opcodes(sass.disassemble(self.art.compiled.cubin))
        except Exception as e:  # a tool failure, not the kernel's
            return StageResult(name=Stage.SASS, state=StageState.SKIPPED, message=f"nvdisasm unavailable: {e}")
        presence = sass.target_presence(self.task.targets[self.arch], self.art.compiled.ptx, opcodes)
        kernels = sass.kernel_summaries(opcodes)
        local = {k.name: k.local_memory for k in kernels if k.local_memory}
        notes = [
            f"{name}: local memory traffic {ops} (spills or a run-time-indexed array)" for name, ops in local.items()
        ]
        missing = [g for g, p in presence.items() if not p.sass]
        if missing:
            notes.append(f"not in the SASS: {', '.join(missing)} (required at run time)")
        detail = {
            "kernels": [k.model_dump() for k in kernels],
            "targets": {g: p.model_dump() for g, p in presence.items()},
        }
        return StageResult(name=Stage.SASS, state=StageState.PASSED, message="\n".join(notes), detail=detail)

    def _abi(self) -> StageResult:
        entries = ptx_text.entries(self.art.compiled.ptx)
        problems = check_abi(self.art.solution.launch, entries, self.arch, self.task.dims, self.art.compiled.kernels)
        if problems:
            return StageResult(name=Stage.ABI, state=StageState.FAILED, message="\n".join(problems))
        detail = {"entries": {n: [p.describe() for p in e.params] for n, e in entries.items()}}
        return StageResult(name=Stage.ABI, state=StageState.PASSED, detail=detail)

    def on_gpu(self, gpu: GpuService | None) -> Evaluation:
        """run → check → time → profile on what static() produced; skipped (with the reason) without a GPU."""
        static = self.stages[:]
        reason = gpu.unavailable_reason(self.arch) if gpu else "no GPU service in this process"
        if reason:
            skipped = [StageResult(name=stage, state=StageState.SKIPPED, message=reason) for stage in GPU_STAGES]
            return self._finish(
                Status.UNVERIFIED, f"compiled and checked statically; GPU stages skipped: {reason}", static + skipped
            )
        outcome = gpu.evaluate(self.task, self.arch, self.art.compiled, self.art.plan, self.options)
        device = (gpu.device_info() or {}).get("name")
        return self._finish(outcome.status, outcome.message, static + outcome.stages, device=device, **outcome.metrics)

    def _finish(self, status: Status, message: str, stages: list[StageResult] | None = None, **metrics) -> Evaluation:
        sol = self.art.solution
        return Evaluation(
            task=self.task.name,
            arch=self.arch,
            status=status,
            message=message,
            stages=stages if stages is not None else self.stages[:],
            solution_hash=sol.content_hash if sol else None,
            **metrics,
        )
