"""`python -m tools.evaluate --task T --arch A ANSWER.md [--json] [--OPTION VALUE …]`: one attempt through every
stage (extract → compile → sass → abi → run → check → time → profile → perf), with a report a person can read or
one JSON object. The options are tools/options.py's EvalOptions, one flag per field (`--trials 1`, `--no-time`,
`--profile perf`, `--static-timeout-s 30`). Exit 0 when the report was produced (whatever the kernel did), 2 on
bad usage."""

from __future__ import annotations

import argparse
import sys
from enum import Enum
from pathlib import Path

from pydantic import ValidationError

from tasks.catalog import get_task, renamed
from tasks.schema import Arch, UnknownName
from tools.compile import InputError, read_text
from tools.evaluation import Evaluation, Stage, StageState
from tools.gpu.service import GpuService
from tools.options import EvalOptions
from tools.pipeline import evaluate_answer

MARK = {StageState.PASSED: "ok  ", StageState.FAILED: "FAIL", StageState.SKIPPED: "skip"}


def render(ev: Evaluation) -> str:
    lines = [f"{ev.task} on {ev.arch}: {ev.status.upper()}" + (f" ({ev.device})" if ev.device else "")]
    for w in ev.workloads or []:  # a shape-general task's: a line per workload, then the shown one's stages
        kernel = f"{w.kernel_ms:.4f} ms" if w.kernel_ms is not None else "-"
        speedup = f"{w.speedup:.3f}×" if w.speedup is not None else "-"
        lines.append(f"  {w.name:<32} {w.status.value:<14} {kernel:>12} {speedup:>9}")
    if ev.workloads:
        lines.append(f"stages at {ev.shown_workload}:")
    for stage in ev.stages:
        lines.append(f"  [{MARK[stage.state]}] {stage.name:8s} {stage.seconds:7.2f} s")
        shown = None if stage.name is Stage.PERF else 14  # the perf table is read whole
        for text in stage.message.splitlines()[:shown]:
            lines.append(f"           {text}")
    if ev.speedup is not None:
        low, high = ev.speedup_interval or (ev.speedup, ev.speedup)
        shown = f"interval {low:.3f}–{high:.3f}×" if ev.speedup_interval else ev.headline_words()
        lines.append(
            f"speedup {ev.speedup:.3f}× ({shown}): {ev.kernel_ms:.4f} ms vs baseline "
            f"{ev.baseline_ms:.4f} ms, {ev.tflops:.0f} TFLOP/s"
            + (f"; the minimum over the workloads, geomean {ev.speedup_geomean:.3f}×" if ev.speedup_geomean else "")
        )
    lines += [f"timing: {flag}" for flag in ev.timing_flags]
    if ev.targets_met is not None:
        lines.append(f"targets met: {ev.targets_met}; executed: {ev.target_counts}; paper tag: {ev.paper_tag}")
    return "\n".join(lines)


def option_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per EvalOptions field, named after it, its description as help; a boolean has --no-FLAG too.
    Values reach EvalOptions as typed, so its validation (and its defaults, for a flag not given) hold."""
    for name, field in EvalOptions.model_fields.items():
        flag = "--" + name.replace("_", "-")
        default = field.get_default()
        shown = f" [{default.value if isinstance(default, Enum) else default}]" if default is not None else ""
        if field.annotation is bool:
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None,
                                help=f"{field.description}{shown}")  # fmt: skip
        else:
            parser.add_argument(flag, dest=name, metavar="VALUE", help=f"{field.description}{shown}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.evaluate", description=__doc__)
    parser.add_argument("answer", type=Path, help="a Markdown answer: one ```ptx or ```cuda block and one ```json")
    parser.add_argument("--task", required=True)
    parser.add_argument("--arch", required=True)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--device", type=int, default=0, help="GPU ordinal")
    option_flags(parser)
    args = parser.parse_args(argv)
    try:
        task, arch = get_task(args.task, files=True), Arch.resolve(args.arch)
        text = read_text(args.answer)
    except (UnknownName, InputError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if renamed(args.task):
        print(renamed(args.task), file=sys.stderr)
    given = {name: getattr(args, name) for name in EvalOptions.model_fields if getattr(args, name) is not None}
    try:
        options = EvalOptions.model_validate(given)
    except ValidationError as e:
        problems = "; ".join(f"--{str(p['loc'][0]).replace('_', '-')}: {p['msg']} (got {p['input']!r})"
                             for p in e.errors())  # fmt: skip
        print(f"error: invalid options: {problems}", file=sys.stderr)
        return 2
    with GpuService(args.device) as gpu:
        evaluation = evaluate_answer(text, task, arch, options, gpu)
    print(evaluation.model_dump_json(indent=2) if args.json else render(evaluation))
    return 0


if __name__ == "__main__":
    sys.exit(main())
