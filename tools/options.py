"""How hard one attempt is evaluated: the one declaration of these settings and their defaults, read by the
pipeline, the GPU service, `python -m tools.evaluate` and the repair loop's `eval.*` settings."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tasks.paper_protocol import paper_check

PERF_BELOW_OUTSIDE_THE_LOOP = 1.0  # without a run's target: below the baseline
# Upper bounds, far past any real use, so that a typo is bad usage and not a crash later: the OS takes waits in
# milliseconds in 32 bits (a time-out over ~2.1e6 s overflowed it), and counts multiply GPU time.
MAX_WAIT_S = 86_400.0  # any time-out or time budget: a day
MAX_TRIALS = 100
MAX_TIMING_BLOCKS = 1000
MAX_RATE = 1e6  # TFLOP/s, speedups: a million times anything measured
MAX_SEED = 2**63 - 1  # seeds are 64-bit


class Profile(StrEnum):
    """The profile passes after a correct attempt is timed: the counts (the worker's CUPTI, or Nsight Compute where
    it cannot: tools/gpu/cupti_counts.py) and the perf pass (Nsight Compute)."""

    OFF = "off"
    COUNTS = "counts"  # executed target instructions (tools/gpu/profile.py)
    PERF = "perf"  # counts, then where the time goes beside the baseline library (tools/gpu/perf.py)
    AUTO = "auto"  # perf when the speedup is below perf_below, counts otherwise


class Criterion(StrEnum):
    """Which rule judges an output correct."""

    PTXBENCH = "ptxbench"  # ours: relative L2 against an fp32 reference, on spiky inputs (tools/gpu/check.py)
    PAPER = "paper"  # the paper's: elementwise atol = rtol = 1e-2 against the library's output, its input draws


class SpeedupFigure(StrEnum):
    """Which of the two timings every timed evaluation holds is its headline speedup."""

    PAIRED = "paired"  # both kernels in alternating blocks, one clock (tools/gpu/timing.py)
    PAPER = "paper"  # each timed alone, the paper's way: CUPTI kernel durations where available, else CUDA events


class EvalOptions(BaseModel):
    """What to run and how hard."""

    model_config = ConfigDict(extra="forbid")
    trials: int = Field(
        3, ge=1, le=MAX_TRIALS,
        description="Correctness trials, each on fresh inputs; under criterion=paper, unless given, the paper's count "
        "for the task's family (3 for the GEMM and forward, 1 on the stored tensors of the backward and fp8).",
    )  # fmt: skip
    seed: int | None = Field(
        None, ge=0, le=MAX_SEED, description="First trial's input seed; unset: a fresh one per attempt (recorded)."
    )
    criterion: Criterion = Field(
        Criterion.PTXBENCH,
        description="The correctness rule: ptxbench (ours: rel. L2 against fp32 on spiky inputs) or paper "
        "(elementwise atol = rtol = 1e-2 against the library's own output on the paper's input draws).",
    )
    time: bool = Field(True, description="Time the kernel against the baseline.")
    speedup: SpeedupFigure = Field(
        SpeedupFigure.PAIRED,
        description="The headline speedup, which scores, stops the loop and goes into reports: paired (both "
        "kernels interleaved, one clock) or paper (each timed alone); the other is kept beside it.",
    )
    profile: Profile = Field(
        Profile.AUTO,
        description="Profiling after a correct attempt: off; counts (executed target instructions: CUPTI in the GPU "
        "worker, Nsight Compute where CUPTI cannot); perf "
        "(counts, then where the time goes, beside the baseline library's kernels); auto (perf when the "
        "speedup is below perf_below, counts otherwise). true/false read as counts/off, if_correct as counts.",
    )
    perf_below: float | None = Field(
        None,
        gt=0,
        le=MAX_RATE,
        allow_inf_nan=False,
        description="profile=auto's bar; unset: the repair loop's target_speedup (1.0 outside the loop).",
    )
    memcheck: bool = Field(
        False, description="Run compute-sanitizer's memcheck on a correct attempt too (a fault always gets one)."
    )
    racecheck: bool = Field(False, description="On a mismatch, also run compute-sanitizer's shared-memory racecheck.")
    # Limits must be finite: a time-out of inf or nan reaches the OS as an overflow, not as "no limit".
    timeout_s: float | None = Field(
        None,
        gt=0,
        le=MAX_WAIT_S,
        allow_inf_nan=False,
        description="Wall-clock limit of each of the run and check stages (s); unset: from the task's FLOPs at "
        "floor_tflops (tools/gpu/limits.py).",
    )
    floor_tflops: float = Field(
        50.0,
        gt=0,
        le=MAX_RATE,
        allow_inf_nan=False,
        description="The slowest rate (TFLOP/s) the default run and check limits allow for a kernel.",
    )
    speedup_ceiling: float = Field(
        3.0,
        gt=0,
        le=MAX_RATE,
        allow_inf_nan=False,
        description="A speedup above this is re-measured and re-checked on fresh inputs before it is reported, "
        "and flagged if it stands.",
    )
    timing_blocks: int | None = Field(
        None, ge=3, le=MAX_TIMING_BLOCKS,
        description="Paired timing's alternating blocks; unset: tools/gpu/timing.py's default.",
    )  # fmt: skip
    timing_block_runs: int | None = Field(
        None, ge=1, le=MAX_TIMING_BLOCKS,
        description="Runs of each of the two per paired block; unset: tools/gpu/timing.py's default.",
    )  # fmt: skip
    static_timeout_s: float = Field(
        60.0, gt=0, le=MAX_WAIT_S, allow_inf_nan=False,
        description="Wall-clock limit for the static stages of one attempt (NVRTC, ptxas, nvdisasm together, s).",
    )  # fmt: skip

    @field_validator("profile", mode="before")
    @classmethod
    def _profile_aliases(cls, value: Any) -> Any:
        """true/false: what the setting meant before it had modes (records and scripts from then); if_correct:
        the RL trainers' word for counts (every profile pass runs only after a correct check)."""
        if isinstance(value, bool) or value in ("true", "false"):
            return Profile.COUNTS if value in (True, "true") else Profile.OFF
        return Profile.COUNTS if value == "if_correct" else value

    def for_family(self, family: str) -> EvalOptions:
        """These options as an attempt at a task of `family` runs them: under criterion=paper, the paper's trial count
        (tasks/paper_protocol.py) unless `trials` was given (a flag, a setting or a request's field: the fields set).
        Resolved before the options travel to a GPU, since a copy read back from JSON has every field set."""
        if self.criterion is Criterion.PAPER and "trials" not in self.model_fields_set:
            return self.model_copy(update={"trials": paper_check(family).trials})
        return self

    def wants_perf(self, speedup: float | None) -> bool:
        """Whether the perf pass follows the counts pass for an attempt timed at `speedup` (None: not timed)."""
        if self.profile is Profile.PERF:
            return True
        bar = self.perf_below if self.perf_below is not None else PERF_BELOW_OUTSIDE_THE_LOOP
        return self.profile is Profile.AUTO and speedup is not None and speedup < bar
