"""One scalar reward from one Evaluation, for RL trainers: the definition every adapter (agent/rl/) and the
HTTP service (tools/serve) use, versioned, with its components returned beside it.

    score = compiled · w_compiled
          + correct  · (w_correct + targets · w_targets + speed · w_speed)
    speed = min(speedup, speedup_cap) / speedup_cap          (0 without a timed speedup)

`compiled`: the module assembled and its launch spec matched its entries (the abi stage passed); `correct`:
the check passed on the GPU; `targets`: every required target group of the task's arch (wgmma + TMA on
sm_90a, tcgen05 + TMA on sm_100a) executed, by Nsight Compute's counts — or, when the profile did not run,
present in the SASS, which is weaker (present, not proven executed) and said so in `targets_source`. With
the default weights a compile-only answer earns 0.1, a correct one 0.5, correct with its targets executed
0.7, and matching the baseline's speed 0.85; 1.0 needs twice the baseline's speed. An unverified attempt
(no GPU of its arch) earns only its compile credit and says so.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tasks.catalog import get_task
from tasks.schema import Arch
from tools.evaluation import Evaluation, Stage, StageState, Status

REWARD_VERSION = 1


class RewardConfig(BaseModel):
    """The weights and the speed cap of the mapping; the defaults are REWARD_VERSION's."""

    model_config = ConfigDict(extra="forbid")
    compiled: float = Field(0.1, ge=0, allow_inf_nan=False, description="For an answer that compiles and matches.")
    correct: float = Field(0.4, ge=0, allow_inf_nan=False, description="For a correct one (on the GPU).")
    targets: float = Field(0.2, ge=0, allow_inf_nan=False, description="For a correct one with its targets.")
    speed: float = Field(0.3, ge=0, allow_inf_nan=False, description="Times the speed credit, for a correct one.")
    speedup_cap: float = Field(2.0, gt=0, allow_inf_nan=False, description="The speedup that earns all of `speed`.")


class Reward(BaseModel):
    """The scalar and what it is made of."""

    score: float
    reward_version: int = REWARD_VERSION
    status: Status
    compiled: bool
    correct: bool
    targets: bool
    targets_source: Literal["executed", "sass", "none"] = Field(
        description="executed: Nsight Compute counted them; sass: present in the SASS (the profile did not run); "
        "none: neither is known."
    )
    speedup: float | None
    speed: float = Field(description="min(speedup, speedup_cap) / speedup_cap; 0 without a speedup.")
    unverified: bool = Field(description="The GPU stages did not run (no GPU of the arch): correctness unknown.")
    config: RewardConfig


def reward(evaluation: Evaluation, config: RewardConfig | None = None) -> Reward:
    config = config or RewardConfig()
    abi = evaluation.stage(Stage.ABI)
    compiled = abi is not None and abi.state is StageState.PASSED
    correct = evaluation.status is Status.PASSED
    targets, source = _targets(evaluation)
    speedup = evaluation.speedup if correct else None
    speed = min(speedup, config.speedup_cap) / config.speedup_cap if speedup is not None else 0.0
    score = config.compiled * compiled
    if correct:
        score += config.correct + config.targets * targets + config.speed * speed
    return Reward(score=round(score, 6), status=evaluation.status, compiled=compiled, correct=correct,
                  targets=targets, targets_source=source, speedup=speedup, speed=round(speed, 6),
                  unverified=evaluation.status is Status.UNVERIFIED, config=config)  # fmt: skip


def _targets(evaluation: Evaluation) -> tuple[bool, Literal["executed", "sass", "none"]]:
    """Whether the required target groups ran (the profile) or, without it, appear in the SASS."""
    if evaluation.targets_met is not None:
        return evaluation.targets_met, "executed"
    sass = evaluation.stage(Stage.SASS)
    presence = (sass.detail.get("targets") if sass and sass.state is StageState.PASSED else None) or {}
    if not presence:
        return False, "none"
    required = [g.name for g in get_task(evaluation.task).targets[Arch(evaluation.arch)] if g.required]
    return all(presence.get(name, {}).get("sass", False) for name in required), "sass"
