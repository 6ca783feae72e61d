"""`python -m agent.export_sft DIR… --format fixit|kernelgen --out FILE.jsonl [filters]`: supervised
fine-tuning data from run folders (runs, bench folders, runs dirs), in the chat format that OpenAI-style
fine-tuning and TRL's SFTTrainer read, with a data card beside it.

  FILE.jsonl               one example per line: {"messages": [...], "metadata": {...}}
  FILE.holdout.jsonl       the held-out tasks' examples (--holdout-tasks or --split-by-task)
  FILE.card.md, .card.json what is in each file, the filters, the command, what each filter removed

fixit: a failed attempt, its feedback and the passing attempt after it (agent/sft_examples.py says which
turns qualify); kernelgen: a passing attempt. Only the last assistant message carries the loss.
Exit status: 0 written (also when no example survived: the card says where they went); 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from agent.sft_card import build_card, write_card
from agent.sft_examples import KINDS, Example, collect
from agent.sft_filters import Filters, select
from agent.store import find_runs
from tasks.catalog import get_task
from tools.schema import UnknownName


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m agent.export_sft", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="run folders, or folders holding them")
    p.add_argument("--format", required=True, choices=KINDS, help="fixit pairs or kernel generation")
    p.add_argument("--out", required=True, type=Path, metavar="FILE.jsonl")
    quality = p.add_argument_group("quality of the trained answer (it always passed the check)")
    quality.add_argument("--require-targets", action="store_true", help="its required target instructions ran")
    quality.add_argument("--min-speedup", type=_positive(float), metavar="X", help="its speedup is at least X")
    balance = p.add_argument_group("duplicates, length and balance")
    balance.add_argument(
        "--dedup",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="drop repeated answers: the same source (comments and whitespace aside) and launch spec [on]",
    )
    balance.add_argument("--max-tokens", type=_positive(int), metavar="N", help="drop longer examples (tiktoken)")
    balance.add_argument("--max-per-task", type=_positive(int), metavar="N", help="keep at most N per task")
    balance.add_argument(
        "--max-per-error-class", type=_positive(int), metavar="N", help="fixit: keep at most N per failed status"
    )
    split = p.add_argument_group("split by task (writes FILE.holdout.jsonl)").add_mutually_exclusive_group()
    split.add_argument("--holdout-tasks", metavar="T,…", help="these tasks (names or aliases) are held out")
    split.add_argument("--split-by-task", type=_fraction, metavar="F", help="hold out this share of the tasks")
    p.add_argument("--seed", type=int, default=0, help="seeds the task split and the caps' draw [0]")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = parser()
    args = p.parse_args(argv)
    if args.out.suffix != ".jsonl":
        p.error(f"--out must name a .jsonl file, got {args.out}")
    if args.format == "kernelgen" and args.max_per_error_class is not None:
        p.error("--max-per-error-class applies to fixit pairs only (kernelgen examples have no failed attempt)")
    missing = [str(d) for d in args.dirs if not d.is_dir()]
    if missing:
        p.error(f"no such folder: {', '.join(missing)}")
    try:
        holdout = tuple(sorted({get_task(t.strip()).name for t in (args.holdout_tasks or "").split(",") if t.strip()}))
    except UnknownName as e:
        p.error(f"--holdout-tasks: {e}")
    folders = find_runs(args.dirs)
    if not folders:
        p.error(f"no run folders under {', '.join(map(str, args.dirs))}")
    filters = Filters(
        require_targets=args.require_targets,
        min_speedup=args.min_speedup,
        dedup=args.dedup,
        max_tokens=args.max_tokens,
        holdout_tasks=holdout,
        split_by_task=args.split_by_task,
        max_per_task=args.max_per_task,
        max_per_error_class=args.max_per_error_class,
        seed=args.seed,
    )
    candidates, skipped = collect(folders, args.format)
    selection = select(candidates, filters)
    stem = args.out.with_suffix("")
    paths = {"train": args.out}
    if filters.split:
        paths["holdout"] = stem.with_name(stem.name + ".holdout.jsonl")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(paths["train"], selection.train)
    if "holdout" in paths:
        write_jsonl(paths["holdout"], selection.holdout)
    command = shlex.join(["python", "-m", "agent.export_sft", *argv])
    card = build_card(args.format, selection, filters, paths, command, len(folders), skipped)
    _, card_md = write_card(card, stem)
    for s in skipped:
        print(f"warning: skipped {s}", file=sys.stderr)
    written = ", ".join(f"{card['files'][name]['examples']} in {path}" for name, path in paths.items())
    print(f"{args.format}: {len(candidates)} candidates from {len(folders)} runs → {written}")
    print(f"data card: {card_md}")
    return 0


def write_jsonl(path: Path, examples: list[Example]) -> None:
    with open(path, "w") as f:
        for e in examples:
            f.write(json.dumps(e.line(), ensure_ascii=False) + "\n")


def _positive(kind: type[int] | type[float]) -> Callable[[str], int | float]:
    def parse(text: str) -> int | float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its message
    return parse


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), got {text}")
    return value


if __name__ == "__main__":
    sys.exit(main())
