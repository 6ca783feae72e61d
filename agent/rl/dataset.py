"""The prompt dataset RL trainers read: per task and arch, the system and task messages exactly as the repair
loop sends them at its first turn, and the label the reward adapters read back (JSON: task and arch), in the
row shape of each trainer:

- trl:      prompt (chat messages), task, arch — GRPOTrainer hands the extra columns to the reward function;
- verl:     data_source, prompt, ability, reward_model {style, ground_truth}, extra_info;
- openrlhf: prompt (chat messages: --input_key prompt --apply_chat_template), label (--label_key label);
- skyrl:    data_source, prompt, env_class, reward_spec {method, ground_truth}, extra_info.

Written as JSONL, or as parquet (verl's and SkyRL's usual form) when the file name ends in .parquet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from agent.loop.prompts import parse_prompt, system_prompt, task_prompt
from agent.loop.writes import write_inside
from tasks.catalog import get_task
from tasks.schema import Arch, Task

DATA_SOURCE = "ptxbench"
ENV_CLASS = "ptxbench"
Format = Literal["trl", "verl", "openrlhf", "skyrl"]


def label(task: Task, arch: Arch) -> str:
    return json.dumps({"task": task.name, "arch": str(arch)})


def parse_label(value: str | dict) -> tuple[str, str]:
    """(task, arch) from a label (its JSON text, or the dict a trainer may have parsed it into)."""
    try:
        named = json.loads(value) if isinstance(value, str) else value
        return str(named["task"]), str(named["arch"])
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f'a label must be JSON {{"task": …, "arch": …}}, got {str(value)[:80]!r} ({e})') from None


def messages(task: Task, arch: Arch, *, trials: int, target_speedup: float, max_turns: int,
             prompt: str = "full") -> list[dict[str, str]]:  # fmt: skip
    """The first turn's messages, as agent/loop renders them (`prompt`: the knowledge parts, as prompt=)."""
    user = task_prompt(task, arch, trials=trials, target_speedup=target_speedup, max_turns=max_turns)
    return [{"role": "system", "content": system_prompt(arch, parse_prompt(prompt))}, {"role": "user", "content": user}]


def row(form: Format, task: Task, arch: Arch, prompt: list[dict[str, str]], index: int,
        max_turns: int = 1) -> dict[str, Any]:  # fmt: skip
    truth = label(task, arch)
    info = {"task": task.name, "arch": str(arch), "index": index, "max_turns": max_turns}
    if form == "trl":
        return {"prompt": prompt, "task": task.name, "arch": str(arch)}
    if form == "verl":
        return {"data_source": DATA_SOURCE, "prompt": prompt, "ability": "gpu-kernels",
                "reward_model": {"style": "rule", "ground_truth": truth}, "extra_info": info}  # fmt: skip
    if form == "openrlhf":
        return {"prompt": prompt, "label": truth}
    return {"data_source": DATA_SOURCE, "prompt": prompt, "env_class": ENV_CLASS,
            "reward_spec": {"method": "rule", "ground_truth": truth}, "extra_info": info}  # fmt: skip


def build_rows(form: Format, tasks: list[str], archs: list[str], *, trials: int, target_speedup: float,
               max_turns: int, prompt: str = "full") -> list[dict[str, Any]]:  # fmt: skip
    rows = []
    for name in tasks:
        task = get_task(name)
        for arch in map(Arch.resolve, archs):
            sent = messages(task, arch, trials=trials, target_speedup=target_speedup, max_turns=max_turns,
                            prompt=prompt)  # fmt: skip
            rows.append(row(form, task, arch, sent, len(rows), max_turns))
    return rows


def write_rows(rows: list[dict[str, Any]], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".parquet":
        import pyarrow as pa  # datasets' dependency (the train extra); JSONL needs nothing
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), out)
        return
    write_inside(out, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
