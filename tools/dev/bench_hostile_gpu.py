"""`python -m tools.dev.bench_hostile_gpu [--out DIR]`: the hostile cases that need a GPU, measured on one
GpuService (a script for the lead's H200 run, not a test; tests/gpu/test_hostile_gpu.py asserts the same):

- scratch that does not fit in GPU memory: its status and message, then whether a correct answer passes on
  the same worker (no restart);
- a kernel that writes into its input: its status and message, then a correct answer on the same worker;
- kill -9 of a process whose GPU worker is running: whether the worker dies with it (parent-death signal).

Each part runs on its own (a failure is recorded, the rest go on); results go to DIR/hostile_gpu.json
(DIR: --out, else $OUT, else the current folder) and a short table is printed last."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from tasks import get_task
from tasks.schema import Arch
from tools.gpu.service import GpuService
from tools.options import EvalOptions
from tools.pipeline import build, evaluate_answer, extract
from tools.plan import BufferPlan

REPO = Path(__file__).resolve().parents[2]
TASK = get_task("gemm")
ARCH = Arch.SM_90A
QUICK = EvalOptions(trials=2, seed=7, time=False, profile=False, timeout_s=120)
# A process that starts a worker with a correct answer, says so, and waits to be killed.
HOLDER = """
import time
from tests.gpu.kernels import answer
from tools.dev.bench_hostile_gpu import ARCH, QUICK, TASK
from tools.gpu.service import GpuService
from tools.pipeline import evaluate_answer
print(evaluate_answer(answer("correct"), TASK, ARCH, QUICK, GpuService()).status.value, flush=True)
time.sleep(600)
"""


def _answer(variant: str) -> str:
    from tests.gpu.kernels import answer  # the GPU tests' answers (run from the repository root)

    return answer(variant)


def _worker_of(parent: int) -> int | None:
    """The GPU worker process `parent` started."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (proc / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and b"tools.gpu.worker" in cmdline:
            return int(proc.name)
    return None


def _then_correct(gpu: GpuService, restarts: int) -> dict:
    start = time.perf_counter()
    ev = evaluate_answer(_answer("correct"), TASK, ARCH, QUICK, gpu)
    return {"next_correct_status": ev.status.value, "next_correct_s": round(time.perf_counter() - start, 2),
            "worker_restarted": gpu.restarts != restarts}  # fmt: skip


def scratch_oom(gpu: GpuService) -> dict:
    static = build(extract(TASK, ARCH, answer=_answer("correct")), TASK, ARCH, QUICK)
    module = static.module
    module.plan.buffers.append(BufferPlan(name="huge", dtype="float32", shape=[50, 1 << 30], role="scratch",
                                          init="zero"))  # fmt: skip
    restarts, start = gpu.restarts, time.perf_counter()
    outcome = gpu.evaluate(TASK, ARCH, module, QUICK)
    result = {"status": outcome.status.value, "message": outcome.message[:400],
              "seconds": round(time.perf_counter() - start, 2)}  # fmt: skip
    return result | _then_correct(gpu, restarts)


def input_write(gpu: GpuService) -> dict:
    restarts, start = gpu.restarts, time.perf_counter()
    ev = evaluate_answer(_answer("writes_input"), TASK, ARCH, QUICK, gpu)
    result = {"status": ev.status.value, "message": ev.message[:400], "seconds": round(time.perf_counter() - start, 2)}
    return result | _then_correct(gpu, restarts)


def killed_holder() -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    try:
        status = holder.stdout.readline().strip()
        worker = _worker_of(holder.pid)
        if worker is None:
            return {"holder_status": status, "error": "no GPU worker found under the holder process"}
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and Path(f"/proc/{worker}").exists():
            time.sleep(0.1)
        survived = Path(f"/proc/{worker}").exists()
        if survived:  # leave no GPU worker behind, whatever the result
            os.kill(int(worker), signal.SIGKILL)
        return {"holder_status": status, "worker_died_with_holder": not survived}
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.dev.bench_hostile_gpu", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args(argv)
    results: dict[str, dict] = {}
    with GpuService() as gpu:
        for name, part in (("scratch_oom", lambda: scratch_oom(gpu)), ("input_write", lambda: input_write(gpu))):
            try:
                results[name] = part()
            except Exception:
                results[name] = {"error": traceback.format_exc()[-2000:]}
    try:
        results["kill_9"] = killed_holder()
    except Exception:
        results["kill_9"] = {"error": traceback.format_exc()[-2000:]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "hostile_gpu.json").write_text(json.dumps(results, indent=2))
    print(f"{'case':<12} {'status':<14} {'then correct':<13} {'restarted':<10} note")
    for name, r in results.items():
        note = "ERROR: " + r["error"].strip().splitlines()[-1] if "error" in r else r.get("message", "")[:70]
        if name == "kill_9" and "error" not in r:
            note = f"worker died with its parent: {r['worker_died_with_holder']}"
        print(f"{name:<12} {r.get('status', r.get('holder_status', '-')):<14} {r.get('next_correct_status', '-'):<13} "
              f"{r.get('worker_restarted', '-')!s:<10} {note}")  # fmt: skip
    print(f"\nresults: {args.out / 'hostile_gpu.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
