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
    memcheck: bool = Field(False, description="Run compute-sanitizer's memcheck on the candidate's kernels.")
    # Limits must be finite: a time-out of inf or nan reaches the OS as an overflow, not as "no limit".
    timeout_s: float = Field(
        120.0, gt=0, allow_inf_nan=False, description="Wall-clock limit for the GPU stages of one attempt (s)."
    )
    static_timeout_s: float = Field(
        60.0, gt=0, allow_inf_nan=False,
        description="Wall-clock limit for the static stages of one attempt (NVRTC, ptxas, nvdisasm together, s).",
    )  # fmt: skip
