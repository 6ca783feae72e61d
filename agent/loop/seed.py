"""A run seeded with a recorded attempt (the `seed` setting): the recorded turn it starts from, checked
against the new run's task and arch, and what the new run's config.json keeps about it (`seed_attempt`),
so that what reads the new run (agent.export_sft) needs no other folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.cli import ConfigError
from agent.loop.config import SeedConfig
from agent.loop.conversation import Exchange
from agent.loop.feedback import outcome_summary
from agent.loop.records import RunConfig, Turn
from agent.loop.store import RunFolder
from tasks.schema import Arch, Task


@dataclass(frozen=True)
class Seed:
    folder: RunFolder
    config: RunConfig
    turn: Turn

    @property
    def system_prompt(self) -> str:
        return self.turn.messages[0].content

    @property
    def task_prompt(self) -> str:
        """As the recorded run sent it, so the seeded conversation is the one the attempt answered."""
        return self.turn.messages[1].content

    def history(self) -> list[Exchange]:
        """The recorded attempt and its feedback, as the seeded run's turn 0."""
        return [Exchange(turn=0, response=self.turn.response, feedback=self.turn.feedback or "",
                         outcome=outcome_summary(self.turn.evaluation, self.turn.index))]  # fmt: skip

    def record(self) -> dict[str, Any]:
        """config.json's `seed_attempt`: where the attempt came from, how it failed, which model wrote it."""
        return {
            "run_id": self.folder.run_id,
            "turn": self.turn.index,
            "status": self.turn.evaluation.status.value,
            "cut": bool(self.turn.cuts),  # its reply was kept only in part (agent.export_sft skips it)
            "policy": self.config.policy,
            "llm": self.config.llm.model_dump(mode="json", exclude_unset=True),
        }


def load_seed(seed: SeedConfig, runs_dir: Path, task: Task, arch: Arch) -> Seed:
    """The recorded turn `seed` names, or ConfigError saying why it cannot open a run of `task` on `arch`."""
    try:
        folder = RunFolder.open(runs_dir, seed.run)
        config = folder.config()
        turns = folder.turns()
    except (OSError, ValueError) as e:  # RunFolderError and pydantic's are ValueErrors
        raise ConfigError(f"seed.run: {e}") from None
    if (config.task, config.arch) != (task.name, str(arch)):
        raise ConfigError(f"seed.run: {folder.path} solved {config.task} on {config.arch}, not {task.name} on {arch}")
    if config.task_version != task.version:
        raise ConfigError(f"seed.run: {folder.path} solved definition v{config.task_version} of {task.name}, "
                          f"not today's v{task.version}")  # fmt: skip
    turn = next((t for t in turns if t.index == seed.turn), None)
    if turn is None:
        raise ConfigError(f"seed.turn: {folder.path} has no turn {seed.turn} ({len(turns)} turns recorded)")
    if [m.role for m in turn.messages[:2]] != ["system", "user"] or turn.feedback is None:
        raise ConfigError(f"seed.turn: turn {seed.turn} of {folder.path} does not record its prompts and feedback")
    return Seed(folder, config, turn)
