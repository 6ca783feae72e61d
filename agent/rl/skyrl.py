"""SkyRL's text environment over KernelEnv (read from skyrl-gym 0.4.0): `register()` once in the trainer's
entry point, then rows with `env_class: ptxbench` (agent.rl_prompts format=skyrl) make one per episode. It
scores through `default_scorer()`: the one `use()` set, or the service PTXBENCH_SERVE_URL names. The only
module here that imports trainer code, so it is imported only where skyrl-gym is installed."""

from __future__ import annotations

from typing import Any

from skyrl_gym.envs import register as skyrl_register
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.registration import registry

from agent.rl.dataset import ENV_CLASS
from agent.rl.env import KernelEnv
from agent.rl.scoring import default_scorer


class PTXBenchEnv(BaseTextEnv):
    """One repair episode: each step's action is an answer, its observation our feedback on it."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__()
        settings = {k: env_config[k] for k in ("max_turns", "target_speedup", "prompt") if k in (env_config or {})}
        self.env = KernelEnv.from_extras(extras or {}, default_scorer(), **settings)
        self.max_turns = self.env.max_turns

    def init(self, prompt: list[dict[str, str]]) -> tuple[list[dict[str, str]], dict[str, Any]]:
        return self.env.init(prompt)

    def step(self, action: str) -> BaseTextEnvStepOutput:
        out = self.env.step(action)
        self.turns = self.env.turn
        return BaseTextEnvStepOutput(**out)


def register() -> None:
    """Make `skyrl_gym.make("ptxbench", env_config=…, extras=…)` build a PTXBenchEnv (again: nothing; skyrl-gym
    refuses a second registration of a name, and a trainer may import its entry point in several workers)."""
    if ENV_CLASS not in registry:
        skyrl_register(id=ENV_CLASS, entry_point=f"{__name__}:PTXBenchEnv")
