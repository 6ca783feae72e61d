"""A multi-turn environment for RL trainers: the repair loop's conversation, one attempt per step. Its shape is
SkyRL's text environment (`init(prompt) -> (prompt, metadata)`, `step(action) -> {observations, reward, done,
metadata}`) with a gym-style `reset()` beside it; docs/rl.md shows the three lines that subclass SkyRL's
BaseTextEnv with it. The observation after an attempt is our feedback, exactly as the loop's model reads it;
the reward is tools/reward.py's score of that attempt; the episode ends when the attempt is solved as the loop
counts it (Evaluation.solved: correct, targets executed, speedup at least `target_speedup`) or after `max_turns`
attempts. The reward may credit targets merely present in the SASS when the profile did not run; ending the
episode does not."""

from __future__ import annotations

from typing import Any

from agent.loop.config import setting_default
from agent.loop.feedback import feedback_message
from agent.rl.dataset import messages, parse_label
from agent.rl.scoring import Attempt, Scorer
from tasks.catalog import get_task
from tasks.schema import Arch
from tools.options import EvalOptions


class KernelEnv:
    def __init__(self, task: str, arch: str, scorer: Scorer, *, max_turns: int = 4,
                 target_speedup: float = setting_default("target_speedup"), prompt: str = "full"):  # fmt: skip
        self.task, self.arch = get_task(task), Arch.resolve(arch)
        self.scorer = scorer
        self.max_turns, self.target_speedup, self.prompt = max_turns, target_speedup, prompt
        self.turn = 0

    @classmethod
    def from_extras(cls, extras: dict[str, Any], scorer: Scorer, **settings: Any) -> KernelEnv:
        """From a SkyRL dataset row's extras: the problem from reward_spec.ground_truth, the turn count from
        `max_turns` (where SkyRL's generator puts it), else extra_info.max_turns (where agent.rl_prompts wrote
        the count its prompt announces), else `settings`: so the prompt and the feedback count the same turns."""
        try:
            task, arch = parse_label(extras["reward_spec"]["ground_truth"])
        except (KeyError, TypeError):
            raise ValueError("a SkyRL row for ptxbench needs reward_spec.ground_truth (agent.rl_prompts "
                             "format=skyrl writes it)") from None  # fmt: skip
        info = extras.get("extra_info") if isinstance(extras.get("extra_info"), dict) else {}
        turns = extras.get("max_turns", info.get("max_turns"))
        if turns is not None:
            settings = settings | {"max_turns": int(turns)}
        return cls(task, arch, scorer, **settings)

    def reset(self) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """The first turn's system and task messages, as the loop sends them."""
        self.turn = 0
        prompt = messages(self.task, self.arch, trials=EvalOptions().trials, target_speedup=self.target_speedup,
                          max_turns=self.max_turns, prompt=self.prompt)  # fmt: skip
        return prompt, {"task": self.task.name, "arch": str(self.arch)}

    def init(self, prompt: list[dict[str, str]]) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """SkyRL's start: the dataset's prompt is kept as it is."""
        self.turn = 0
        return prompt, {"task": self.task.name, "arch": str(self.arch)}

    def step(self, action: str) -> dict[str, Any]:
        """Evaluate one answer; the next observation is its feedback (none after the last turn)."""
        self.turn += 1
        (scored,) = self.scorer.score([Attempt(self.task.name, str(self.arch), action)])
        evaluation, reward = scored.evaluation, scored.reward
        if evaluation is None or reward is None:
            return {"observations": [], "reward": 0.0, "done": True, "metadata": {"error": scored.error}}
        done = evaluation.solved(self.target_speedup) or self.turn >= self.max_turns
        feedback = feedback_message(evaluation, self.task, self.arch, turn=self.turn, max_turns=self.max_turns,
                                    target_speedup=self.target_speedup)  # fmt: skip
        return {
            "observations": [] if done else [{"role": "user", "content": feedback}],
            "reward": reward.score,
            "done": done,
            "metadata": {
                "turn": self.turn,
                "status": str(evaluation.status),
                "reward": reward.model_dump(mode="json"),
                "feedback": feedback,
            },
        }

    def close(self) -> None:
        """SkyRL calls it at the end of an episode; the scorer is the caller's to close."""
