"""How hard one attempt is evaluated: the one declaration of these settings and their defaults, read by the
pipeline, the GPU service, `python -m tools.evaluate` and the repair loop's `eval.*` settings."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EvalOptions(BaseModel):
    """What to run and how hard."""

    model_config = ConfigDict(extra="forbid")
    trials: int = Field(3, ge=1, description="Correctness trials, each on fresh inputs.")
    seed: int | None = Field(None, description="First trial's input seed; unset: a fresh one per attempt (recorded).")
    time: bool = Field(True, description="Time the kernel against the baseline.")
    profile: bool = Field(True, description="Count executed target instructions with Nsight Compute.")
    memcheck: bool = Field(
        False, description="Run compute-sanitizer's memcheck on a correct attempt too (a fault always gets one)."
    )
    racecheck: bool = Field(False, description="On a mismatch, also run compute-sanitizer's shared-memory racecheck.")
    # Limits must be finite: a time-out of inf or nan reaches the OS as an overflow, not as "no limit".
    timeout_s: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Wall-clock limit of each of the run and check stages (s); unset: from the task's FLOPs at "
        "floor_tflops (tools/gpu/limits.py).",
    )
    floor_tflops: float = Field(
        50.0,
        gt=0,
        allow_inf_nan=False,
        description="The slowest rate (TFLOP/s) the default run and check limits allow for a kernel.",
    )
    speedup_ceiling: float = Field(
        3.0,
        gt=0,
        allow_inf_nan=False,
        description="A speedup above this is re-measured and re-checked on fresh inputs before it is reported, "
        "and flagged if it stands.",
    )
    static_timeout_s: float = Field(
        60.0, gt=0, allow_inf_nan=False,
        description="Wall-clock limit for the static stages of one attempt (NVRTC, ptxas, nvdisasm together, s).",
    )  # fmt: skip
