"""`ptxbench COMMAND …`: every PTXBench command under one name, e.g. `ptxbench solve task=attn_bwd arch=sm_100`,
`ptxbench bench tasks=core archs=sm_90a llm=reference`, `ptxbench evaluate --task gemm --arch sm_90a ANSWER.md`.
`ptxbench help` lists them; `ptxbench COMMAND help` prints one's settings. Each is the same command as the
`python -m MODULE` it names: the agent's take key=value settings, the harness's --flags. A harness command loads
nothing from agent/, so a GPU host without the agent extra runs it.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from dataclasses import dataclass

HELP_WORDS = ("help", "-h", "--help")


@dataclass(frozen=True)
class Command:
    module: str  # what `python -m` runs (a package's __main__ is its module)
    about: str  # one line for `ptxbench help`
    style: str = "settings"  # settings: key=value (help); flags: argparse (--help)


COMMANDS = {
    "solve": Command("agent.solve", "one repair-loop run: a model writes a kernel, the harness's feedback, repeat"),
    "bench": Command("agent.bench.__main__", "many runs (tasks × archs × modes × samples) at once, then a score table"),
    "report": Command("agent.report", "a Markdown report, CSV tables and plots of the runs under DIR…"),
    "replay": Command("agent.replay", "recorded attempts evaluated again, beside what was recorded"),
    "inspect": Command("agent.inspect", "a static site for reading runs in a browser, turn by turn"),
    "export_sft": Command("agent.export_sft", "supervised fine-tuning data from run folders, with a data card"),
    "export_traces": Command("agent.export_traces", "run folders' attempts as FlashInfer-Bench traces (a trace set)"),
    "mine_repairs": Command("agent.mine_repairs", "a teacher repairs the failed attempts of student runs"),
    "mine_notes": Command("agent.mine_notes", "repair notes from run folders, for feedback.notes="),
    "train_sft": Command("agent.train_sft", "LoRA fine-tuning on exported SFT data (the train extra)"),
    "synth_reasoning": Command("agent.synth_reasoning", "a model writes the reasoning of each exported example"),
    "rl_prompts": Command("agent.rl_prompts", "the prompt dataset an RL trainer samples from"),
    "graph": Command("agent.graph", "the repair loop's graph, as Mermaid"),
    "tasks": Command("tasks.__main__", "the task catalog: its groups, then the tasks GROUP|NAME … names", "flags"),
    "compile": Command("tools.compile", "compile a .ptx, .cu or answer: resources, SASS, targets", "flags"),
    "evaluate": Command("tools.evaluate", "one answer through every stage: a report, or JSON", "flags"),
    "serve": Command("tools.serve.__main__", "the harness as an HTTP service", "flags"),
    "mcp": Command("tools.mcp.__main__", "the harness as an MCP server (stdio or streamable HTTP)", "flags"),
    "dask_scheduler": Command("tools.gpu.dask_scheduler", "the evaluation pool's Dask scheduler", "flags"),
    "dask_worker": Command("tools.gpu.dask_worker", "a GPU host's Dask workers, one per GPU", "flags"),
}


def overview() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: ptxbench COMMAND [settings …]   (ptxbench COMMAND help: its settings)", ""]
    for title, flags in (("agent commands (key=value settings; the agent extra):", False),
                         ("harness commands (tasks/ and tools/ only; --flags):", True)):  # fmt: skip
        lines.append(title)
        lines += [f"  {name:<{width}}  {c.about}" for name, c in COMMANDS.items() if (c.style != "settings") == flags]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in HELP_WORDS:
        if len(argv) < 2:
            print(overview())
            return 0 if argv else 2
        argv = [argv[1], "help"]  # ptxbench help COMMAND
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        print(f"error: unknown command {name!r}{f'; did you mean {close[0]}?' if close else ''} "
              "(ptxbench help lists them)", file=sys.stderr)  # fmt: skip
        return 2
    return run(COMMANDS[name], name, rest)


def run(command: Command, name: str, argv: list[str]) -> int:
    """The command's own entry, as `python -m` would run it; its exit status."""
    asks_help = bool(argv) and argv[0] in HELP_WORDS
    module = importlib.import_module(command.module)
    try:
        if command.style == "flags" and asks_help:
            argv = ["--help"]
        return module.main(argv) or 0
    except SystemExit as e:  # argparse and click end with it, --help included
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
        return e.code if isinstance(e.code, int) else int(e.code is not None)


if __name__ == "__main__":
    sys.exit(main())
