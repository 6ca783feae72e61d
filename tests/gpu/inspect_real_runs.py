"""`python -m tests.gpu.inspect_real_runs [--out DIR]`: the trajectory inspector on attempts measured on this GPU
(a script for the H200, not a test). The reference answers of the GEMM and forward-attention tasks go through
every stage (time and profile included) on the GPU, are written as one-turn run folders (with the feedback the
loop would give), and rendered as a site: OUT/site/index.html. OUT/inspect_gpu.json records, per run, the
evaluation and what its run page shows; a short table comes last. Each part runs in its own try, so one
failure still leaves the rest measured. Needs only the harness's dependencies plus jinja2."""

from __future__ import annotations

import argparse
import json
import os
import re
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.bench.inspect.site import build_site
from agent.loop.feedback import feedback_message
from agent.loop.records import Message, Turn
from agent.loop.store import RunFolder
from agent.loop.summary import summarize
from tasks import get_task
from tasks.schema import Arch
from tasks.solutions import reference_answer
from tools.answer import extract_solution
from tools.evaluation import Evaluation
from tools.gpu.service import GpuService
from tools.options import EvalOptions
from tools.pipeline import evaluate_answer

TASKS = ("gemm_n7168_k5120", "mha_fwd_d128")
# What a run page of a passed, profiled attempt must show (label → pattern in the page's HTML).
MARKS = {
    "executed_mix": r"executed, warp-level \(Nsight Compute\)",
    "hgmma_in_mix": r"<span>HGMMA",
    "speedup": r"speedup <b>\d+\.\d{3}×</b>",
    "tflops": r"TFLOP/s <b>\d+\.\d</b>",
    "time_stage": r'class="state-passed"[^>]*>time \d+\.\d\d s',
    "profile_stage": r'class="state-passed"[^>]*>profile \d+\.\d\d s',
}


def record_run(runs_dir: Path, task_name: str, gpu: GpuService) -> Evaluation:
    """The task's reference answer evaluated on `gpu`, written as a one-turn run folder; its evaluation."""
    task, arch = get_task(task_name), Arch.SM_90A
    answer = reference_answer(task.name, arch)
    assert answer is not None, f"no reference answer for {task.name}"
    started = datetime.now(UTC).isoformat(timespec="seconds")
    ev = evaluate_answer(answer, task, arch, EvalOptions(), gpu)
    feedback = feedback_message(ev, task, arch, turn=1, max_turns=1, target_speedup=1.0)
    turn = Turn(index=1, messages=[Message(role="user", content=f"{task.name} on {arch} (reference answer)")],
                response=answer, solution=extract_solution(answer), evaluation=ev, feedback=feedback,
                eval_seconds=sum(s.seconds for s in ev.stages), started_at=started)  # fmt: skip
    run_id = f"{task.name}-{arch}-reference"
    config = {"task": task.name, "arch": str(arch), "llm": {"name": "reference"}, "max_turns": 1,
              "policy": "reference", "created_at": started}  # fmt: skip
    folder = RunFolder.create(runs_dir, run_id, config)
    folder.append_turn(turn)
    folder.write_summary(summarize([turn], target_speedup=1.0, stop_reason="max_turns", run_id=run_id,
                                   task=task.name, arch=str(arch), policy="reference"))  # fmt: skip
    return ev


def page_marks(html: str) -> dict[str, bool]:
    return {name: bool(re.search(pattern, html)) for name, pattern in MARKS.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "inspect-gpu")))
    out = parser.parse_args().out
    runs_dir = out / "runs" / "h200"
    results: dict[str, Any] = {"started": datetime.now(UTC).isoformat(timespec="seconds"), "runs": {}}
    try:
        with GpuService() as gpu:
            for name in TASKS:
                try:
                    ev = record_run(runs_dir, name, gpu)
                    seconds = {str(s.name): round(s.seconds, 3) for s in ev.stages}
                    results["runs"][name] = {"status": str(ev.status), "speedup": ev.speedup, "tflops": ev.tflops,
                                             "target_counts": ev.target_counts, "device": ev.device,
                                             "stage_seconds": seconds}  # fmt: skip
                except Exception:
                    results["runs"][name] = {"error": traceback.format_exc(limit=3)}
    except Exception:
        results["gpu_error"] = traceback.format_exc(limit=3)
    try:
        site = build_site(runs_dir, out / "site")
        results["site"] = {"pages": site.pages, "index_seconds": round(site.index_seconds, 3),
                           "seconds": round(site.seconds, 3)}  # fmt: skip
        for name, run in results["runs"].items():
            page = out / "site" / "runs" / "h200" / f"{name}-sm_90a-reference.html"
            if "error" not in run and page.is_file():
                run["page"] = page_marks(page.read_text()) | {"bytes": page.stat().st_size}
    except Exception:
        results["site_error"] = traceback.format_exc(limit=3)
    out.mkdir(parents=True, exist_ok=True)
    (out / "inspect_gpu.json").write_text(json.dumps(results, indent=2))
    print(f"{'task':<20} {'status':<10} {'speedup':>8} {'page shows':<40}")
    for name, run in results["runs"].items():
        shown = run.get("page", {})
        missing = [k for k in MARKS if not shown.get(k)]
        verdict = "everything" if shown and not missing else f"missing: {', '.join(missing) or 'page'}"
        speedup = f"{run['speedup']:.3f}×" if run.get("speedup") else "-"
        print(f"{name:<20} {run.get('status', 'error'):<10} {speedup:>8} {verdict:<40}")
    for key in ("gpu_error", "site_error"):
        if key in results:
            print(f"{key}: {results[key].splitlines()[-1]}")
    print(f"results: {out / 'inspect_gpu.json'}; site: {out / 'site' / 'index.html'}")


if __name__ == "__main__":
    main()
