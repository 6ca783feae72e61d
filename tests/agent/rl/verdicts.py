"""A GPU for adapter tests on a machine without one: each module gets the GPU verdict the test assigns to its
answer. The verdicts' stages and figures are those of attempts recorded in tests/fixtures/runs/replay (a
passed GEMM at 1.07× and at 0.5× with wgmma and TMA executed, a mismatch); the static stages in front are the
real ones (NVRTC, ptxas, nvdisasm), so what an adapter scores is what our harness returns for such verdicts."""

from __future__ import annotations

from pathlib import Path

from agent.loop.store import find_runs
from tasks.catalog import get_task
from tasks.schema import Arch, Task
from tests.gpu.kernels import answer
from tools.evaluation import Evaluation, Stage, StageResult, StageState, Status
from tools.gpu.base import CompiledModule, GpuOutcome
from tools.gpu.metrics import GpuMetrics
from tools.gpu.stages import GPU_STAGES
from tools.options import EvalOptions
from tools.pipeline import build, extract

REPLAY = Path(__file__).parents[2] / "fixtures" / "runs" / "replay"
TASK = get_task("gemm")


def recorded() -> list[Evaluation]:
    (folder,) = find_runs([REPLAY])
    return [t.evaluation for t in folder.trajectory().turns]


def outcome(evaluation: Evaluation) -> GpuOutcome:
    """What the GPU stages of a recorded attempt returned."""
    return GpuOutcome(
        status=evaluation.status, message=evaluation.message, device=evaluation.device,
        stages=[s for s in evaluation.stages if s.name in GPU_STAGES],
        metrics=GpuMetrics.of(evaluation),
    )  # fmt: skip


def _fast_slow_wrong() -> tuple[Evaluation, Evaluation, Evaluation]:
    evs = recorded()
    passed = sorted((e for e in evs if e.status is Status.PASSED), key=lambda e: -e.speedup)
    return passed[0], passed[-1], next(e for e in evs if e.status is Status.MISMATCH)


FAST, SLOW, WRONG = _fast_slow_wrong()
# answer → the recorded verdict its module gets (a compile error and a missing block need no GPU)
ANSWERS = {
    answer("correct"): FAST,
    answer("correct", shared_bytes=1024): SLOW,  # the same kernel, launched otherwise
    answer("wrong_layout"): WRONG,
    answer("correct").replace("threadIdx", "threadIdz", 1): None,  # NVRTC refuses it
    "No code this time.": None,
}


class VerdictGpu:
    def __init__(self) -> None:
        self.outcomes: dict[str, GpuOutcome] = {}
        for text, verdict in ANSWERS.items():
            module = build(extract(TASK, Arch.SM_90A, answer=text), TASK, Arch.SM_90A, EvalOptions()).module
            if verdict is not None:
                self.outcomes[_key(module)] = outcome(verdict)

    def unavailable_reason(self, arch: Arch) -> str | None:
        return None

    def evaluate(self, task: Task, arch: Arch, module: CompiledModule, options: EvalOptions) -> GpuOutcome:
        return self.outcomes[_key(module)].model_copy(deep=True)


class ProfileOffGpu:
    """Every module gets FAST's verdict with its profile skipped (as under eval.profile=off): correct and fast, its
    targets never counted."""

    def unavailable_reason(self, arch: Arch) -> str | None:
        return None

    def evaluate(self, task: Task, arch: Arch, module: CompiledModule, options: EvalOptions) -> GpuOutcome:
        skipped = StageResult(name=Stage.PROFILE, state=StageState.SKIPPED, message="eval.profile=off")
        verdict = outcome(FAST)
        stages = [skipped if s.name is Stage.PROFILE else s for s in verdict.stages]
        metrics = verdict.metrics.model_copy(update={"targets": None})
        return verdict.model_copy(update={"stages": stages, "metrics": metrics})


def _key(module: CompiledModule) -> str:
    return module.ptx + module.plan.model_dump_json()
