"""What the GPU stages measure, in typed groups — the time stage's figures, the profile's executed target counts, the
perf pass's report — and the one mapping between them and an Evaluation's flat fields (the record keeps its shape)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from tools.evaluation import Evaluation
from tools.options import SpeedupFigure
from tools.perf_report import PerfReport


class TimingMetrics(BaseModel):
    """The time stage's figures (tools/gpu/timing.py). Timed alone, when the baseline was unavailable: the kernel's
    time and TFLOP/s only."""

    kernel_ms: float = Field(description="The candidate's run time (cold L2), as the headline figure measures it.")
    baseline_ms: float | None = Field(None, description="The baseline's run time, in the same window.")
    speedup: float | None = Field(
        None, description="The headline: paired, the median of the per-block ratios; paper, baseline ms / kernel ms."
    )
    interval: list[float] | None = Field(
        None, description="The paired speedup's order-statistic interval [low, high]; None under paper."
    )
    figure: SpeedupFigure | None = Field(None, description="Which figure `speedup` is; None: paired (the default).")
    other_speedup: float | None = Field(None, description="Under paper: the paired figure beside it.")
    tflops: float | None = Field(None, description="The task's FLOPs / kernel_ms.")
    flags: list[str] = Field(default_factory=list, description="What makes the timing doubtful.")
    scratch_init_ms: float | None = Field(
        None, description="Resetting the scratch buffers before each run, timed alone (median); None: no scratch."
    )

    def without_speedup(self) -> TimingMetrics:
        """The figures of an attempt found wrong after it was timed: a speedup is only ever a correct one's."""
        return self.model_copy(update={"speedup": None, "interval": None, "other_speedup": None})


class TargetMetrics(BaseModel):
    """The profile stage's verdict on the task's target instruction groups (tools/gpu/profile.py)."""

    met: bool = Field(description="Every required group executed.")
    counts: dict[str, int] = Field(description="Executed warp-level instructions per group, as `counter` counts them.")
    paper_tag: bool = Field(description="The paper's run-time arch-specific tag: a paper_tag group executed.")
    counter: str = Field("ncu", description="'cupti' (tools/gpu/cupti_counts.py) or 'ncu' (tools/gpu/profile.py).")


class GpuMetrics(BaseModel):
    """Every figure the GPU stages of one attempt measured; a group is None when its stage did not measure it."""

    timing: TimingMetrics | None = None
    targets: TargetMetrics | None = None
    perf: PerfReport | None = None

    @property
    def speedup(self) -> float | None:
        return self.timing.speedup if self.timing else None

    def evaluation_fields(self) -> dict[str, Any]:
        """The Evaluation's fields these figures set."""
        fields: dict[str, Any] = {"perf": self.perf}
        if self.timing:
            t = self.timing
            fields |= {"kernel_ms": t.kernel_ms, "baseline_ms": t.baseline_ms, "speedup": t.speedup,
                       "speedup_interval": t.interval, "tflops": t.tflops, "timing_flags": t.flags,
                       "speedup_figure": t.figure, "other_speedup": t.other_speedup}  # fmt: skip
        if self.targets:
            fields |= {"targets_met": self.targets.met, "target_counts": self.targets.counts,
                       "paper_tag": self.targets.paper_tag, "target_counter": self.targets.counter}  # fmt: skip
        return {k: v for k, v in fields.items() if v is not None}

    @classmethod
    def of(cls, evaluation: Evaluation) -> GpuMetrics:
        """The figures a recorded Evaluation holds, as the GPU stages returned them (for replaying a record)."""
        e = evaluation
        timing = None
        if e.kernel_ms is not None:
            timing = TimingMetrics(kernel_ms=e.kernel_ms, baseline_ms=e.baseline_ms, speedup=e.speedup,
                                   interval=e.speedup_interval, tflops=e.tflops, flags=e.timing_flags,
                                   figure=e.speedup_figure, other_speedup=e.other_speedup)  # fmt: skip
        targets = None
        if e.targets_met is not None:
            targets = TargetMetrics(met=e.targets_met, counts=e.target_counts or {}, paper_tag=bool(e.paper_tag),
                                    counter=e.target_counter or "ncu")  # fmt: skip
        return cls(timing=timing, targets=targets, perf=e.perf)
