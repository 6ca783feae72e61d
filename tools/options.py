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
    timeout_s: float = Field(120.0, gt=0, description="Wall-clock limit for the GPU stages of one attempt (s).")
