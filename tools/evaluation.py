"""The staged result of one attempt: its stages (Stage, StageState, StageResult) and the Evaluation with one Status and
the figures each stage measured; a shape-general task's Evaluation also holds one WorkloadResult per workload."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from tasks.schema import Arch
from tools.options import Criterion, SpeedupFigure
from tools.perf_report import PerfReport


class Stage(StrEnum):
    EXTRACT = "extract"
    COMPILE = "compile"
    SASS = "sass"
    ABI = "abi"
    RUN = "run"
    CHECK = "check"
    TIME = "time"
    PROFILE = "profile"
    PERF = "perf"
    MEMCHECK = "memcheck"
    RACECHECK = "racecheck"


class StageState(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


class Status(StrEnum):
    """One outcome per attempt. `unverified`: everything that runs without a GPU passed and the GPU
    stages were skipped (no GPU, or one of another arch): such an attempt is never `passed`."""

    EXTRACT_ERROR = "extract_error"
    COMPILE_ERROR = "compile_error"
    ABI_ERROR = "abi_error"
    LAUNCH_ERROR = "launch_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    MISMATCH = "mismatch"
    UNVERIFIED = "unverified"
    PASSED = "passed"


class StageResult(BaseModel):
    """One stage of an evaluation."""

    name: Stage
    state: StageState
    message: str = Field("", description="Model-readable: what went wrong and where, or why skipped.")
    detail: dict[str, Any] = Field(default_factory=dict, description="Structured data of the stage.")
    seconds: float = 0.0


class WorkloadResult(BaseModel):
    """One workload of a shape-general task's attempt: the member task's verdict and figures."""

    name: str = Field(description="The member task, e.g. 'gemm_n7168_k5120_m70'.")
    dims: dict[str, int]
    status: Status
    message: str = Field("", description="The member's own summary (its failure, or why its GPU stages skipped).")
    kernel_ms: float | None = None
    baseline_ms: float | None = None
    speedup: float | None = Field(
        None, description="The member's headline speedup (the attempt's speedup_figure); only for a correct workload."
    )
    tflops: float | None = None
    targets_met: bool | None = None
    device: str | None = None
    worker: str | None = None

    @property
    def correct(self) -> bool:
        return self.status is Status.PASSED


GENERAL_FIELDS = ("workloads", "speedup_geomean", "shown_workload")  # absent from a plain task's record
PAPER_FIGURE_FIELDS = ("speedup_figure", "other_speedup")  # absent from a record timed under the default (paired)


class Evaluation(BaseModel):
    """The staged result of one attempt; evaluators stop at the first failing stage."""

    task: str
    arch: Arch
    status: Status
    message: str = Field("", description="One-paragraph summary, for people and models.")
    stages: list[StageResult] = Field(default_factory=list)
    solution_hash: str | None = None
    device: str | None = Field(None, description="GPU name the GPU stages ran on.")
    worker: str | None = Field(
        None, description="The evaluation pool's Dask worker that ran the GPU stages (host-gpuN); None: a GPU here."
    )
    kernel_ms: float | None = Field(
        None, description="The candidate's run time (cold L2): paired, the median of its timed runs; paper, the mean "
        "of its trials' medians, timed alone.",
    )  # fmt: skip
    baseline_ms: float | None = Field(
        None, description="The baseline's, measured as kernel_ms is: paired, interleaved with the candidate's in the "
        "same window; paper, alone, right after.",
    )  # fmt: skip
    speedup: float | None = Field(
        None,
        description="The headline figure, eval.speedup's (speedup_figure; only for correct attempts): it scores, "
        "stops the loop and goes into reports. Paired (the default): the median over alternating blocks of "
        "(baseline median / candidate median) in the block (tools/gpu/timing.py). Paper: baseline_ms / kernel_ms, "
        "each timed alone by CUPTI kernel durations, or CUDA events where CUPTI cannot (the time stage's "
        "detail.paper.source). The other figure is other_speedup under paper, the time stage's detail.paper under "
        "paired.",
    )
    speedup_figure: SpeedupFigure | None = Field(
        None, description="Which figure speedup is: 'paper', or None (absent from the record): paired."
    )
    other_speedup: float | None = Field(
        None, description="Under speedup_figure 'paper': the paired figure, beside the headline; absent otherwise."
    )
    speedup_interval: list[float] | None = Field(
        None,
        description="The paired figure's order-statistic interval of the per-block ratios' median: the k-th lowest "
        "and k-th highest ratio, k the largest holding the true median ratio with probability ≥ 95% "
        "(tools/gpu/timing.py median_interval); with 6 blocks or fewer the lowest and highest. None under "
        "speedup_figure 'paper' (the paper's figure has no interval; timing_flags says when its trials disagree).",
    )
    timing_flags: list[str] = Field(
        default_factory=list,
        description="What makes the timing doubtful: 'noisy — …' (blocks that disagree, or a thermal or hardware "
        "slowdown, with the throttling seen), 'above the ceiling — …' (re-measured and re-checked, it stands).",
    )
    tflops: float | None = Field(None, description="The task's FLOPs / kernel_ms.")
    targets_met: bool | None = Field(None, description="All required target groups executed (profile).")
    target_counts: dict[str, int] | None = Field(
        None,
        description="Executed warp-level count per group, as target_counter counts it (tools/gpu/profile.py: "
        "ncu's, predicated-off executions included; tools/gpu/cupti_counts.py: CUPTI's counters).",
    )
    target_counter: str | None = Field(
        None, description="What counted the targets: 'cupti' (the worker's range profiler) or 'ncu' (Nsight Compute); "
        "None in records made before both existed (ncu)."
    )  # fmt: skip
    paper_tag: bool | None = Field(None, description="The paper's run-time arch-specific tag.")
    perf: PerfReport | None = Field(None, description="Where the time goes (the perf pass, eval.profile).")
    # A shape-general task's: the stages and figures above are those of `shown_workload` (its first failing workload,
    # else its slowest), its status the overall one, its speedup the minimum over the workloads.
    workloads: list[WorkloadResult] | None = Field(
        None, description="A shape-general task's per-workload results, in its workloads' order; None: one workload."
    )
    speedup_geomean: float | None = Field(
        None, description="A shape-general task's geometric mean of its workloads' speedups, beside the minimum."
    )
    shown_workload: str | None = Field(
        None, description="A shape-general task's workload whose stages this record holds: its first failing one, "
        "else its slowest (lowest speedup), the one the perf pass profiles.",
    )  # fmt: skip

    @model_serializer(mode="wrap")
    def _plain_record_unchanged(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A task at one workload is recorded exactly as before shape-general tasks existed, and one timed under the
        default figure (paired) as before eval.speedup existed."""
        data = handler(self)
        hidden = (GENERAL_FIELDS if self.workloads is None else ()) + (
            PAPER_FIGURE_FIELDS if self.speedup_figure is None else ()
        )
        for key in hidden:
            data.pop(key, None)
        return data

    @model_validator(mode="after")
    def _metrics_match_stages(self) -> Evaluation:
        """Each figure comes from the stage that measures it, so none can be reported without its evidence."""
        speedups = (self.speedup, self.speedup_interval, self.speedup_geomean, self.other_speedup)
        if speedups != (None,) * 4 and self.status is not Status.PASSED:
            raise ValueError(f"a speedup is only reported for a passed attempt, not {self.status}")
        needs = [
            (self.status is Status.PASSED, Stage.CHECK, "status 'passed'"),
            (self.kernel_ms is not None, Stage.TIME, "kernel_ms"),
            (bool(self.timing_flags), Stage.TIME, "timing_flags"),
            (self.targets_met is not None, Stage.PROFILE, "targets_met"),
            (self.perf is not None, Stage.PERF, "perf"),
        ]
        for present, stage, what in needs:
            result = self.stage(stage)
            if present and (result is None or result.state is not StageState.PASSED):
                raise ValueError(f"{what} needs a passed {stage} stage")
        return self

    @property
    def headline_figure(self) -> SpeedupFigure:
        """Which figure `speedup` is (records from before eval.speedup: paired)."""
        return self.speedup_figure or SpeedupFigure.PAIRED

    def headline_words(self) -> str:
        """What the headline speedup is, in words for people and models (the feedback, tools.evaluate's report)."""
        if self.headline_figure is SpeedupFigure.PAPER:
            time = self.stage(Stage.TIME)
            source = ((time.detail.get("paper") or {}) if time else {}).get("source")
            how = "CUPTI kernel durations" if source == "cupti" else "CUDA events"
            beside = f"; paired, interleaved at one clock: {self.other_speedup:.3f}×" if self.other_speedup else ""
            return f"the paper's figure: each timed alone, {how}{beside}"
        return "paired: interleaved with the baseline at one clock"

    def stage(self, name: Stage) -> StageResult | None:
        return next((s for s in self.stages if s.name is name), None)

    @property
    def criterion(self) -> Criterion | None:
        """The rule that judged the outputs: the check stage's detail names the paper's (eval.criterion=paper) and
        leaves ours unnamed, so that our records stay as they were; None where no check ran."""
        check = self.stage(Stage.CHECK)
        if check is None or check.state is StageState.SKIPPED:
            return None
        return Criterion(check.detail.get("criterion", Criterion.PTXBENCH))

    def failing_workloads(self) -> list[WorkloadResult]:
        """A shape-general attempt's workloads that did not pass (none for a plain task)."""
        return [w for w in self.workloads or [] if not w.correct]

    @property
    def correct(self) -> bool:
        return self.status is Status.PASSED

    def solved(self, target_speedup: float) -> bool:
        """The one rule for a solved attempt (the loop's turn outcome and feedback verdict, the RL environment's
        end): correct, every required target group executed by the profiler's count (present in the SASS is not
        enough: a wgmma in the code may never run), and a speedup of at least `target_speedup`."""
        return self.correct and self.targets_met is True and self.fast_enough(target_speedup)

    def fast_enough(self, target_speedup: float) -> bool:
        """A speedup was measured (a correct attempt's) and it reaches `target_speedup`."""
        return self.speedup is not None and self.speedup >= target_speedup
