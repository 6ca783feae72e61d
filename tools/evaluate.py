"""`python -m tools.evaluate --task T --arch A ANSWER.md [--json]`: one attempt through every stage
(extract → compile → sass → abi → run → check → time → profile → perf), with a report a person can read or one
JSON object. Exit 0 when the report was produced (whatever the kernel did), 2 on bad usage."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError

from tasks.catalog import get_task, renamed
from tasks.schema import Arch, UnknownName
from tools.answer import format_validation_error
from tools.compile import InputError, read_text
from tools.evaluation import Evaluation, Stage, StageState
from tools.gpu.service import GpuService
from tools.options import EvalOptions, Profile
from tools.pipeline import evaluate_answer

DEFAULTS = EvalOptions()
MARK = {StageState.PASSED: "ok  ", StageState.FAILED: "FAIL", StageState.SKIPPED: "skip"}


def render(ev: Evaluation) -> str:
    lines = [f"{ev.task} on {ev.arch}: {ev.status.upper()}" + (f" ({ev.device})" if ev.device else "")]
    for stage in ev.stages:
        lines.append(f"  [{MARK[stage.state]}] {stage.name:8s} {stage.seconds:7.2f} s")
        shown = None if stage.name is Stage.PERF else 14  # the perf table is read whole
        for text in stage.message.splitlines()[:shown]:
            lines.append(f"           {text}")
    if ev.speedup is not None:
        low, high = ev.speedup_interval or (ev.speedup, ev.speedup)
        lines.append(
            f"speedup {ev.speedup:.3f}× (interval {low:.3f}–{high:.3f}×): {ev.kernel_ms:.4f} ms vs baseline "
            f"{ev.baseline_ms:.4f} ms, {ev.tflops:.0f} TFLOP/s"
        )
    lines += [f"timing: {flag}" for flag in ev.timing_flags]
    if ev.targets_met is not None:
        lines.append(f"targets met: {ev.targets_met}; executed: {ev.target_counts}; paper tag: {ev.paper_tag}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.evaluate", description=__doc__)
    parser.add_argument("answer", type=Path, help="a Markdown answer: one ```ptx or ```cuda block and one ```json")
    parser.add_argument("--task", required=True)
    parser.add_argument("--arch", required=True)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--no-time", action="store_true", help="skip timing against the baseline")
    parser.add_argument("--profile", choices=[p.value for p in Profile], default=DEFAULTS.profile.value,
                        help=EvalOptions.model_fields["profile"].description)  # fmt: skip
    parser.add_argument("--no-profile", action="store_true", help="--profile off")
    parser.add_argument("--memcheck", action="store_true", help=EvalOptions.model_fields["memcheck"].description)
    parser.add_argument("--racecheck", action="store_true", help=EvalOptions.model_fields["racecheck"].description)
    fields = EvalOptions.model_fields
    parser.add_argument("--trials", type=int, default=DEFAULTS.trials, help=fields["trials"].description)
    parser.add_argument("--seed", type=int, default=DEFAULTS.seed, help=fields["seed"].description)
    parser.add_argument("--timeout", type=float, default=DEFAULTS.timeout_s, help=fields["timeout_s"].description)
    parser.add_argument("--static-timeout", type=float, default=DEFAULTS.static_timeout_s,
                        help=fields["static_timeout_s"].description)  # fmt: skip
    parser.add_argument("--device", type=int, default=0, help="GPU ordinal")
    args = parser.parse_args(argv)
    try:
        task, arch = get_task(args.task), Arch.resolve(args.arch)
        text = read_text(args.answer)
    except (UnknownName, InputError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if renamed(args.task):
        print(renamed(args.task), file=sys.stderr)
    try:
        options = EvalOptions(
            trials=args.trials,
            seed=args.seed,
            time=not args.no_time,
            profile=Profile.OFF if args.no_profile else args.profile,
            memcheck=args.memcheck,
            racecheck=args.racecheck,
            timeout_s=args.timeout,
            static_timeout_s=args.static_timeout,
        )
    except ValidationError as e:
        print("error: invalid options (--timeout, --static-timeout, --trials):\n" + format_validation_error(e),
              file=sys.stderr)  # fmt: skip
        return 2
    with GpuService(args.device) as gpu:
        evaluation = evaluate_answer(text, task, arch, options, gpu)
    print(evaluation.model_dump_json(indent=2) if args.json else render(evaluation))
    return 0


if __name__ == "__main__":
    sys.exit(main())
