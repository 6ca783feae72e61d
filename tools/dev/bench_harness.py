"""`python -m tools.dev.bench_harness [--answer FILE] [--out DIR]`: what the harness costs and how far its
timings can be trusted, on the GEMM task with a GPU (a script, not a test; figures go into README).

- per-attempt wall time of each stage, first with a cold worker, then warm (median of --repeats);
- the cost of a worker restart;
- fidelity: the harness's timing of the candidate and of cuBLAS against triton.testing.do_bench in its
  cold-cache mode, alternating in one process; the spread of the harness's figures between repeats and
  between attempts."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from tasks import get_task
from tasks.schema import Arch
from tools.options import EvalOptions
from tools.pipeline import evaluate_answer
from tools.schema import Status

DEFAULT_ANSWER = Path(__file__).parents[1] / "tests" / "fixtures" / "gpu" / "triton_gemm_tma.md"


def stage_times(evaluation) -> dict[str, float]:
    return {str(s.name): round(s.seconds, 3) for s in evaluation.stages}


def fidelity(answer: str, task, arch: Arch, repeats: int = 3) -> dict:
    """The harness's timing (tools.gpu.timing.time_cold) against triton.testing.do_bench (cold cache,
    median, its default budgets), alternating in this process so that clock drift hits both alike."""
    import torch
    from triton.testing import do_bench

    from tasks.inputs import draw_inputs
    from tools.answer import extract_solution
    from tools.assemble import compile_source
    from tools.gpu import driver
    from tools.gpu.timing import L2Flush, time_cold
    from tools.plan import plan_launches

    solution = extract_solution(answer)
    plan = plan_launches(solution.launch, task, arch)
    compiled = compile_source(solution.language, solution.source, arch)
    buffers = dict(draw_inputs(task, task.dims, 0, "cuda"))
    for b in plan.buffers:
        buffers.setdefault(b.name, torch.empty(b.shape, dtype=torch.bfloat16, device="cuda"))
    launches = driver.prepare_launches(
        driver.load_module(compiled.cubin), plan, {n: t.data_ptr() for n, t in buffers.items()}
    )
    stream = torch.cuda.current_stream().cuda_stream
    a, b = buffers["A"], buffers["B"]
    functions = {"candidate": lambda: [launch.launch(stream) for launch in launches], "cuBLAS": lambda: a @ b.T}
    flush = L2Flush(torch.cuda.get_device_properties(0).L2_cache_size, torch.device("cuda"))
    out = {}
    for name, fn in functions.items():
        harness, bench = [], []
        for _ in range(repeats):
            harness.append(time_cold(fn, flush).ms)
            bench.append(do_bench(fn, return_mode="median"))
        out[name] = {
            "harness_ms": harness,
            "do_bench_ms": bench,
            "agreement": statistics.median(harness) / statistics.median(bench) - 1,
            "harness_spread": (max(harness) - min(harness)) / statistics.median(harness),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--answer", type=Path, default=DEFAULT_ANSWER)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from tools.gpu.service import GpuService

    task, arch = get_task("gemm"), Arch.SM_90A
    answer = args.answer.read_text()
    options = EvalOptions(seed=11, timeout_s=300)
    results: dict = {"answer": str(args.answer)}
    with GpuService() as gpu:
        start = time.perf_counter()
        cold = evaluate_answer(answer, task, arch, options, gpu)
        results["cold"] = {
            "wall_s": time.perf_counter() - start,
            "worker_start_s": gpu.last_start_s,
            "stages": stage_times(cold),
            "status": cold.status,
        }
        assert cold.status is Status.PASSED, cold.message
        warm = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            ev = evaluate_answer(answer, task, arch, options, gpu)
            warm.append((time.perf_counter() - start, ev))
        stages = {name: statistics.median(stage_times(ev)[name] for _, ev in warm) for name in stage_times(warm[0][1])}
        kernel = [ev.kernel_ms for _, ev in warm]
        to_check = sum(v for k, v in stages.items() if k in ("extract", "compile", "sass", "abi", "run", "check"))
        results["warm"] = {
            "wall_s_median": statistics.median(w for w, _ in warm),
            "stages_median_s": stages,
            "extract_to_time_s": to_check + stages.get("time", 0.0),
            "profile_s": stages.get("profile"),
            "kernel_ms": kernel,
            "baseline_ms": [ev.baseline_ms for _, ev in warm],
            "kernel_spread": (max(kernel) - min(kernel)) / statistics.median(kernel),
            "targets_met": [ev.targets_met for _, ev in warm],
        }
        results["restart_s"] = [round(gpu.restart(), 2) for _ in range(3)]
    results["fidelity"] = fidelity(answer, task, arch)
    text = json.dumps(results, indent=2, default=str)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_harness.json").write_text(text)
    print(text)
    w = results["warm"]
    print(
        f"\nwarm attempt: {w['wall_s_median']:.2f} s wall; extract→time {w['extract_to_time_s']:.2f} s; "
        f"profile {w['profile_s']:.2f} s; restart {statistics.median(results['restart_s']):.1f} s"
    )
    for name, f in results["fidelity"].items():
        print(
            f"{name}: harness {statistics.median(f['harness_ms']):.4f} ms vs do_bench "
            f"{statistics.median(f['do_bench_ms']):.4f} ms ({100 * f['agreement']:+.1f}%); "
            f"spread of the harness over {len(f['harness_ms'])} repeats {100 * f['harness_spread']:.1f}%"
        )


if __name__ == "__main__":
    main()
