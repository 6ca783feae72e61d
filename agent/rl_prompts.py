"""`python -m agent.rl_prompts out=FILE.jsonl|FILE.parquet [format=trl|verl|openrlhf|skyrl] [tasks=core]
[archs=sm_90a]`: the prompt dataset an RL trainer samples from, one row per task and arch (agent/rl/dataset.py
says each format's columns). Prints the file and its row count. Exit status 0 written; 2 usage error."""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from agent import cli
from tools.extras import needs, pip_command

with needs("agent", "python -m agent.rl_prompts"):
    from agent.bench.plan import resolve_archs, resolve_tasks
    from agent.loop.config import setting_default
    from agent.loop.prompts import parse_prompt
    from agent.rl.dataset import Format, build_rows, write_rows
    from tools.options import EvalOptions

SYNOPSIS = "python -m agent.rl_prompts out=FILE.jsonl|FILE.parquet [format=trl|verl|openrlhf|skyrl] [key=value …]"


class PromptSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    out: Path = Field(description="The dataset to write: .jsonl, or .parquet (needs pyarrow: the train extra).")
    format: Format = Field("trl", description="The trainer whose row shape to write.")
    tasks: str = Field("core", description="Task names, aliases or groups (core: the paper's five; all).")
    archs: str = Field("sm_90a", description="Archs, comma-separated (all: both).")
    max_turns: int = Field(1, ge=1, description="The turns the task prompt announces (1: single-shot RL).")
    target_speedup: float = Field(
        setting_default("target_speedup"), gt=0, description="The speedup the task prompt asks for."
    )
    prompt: str = Field(
        setting_default("prompt"), description="The knowledge pack in the system prompt, as agent.solve's prompt=."
    )


def usage() -> str:
    return cli.usage(PromptSettings, SYNOPSIS, __doc__)


def main(argv: list[str] | None = None) -> int:
    return cli.run(usage, _write, argv)


def _write(argv: list[str]) -> int:
    s = cli.read(PromptSettings, argv)
    if s.out.suffix not in (".jsonl", ".parquet"):
        raise cli.ConfigError(f"out={s.out}: name a .jsonl or a .parquet file")
    tasks, archs = resolve_tasks(s.tasks), resolve_archs(s.archs)
    try:
        parse_prompt(s.prompt)
    except ValueError as e:
        raise cli.ConfigError(f"prompt: {e}") from None
    rows = build_rows(s.format, tasks, archs, trials=EvalOptions().trials, target_speedup=s.target_speedup,
                      max_turns=s.max_turns, prompt=s.prompt)  # fmt: skip
    with cli.writing("out", s.out):
        try:
            write_rows(rows, s.out)
        except ImportError:
            raise cli.ConfigError(f"out=*.parquet needs pyarrow: {pip_command('train')}, or write .jsonl") from None
    print(f"{s.out}: {len(rows)} prompts ({s.format}; {len(tasks)} tasks × {len(archs)} archs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
