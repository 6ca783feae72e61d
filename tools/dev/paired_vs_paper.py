"""`python -m tools.dev.paired_vs_paper [--tasks core] [--criterion ptxbench|paper] [--out FILE.md] [--device N]`:
the two speedup figures side by side for each task's reference answer on this GPU — paired (both kernels interleaved,
one clock: our headline by default) and the paper's (each timed alone: by CUPTI kernel durations, and by CUDA events)
— as one Markdown table, printed and written to --out. One evaluation per task under eval.speedup=paper measures all
three in one window (tools/gpu/timing.py), judged by --criterion. Why the figures differ on the H200 (the power cap:
alone, each kernel runs at the clock its own power allows): docs/performance.md."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tasks.catalog import get_task, resolve_names
from tasks.schema import Arch, UnknownName
from tasks.solutions import reference_answer
from tools.evaluation import Evaluation, Stage
from tools.options import Criterion, EvalOptions, SpeedupFigure

HEADER = (
    "| task | status | paired speedup [interval] | paper speedup (cupti) | paper speedup (events) "
    "| candidate ms: paired / cupti / events | baseline ms: paired / cupti / events |"
)


def row(task: str, ev: Evaluation | None) -> str:
    """One task's line: its reference answer's verdict and both figures (a dash where one was not measured)."""
    if ev is None:
        return f"| {task} | no reference answer on sm_90a | – | – | – | – | – |"
    detail = (ev.stage(Stage.TIME).detail if ev.stage(Stage.TIME) else {}) or {}
    paired, paper = detail.get("paired"), detail.get("paper")
    if not paired or not paper:
        return f"| {task} | {ev.status.value} | – | – | – | – | – |"
    events = detail.get("paper_events") or (paper if paper.get("source") != "cupti" else None)
    cupti = paper if paper.get("source") == "cupti" else None
    cells = [
        f"{paired['speedup']:.3f}× [{paired['low']:.3f}–{paired['high']:.3f}]",
        f"{cupti['speedup']:.3f}×" if cupti else f"– ({paper.get('cupti_unavailable') or 'not timed by CUPTI'})",
        f"{events['speedup']:.3f}×" if events else "–",
    ]
    for side, pair_key in (("kernel", "kernel_ms"), ("baseline", "baseline_ms")):
        ways = [paired[pair_key], *(t[side]["ms"] if t else None for t in (cupti, events))]
        cells.append(" / ".join(f"{ms:.4f}" if ms is not None else "–" for ms in ways))
    return f"| {task} | {ev.status.value} | " + " | ".join(cells) + " |"


def table(rows: list[str], criterion: Criterion, device: str | None) -> str:
    return "\n".join([
        f"Paired vs the paper's speedup, reference answers, criterion {criterion.value}, on {device or 'no GPU'}.",
        "",
        HEADER,
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
        *rows,
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.dev.paired_vs_paper", description=__doc__)
    parser.add_argument("--tasks", default="core", help="task names or groups, comma-separated [core]")
    parser.add_argument("--criterion", default=Criterion.PTXBENCH.value, choices=[c.value for c in Criterion])
    parser.add_argument("--out", type=Path, help="also write the table here")
    parser.add_argument("--device", type=int, default=0, help="GPU ordinal")
    args = parser.parse_args(argv)
    try:
        names = resolve_names(args.tasks.split(","))
    except UnknownName as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from tools.gpu.service import GpuService
    from tools.pipeline import evaluate_answer

    options = EvalOptions(speedup=SpeedupFigure.PAPER, criterion=Criterion(args.criterion))
    rows, device = [], None
    with GpuService(args.device) as gpu:
        for name in names:
            answer = reference_answer(name, Arch.SM_90A)
            ev = evaluate_answer(answer, get_task(name), Arch.SM_90A, options, gpu) if answer else None
            device = device or (ev.device if ev else None)
            rows.append(row(name, ev))
            print(rows[-1], file=sys.stderr, flush=True)
    text = table(rows, options.criterion, device)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
