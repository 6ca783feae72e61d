"""`python -m agent.dev.bench_pool --out DIR [--parts overhead,local,dask1,dask2] [--repeats N]`: the Dask evaluation
pool on a GPU machine against the local pool (a script, not a test; its figures go into docs/performance.md).
It starts our scheduler (tools.gpu.dask_scheduler) and `python -m tools.gpu.dask_worker` on 127.0.0.1. Each
part runs on its own and is merged into DIR/bench_pool.json as it ends (so parts run by separate commands on a warm
machine add up); a table of every part in the file comes last.

- overhead: the GEMM reference answer, compiled once, its run and check stages evaluated N times on GPU 0 through a
  GpuService here and N times through the Dask pool (one worker, GPU 0): the difference of the medians per
  evaluation (the goal is ≤ 0.2 s);
- local: `agent.bench tasks=core archs=sm_90a llm=reference samples=2` with eval.pool=local on GPU 0;
- dask1: the same bench through the Dask pool, one worker on GPU 0: every run correct with its targets executed, its
  speedups against local's (per task, whether the two benches' speedup intervals overlap), evaluations per hour;
- dask2: the same bench with a worker on each of GPUs 0 and 1: evaluations per hour, per GPU, and the ratio to
  dask1's (the goal is ≥ 1.8×).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from agent.loop.records import Turn
from agent.loop.writes import write_inside
from tasks import get_task
from tasks.schema import Arch
from tasks.solutions import reference_answer
from tests.dask_cluster import Cluster  # a developer's script: the tests' cluster of real processes
from tools.evaluation import Status
from tools.gpu.base import Gpu
from tools.gpu.devices import visible_count
from tools.gpu.service import GpuService
from tools.options import EvalOptions
from tools.pipeline import build, extract, on_gpu
from tools.pool.dask import DaskPool

ARCH = Arch.SM_90A
BENCH = ["tasks=core", "archs=sm_90a", "llm=reference", "samples=2", "concurrency=8"]
BENCH_TIMEOUT_S = 540  # under the GPU machine's 10 minutes a command
PARTS = ("overhead", "local", "dask1", "dask2")


def overhead(repeats: int) -> dict[str, Any]:
    """Wall time of the GPU stages (run + check) of one compiled answer, here and through the pool, warm."""
    task = get_task("gemm")
    options = EvalOptions(seed=11, trials=1, time=False, profile=False)
    static = build(extract(task, ARCH, answer=reference_answer(task.name, ARCH)), task, ARCH, options)

    def timed(gpu: Gpu) -> list[float]:
        first = on_gpu(static, task, ARCH, options, gpu)  # the worker's start and the baseline's, not measured
        if first.status is not Status.PASSED:
            raise RuntimeError(f"{first.status}: {first.message}")
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            on_gpu(static, task, ARCH, options, gpu)
            seconds.append(time.perf_counter() - start)
        return seconds

    with GpuService(device=0) as local:
        here = timed(local)
    with gpu_host("0") as address:
        pool = DaskPool(address)
        try:
            remote = timed(pool)
        finally:
            pool.close()
    return {"local_s": here, "dask_s": remote, "overhead_s": statistics.median(remote) - statistics.median(here)}


@contextmanager
def gpu_host(visible: str) -> Iterator[str]:
    """Our scheduler and tools.gpu.dask_worker on the GPUs `visible` (CUDA_VISIBLE_DEVICES); the address."""
    if len(visible.split(",")) > visible_count():
        raise RuntimeError(f"needs GPUs {visible}; this machine shows {visible_count()}")
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="bench-pool-")))
    try:
        cluster.wait_for(*cluster.start_host(visible))
        yield cluster.address
    finally:
        cluster.close()


def bench(out: Path, name: str, visible: str, pool: AbstractContextManager[str]) -> dict[str, Any]:
    """The bench as a user runs it, its wall time, and each run's one evaluation."""
    runs_dir = out / "runs"
    with pool as address:
        command = [sys.executable, "-m", "agent.bench", *BENCH, f"eval.pool={address}", f"runs_dir={runs_dir}",
                   f"bench_id={name}"]  # fmt: skip
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=visible)
        start = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S)
        wall = time.perf_counter() - start
    runs = []
    for trajectory in sorted((runs_dir / name).glob("*/trajectory.jsonl")):
        for line in trajectory.read_text().splitlines():
            ev = Turn.model_validate_json(line).evaluation
            runs.append({"run": trajectory.parent.name, "task": ev.task, "status": ev.status,
                         "targets_met": ev.targets_met, "speedup": ev.speedup, "interval": ev.speedup_interval,
                         "worker": ev.worker, "device": ev.device})  # fmt: skip
    gpus = len(visible.split(","))
    return {"code": done.returncode, "wall_s": wall, "gpus": gpus, "evaluations": len(runs),
            "per_hour": 3600 * len(runs) / wall, "per_hour_per_gpu": 3600 * len(runs) / wall / gpus, "runs": runs,
            "stdout_tail": done.stdout[-3000:], "stderr_tail": done.stderr[-3000:]}  # fmt: skip


def agreement(local: dict[str, Any], dask: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per task: both benches' median speedups, their ratio, and whether their speedup intervals overlap."""
    out = {}
    for task in sorted({r["task"] for r in local["runs"]}):
        here, there = _timed_runs(local, task), _timed_runs(dask, task)
        if not here or not there:
            out[task] = {"overlap": None}
            continue
        low = max(min(r["interval"][0] for r in here), min(r["interval"][0] for r in there))
        high = min(max(r["interval"][1] for r in here), max(r["interval"][1] for r in there))
        local_s, dask_s = (statistics.median(r["speedup"] for r in rs) for rs in (here, there))
        out[task] = {"local": local_s, "dask": dask_s, "ratio": dask_s / local_s, "overlap": low <= high}
    return out


def _timed_runs(bench: dict[str, Any], task: str) -> list[dict[str, Any]]:
    return [r for r in bench["runs"] if r["task"] == task and r["speedup"] and r["interval"]]


def table(results: dict[str, Any]) -> str:
    """The figures docs/performance.md reports, one line each; a part that failed or did not run says so."""
    lines = []
    o = results.get("overhead", {})
    if "overhead_s" in o:
        verdict = "ok" if o["overhead_s"] <= 0.2 else "OVER 0.2 s"
        here, there = statistics.median(o["local_s"]), statistics.median(o["dask_s"])
        lines.append(f"overhead per evaluation: {o['overhead_s']:+.3f} s ({verdict}); median local {here:.3f} s, "
                     f"dask {there:.3f} s")  # fmt: skip
    else:
        lines.append(f"overhead: {o.get('error', 'not run')}")
    for name in ("local", "dask1", "dask2"):
        b = results.get(name, {})
        if "runs" not in b:
            lines.append(f"{name}: {b.get('error', 'not run')}")
            continue
        good = sum(r["status"] == Status.PASSED and r["targets_met"] is True for r in b["runs"])
        lines.append(f"{name}: exit {b['code']}, {good}/{b['evaluations']} correct with targets executed, "
                     f"{b['wall_s']:.0f} s, {b['per_hour']:.0f} evaluations/h on {b['gpus']} GPU(s) "
                     f"({b['per_hour_per_gpu']:.0f}/h per GPU)")  # fmt: skip
    if "runs" in results.get("local", {}) and "runs" in results.get("dask1", {}):
        for task, a in agreement(results["local"], results["dask1"]).items():
            if a["overlap"] is None:
                lines.append(f"speedup {task}: no passed runs to compare")
                continue
            lines.append(f"speedup {task}: local {a['local']:.3f}×, dask {a['dask']:.3f}× (×{a['ratio']:.3f}); "
                         f"intervals {'overlap' if a['overlap'] else 'DO NOT overlap'}")  # fmt: skip
    if "runs" in results.get("dask1", {}) and "runs" in results.get("dask2", {}):
        ratio = results["dask2"]["per_hour"] / results["dask1"]["per_hour"]
        lines.append(f"throughput 2 GPUs / 1 GPU: {ratio:.2f}× ({'ok' if ratio >= 1.8 else 'UNDER 1.8×'})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for bench_pool.json and the benches' runs")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--repeats", type=int, default=20, help="evaluations per side for the overhead")
    args = parser.parse_args()
    parts = {
        "overhead": lambda: overhead(args.repeats),
        "local": lambda: bench(args.out, "local", "0", nullcontext("local")),
        "dask1": lambda: bench(args.out, "dask1", "0", gpu_host("0")),
        "dask2": lambda: bench(args.out, "dask2", "0,1", gpu_host("0,1")),
    }
    wanted = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in parts]
    if unknown:
        parser.error(f"unknown part {', '.join(unknown)}; parts: {', '.join(PARTS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "bench_pool.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    for name in wanted:
        start = time.perf_counter()
        try:
            results[name] = parts[name]()
        except Exception as e:  # one part's failure is a figure too; the others still run
            results[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        print(f"{name}: {time.perf_counter() - start:.0f} s", flush=True)
        write_inside(path, json.dumps(results, indent=2, default=str))  # after every part: a cut-short run keeps it
    print("\n" + table(results))


if __name__ == "__main__":
    main()
