"""`python -m tools.dev.bench_feedback_gpu [--out DIR]`: what the feedback tells a model about a broken kernel, on
one GpuService of a Hopper GPU (a script for the lead's H200 run; tests/gpu/test_feedback_gpu.py asserts the same):

- ptx_oob: an out-of-bounds store in a hand-written PTX kernel — its status, the memcheck finding (file, line, the
  quoted line, block, thread, where the address lies) and the seconds the located fault cost;
- cuda_oob: the same store in a CUDA answer — the CUDA line;
- race_rerun / layout_rerun: a GEMM without its barriers and one reading B in the wrong layout — the re-run's
  verdict (likely race or deterministic) and the seconds it added;
- racecheck: a small shared-memory race with eval.racecheck=true — the two lines racecheck names;
- then_correct: a correct answer on the same service, after all of the above.

Each part runs on its own (a failure is recorded, the rest go on); results go to DIR/feedback_gpu.json (DIR:
--out, else $OUT, else the current folder), written after every part, and a short table is printed last."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from tasks import get_task
from tasks.schema import Arch
from tools.evaluation import Evaluation, Stage
from tools.gpu.service import GpuService
from tools.options import EvalOptions
from tools.pipeline import evaluate_answer

TASK = get_task("gemm")
QUICK = EvalOptions(trials=1, seed=11, time=False, profile=False, timeout_s=120)


def _evaluate(gpu: GpuService, text: str, options: EvalOptions = QUICK) -> tuple[Evaluation, float]:
    start = time.perf_counter()
    ev = evaluate_answer(text, TASK, Arch.SM_90A, options, gpu)
    return ev, round(time.perf_counter() - start, 2)


def _found(ev: Evaluation, stage: Stage) -> dict:
    """The stage's state, message head and first finding."""
    result = ev.stage(stage)
    if result is None:
        return {f"{stage}": "did not run"}
    first = (result.detail.get("findings") or [{}])[0]
    keep = ("kind", "kernel", "offset", "file", "line", "quoted", "block", "thread", "placed", "other", "hazards")
    return {f"{stage}": result.state.value, f"{stage}_seconds": round(result.seconds, 2),
            f"{stage}_message": result.message[:600], "finding": {k: first.get(k) for k in keep}}  # fmt: skip


def oob(gpu: GpuService, language: str) -> dict:
    from tests.gpu.kernels import OOB_CUDA, OOB_PTX, elementwise_answer  # the GPU tests' kernels (run from the repo)

    ev, seconds = _evaluate(gpu, elementwise_answer(language, OOB_PTX if language == "ptx" else OOB_CUDA,
                                                    "oob_store"))  # fmt: skip
    return {"status": ev.status.value, "seconds": seconds, "message": ev.message[-600:]} | _found(ev, Stage.MEMCHECK)


def rerun(gpu: GpuService, variant: str) -> dict:
    from tests.gpu.kernels import answer

    ev, seconds = _evaluate(gpu, answer(variant))
    check = ev.stage(Stage.CHECK)
    detail = (check.detail if check else {}).get("rerun", {})
    line = next((x for x in ev.message.splitlines() if x.startswith("Re-run") or x.startswith("Not re-run")), "")
    return {"status": ev.status.value, "seconds": seconds, "likely_race": detail.get("likely_race"),
            "outputs": detail.get("outputs"), "message": line[:400]}  # fmt: skip


def racecheck(gpu: GpuService) -> dict:
    from tests.gpu.kernels import RACY_PTX, elementwise_answer

    ev, seconds = _evaluate(gpu, elementwise_answer("ptx", RACY_PTX, "racy"),
                            QUICK.model_copy(update={"racecheck": True}))  # fmt: skip
    return {"status": ev.status.value, "seconds": seconds} | _found(ev, Stage.RACECHECK)


def then_correct(gpu: GpuService) -> dict:
    from tests.gpu.kernels import answer

    ev, seconds = _evaluate(gpu, answer("correct"))
    return {"status": ev.status.value, "seconds": seconds, "restarts_so_far": gpu.restarts}


def _note(r: dict) -> str:
    if "error" in r:
        return "ERROR: " + r["error"].strip().splitlines()[-1][:90]
    found = r.get("finding") or {}
    if found.get("line") is not None:
        where = f"{found.get('file')}:{found.get('line')}" + "".join(
            f" {key} {found[key]}" for key in ("block", "thread") if found.get(key) is not None
        )  # racecheck's reports name no thread
        other = (found.get("other") or {}).get("line")
        return where + (f" and line {other}" if other else "") + (f"; {found['placed']}" if found.get("placed") else "")
    if "likely_race" in r:
        return f"likely race: {r['likely_race']}"
    return str(r.get("message", ""))[:90]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.dev.bench_feedback_gpu", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "feedback_gpu.json"
    results: dict[str, dict] = {}
    with GpuService() as gpu:
        parts: dict[str, Callable[[], dict]] = {
            "ptx_oob": lambda: oob(gpu, "ptx"),
            "cuda_oob": lambda: oob(gpu, "cuda"),
            "race_rerun": lambda: rerun(gpu, "race"),
            "layout_rerun": lambda: rerun(gpu, "wrong_layout"),
            "racecheck": lambda: racecheck(gpu),
            "then_correct": lambda: then_correct(gpu),
        }
        for name, part in parts.items():
            try:
                results[name] = part()
            except Exception:
                results[name] = {"error": traceback.format_exc()[-2000:]}
            path.write_text(json.dumps(results, indent=2))
    print(f"{'part':<13} {'status':<14} {'seconds':>8}  located / verdict")
    for name, r in results.items():
        print(f"{name:<13} {r.get('status', '-'):<14} {r.get('seconds', '-')!s:>8}  {_note(r)}")
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
