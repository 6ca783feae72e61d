"""`python -m tools.dev.bench_harness [--out DIR] [--repeats N] [--blocks 30x3,6x15] [--parts …]`: what the
harness costs and how far its timings can be trusted, on an H200 (a script, not a test; its figures go into
docs/performance.md). Each part runs on its own, so one that fails leaves the others' figures; the
JSON goes to DIR/bench_harness.json and a short table is printed last.

- reproducibility: the GEMM and forward-attention reference answers, each evaluated N times in separate worker
  processes: the paired speedup's max/min − 1 (the target is ≤ 2%), and the paper's separate-medians figure
  from the same evaluations beside it; with several paired block shapes (--blocks, BLOCKSxRUNS each, the
  harness's default first), each evaluation round measures every shape in turn, so they share the GPU's state;
- cost: per-stage wall time of an attempt (the Triton TMA GEMM fixture) on the GEMM task with a warm worker
  (median of N), extract → time with paired timing included (the target is ≤ 1.5 s), the first attempt's,
  and a worker restart's;
- hang: a kernel that never finishes, on the GEMM task with the default limits: reported as a time-out (the
  target is < 15 s), and the next answer passes on the restarted worker;
- fidelity: the harness's cold-L2 timing of the Triton TMA GEMM fixture and of cuBLAS against
  triton.testing.do_bench, alternating in one process."""

from __future__ import annotations

import argparse
import json
import statistics
import time
import traceback
from pathlib import Path
from typing import Any

from tasks import get_task
from tasks.schema import Arch
from tasks.solutions import reference_answer
from tools.evaluation import Evaluation, Stage, Status
from tools.gpu.service import GpuService
from tools.gpu.timing import TimingOptions
from tools.options import EvalOptions
from tools.pipeline import evaluate_answer

ARCH = Arch.SM_90A
FIXTURE = Path(__file__).parents[2] / "tests" / "fixtures" / "gpu" / "triton_gemm_tma.md"
TO_TIME = ("extract", "compile", "sass", "abi", "run", "check", "time")
PARTS = ("reproducibility_gemm", "reproducibility_attn_fwd", "cost", "hang", "fidelity")
DEFAULT_SHAPE = (TimingOptions().blocks, TimingOptions().block_runs)


def stage_times(evaluation: Evaluation) -> dict[str, float]:
    return {str(s.name): round(s.seconds, 3) for s in evaluation.stages}


def wobble(values: list[float]) -> float:
    return max(values) / min(values) - 1


def answer_for(alias: str) -> str:
    text = reference_answer(get_task(alias).name, ARCH)
    if text is None:
        raise FileNotFoundError(f"no reference answer for {alias} on {ARCH}")
    return text


def block_shapes(text: str) -> list[tuple[int, int]]:
    """'30x3,6x15' → [(30, 3), (6, 15)]: paired blocks × runs of each per block."""
    shapes = []
    for part in text.split(","):
        blocks, _, runs = part.strip().partition("x")
        if not (blocks.isdigit() and runs.isdigit()):
            raise argparse.ArgumentTypeError(f"{part!r}: expected BLOCKSxRUNS, e.g. 30x3")
        shapes.append((int(blocks), int(runs)))
    return shapes


def reproducibility(alias: str, repeats: int, shapes: list[tuple[int, int]]) -> dict[str, Any]:
    """The same answer, the same inputs, a fresh worker process for each evaluation; per round, every block
    shape in turn."""
    task, answer = get_task(alias), answer_for(alias)
    runs: dict[str, list[dict[str, Any]]] = {f"{b}x{r}": [] for b, r in shapes}
    with GpuService() as gpu:
        for _ in range(repeats):
            for blocks, block_runs in shapes:
                gpu.restart()
                options = EvalOptions(seed=11, profile=False, timing_blocks=blocks, timing_block_runs=block_runs)
                runs[f"{blocks}x{block_runs}"].append(
                    measured(alias, evaluate_answer(answer, task, ARCH, options, gpu))
                )
    return {"task": task.name, "shapes": {name: summary(rs) for name, rs in runs.items()}}


def measured(alias: str, ev: Evaluation) -> dict[str, Any]:
    """What one evaluation's time stage measured."""
    if ev.status is not Status.PASSED:
        raise RuntimeError(f"{alias}: {ev.status}: {ev.message}")
    detail = ev.stage(Stage.TIME).detail
    return {
        "speedup": ev.speedup,
        "interval": ev.speedup_interval,
        "kernel_ms": ev.kernel_ms,
        "baseline_ms": ev.baseline_ms,
        "paper_speedup": detail["paper"]["speedup"],
        "paper_baseline_trials_ms": detail["paper"]["baseline"]["trial_medians"],
        "flags": ev.timing_flags,
        "gpu_state": detail["gpu_state"],
        "block_speedups": detail["paired"]["block_speedups"],
        "time_stage_s": ev.stage(Stage.TIME).seconds,
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    paired, paper = [r["speedup"] for r in runs], [r["paper_speedup"] for r in runs]
    return {"runs": runs, "paired": paired, "paper": paper, "paired_wobble": wobble(paired),
            "paper_wobble": wobble(paper)}  # fmt: skip


def cost(repeats: int) -> dict[str, Any]:
    """Per-attempt wall time on the GEMM task: the first attempt (worker start included), then warm ones; the
    Triton TMA GEMM fixture, as the figures from before paired timing were measured."""
    task, answer = get_task("gemm"), FIXTURE.read_text()
    options = EvalOptions(seed=11)
    with GpuService() as gpu:
        start = time.perf_counter()
        cold = evaluate_answer(answer, task, ARCH, options, gpu)
        first = {"wall_s": time.perf_counter() - start, "worker_start_s": gpu.last_start_s,
                 "stages": stage_times(cold), "status": cold.status}  # fmt: skip
        warm = []
        for _ in range(repeats):
            start = time.perf_counter()
            ev = evaluate_answer(answer, task, ARCH, options, gpu)
            warm.append((time.perf_counter() - start, ev))
        restarts = [round(gpu.restart(), 2) for _ in range(3)]
    stages = {name: statistics.median(stage_times(ev)[name] for _, ev in warm) for name in stage_times(warm[0][1])}
    return {
        "first": first,
        "warm_wall_s": statistics.median(w for w, _ in warm),
        "warm_stages_s": stages,
        "extract_to_time_s": sum(stages.get(name, 0.0) for name in TO_TIME),
        "statuses": [ev.status for _, ev in warm],
        "restart_s": restarts,
    }


def hang() -> dict[str, Any]:
    """A hanging kernel with the default limits, on a warm worker; then the reference answer."""
    from tests.gpu.kernels import answer as test_answer  # the GPU tests' broken variants (a dev script only)

    task = get_task("gemm")
    with GpuService() as gpu:
        warmup = evaluate_answer(answer_for("gemm"), task, ARCH, EvalOptions(seed=1, time=False, profile=False), gpu)
        start = time.perf_counter()
        hung = evaluate_answer(test_answer("hang"), task, ARCH, EvalOptions(seed=1), gpu)
        hang_s = time.perf_counter() - start
        start = time.perf_counter()
        after = evaluate_answer(answer_for("gemm"), task, ARCH, EvalOptions(seed=2, profile=False), gpu)
        return {"warm_status": warmup.status, "status": hung.status, "seconds": hang_s, "message": hung.message,
                "restarts": gpu.restarts, "next_status": after.status, "next_seconds": time.perf_counter() - start,
                "next_speedup": after.speedup}  # fmt: skip


def fidelity(repeats: int = 3) -> dict[str, Any]:
    """The harness's cold-L2 timing (tools.gpu.timing.time_cold) against triton.testing.do_bench (cold cache,
    median, its default budgets), alternating in this process so that clock drift hits both alike."""
    import torch
    from triton.testing import do_bench

    from tasks.inputs import draw_inputs
    from tools.answer import extract_solution
    from tools.assemble import compile_source
    from tools.gpu import driver
    from tools.gpu.timing import L2Flush, time_cold
    from tools.plan import plan_launches

    task = get_task("gemm")
    solution = extract_solution(FIXTURE.read_text())
    plan = plan_launches(solution.launch, task, ARCH)
    compiled = compile_source(solution.language, solution.source, ARCH)
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


def table(results: dict[str, Any]) -> str:
    """The figures docs/performance.md reports, one line each; a part that failed says so."""
    lines = []
    for alias in ("gemm", "attn_fwd"):
        result = results.get(f"reproducibility_{alias}", {})
        if "error" in result or not result:
            lines.append(f"reproducibility {alias}: FAILED ({result.get('error', 'not run')})")
            continue
        for shape, r in result["shapes"].items():
            verdict = "ok" if r["paired_wobble"] <= 0.02 else "OVER 2%"
            lines.append(f"reproducibility {alias} {shape} paired: {', '.join(f'{s:.3f}' for s in r['paired'])} → "
                         f"max/min − 1 {100 * r['paired_wobble']:.2f}% ({verdict})")  # fmt: skip
            lines.append(f"reproducibility {alias} {shape} paper's: {', '.join(f'{s:.3f}' for s in r['paper'])} → "
                         f"max/min − 1 {100 * r['paper_wobble']:.2f}%")  # fmt: skip
    c = results.get("cost", {})
    if "extract_to_time_s" in c:
        verdict = "ok" if c["extract_to_time_s"] <= 1.5 else "OVER 1.5 s"
        lines.append(f"warm attempt {c['warm_wall_s']:.2f} s; extract→time {c['extract_to_time_s']:.2f} s ({verdict}); "
                     f"time stage {c['warm_stages_s'].get('time', 0):.2f} s; profile "
                     f"{c['warm_stages_s'].get('profile', 0):.2f} s; first {c['first']['wall_s']:.1f} s; restart "
                     f"{statistics.median(c['restart_s']):.1f} s")  # fmt: skip
    else:
        lines.append(f"cost: FAILED ({c.get('error', 'not run')})")
    h = results.get("hang", {})
    if "seconds" in h:
        verdict = (
            "ok" if h["status"] == Status.TIMEOUT and h["seconds"] < 15 and h["next_status"] == Status.PASSED else "NO"
        )
        lines.append(f"hang: {h['status']} in {h['seconds']:.1f} s; next answer {h['next_status']} in "
                     f"{h['next_seconds']:.1f} s ({verdict})")  # fmt: skip
    else:
        lines.append(f"hang: FAILED ({h.get('error', 'not run')})")
    for name, f in (results.get("fidelity") or {}).items():
        if name in ("error", "traceback"):
            lines += [f"fidelity: FAILED ({f})"] if name == "error" else []
            continue
        lines.append(f"fidelity {name}: harness {statistics.median(f['harness_ms']):.4f} ms vs do_bench "
                     f"{statistics.median(f['do_bench_ms']):.4f} ms ({100 * f['agreement']:+.1f}%)")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="folder for bench_harness.json")
    parser.add_argument("--blocks", type=block_shapes, default=[DEFAULT_SHAPE],
                        help="paired block shapes to compare: BLOCKSxRUNS, comma-separated")  # fmt: skip
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    args = parser.parse_args()
    parts = {
        "reproducibility_gemm": lambda: reproducibility("gemm", args.repeats, args.blocks),
        "reproducibility_attn_fwd": lambda: reproducibility("attn_fwd", args.repeats, args.blocks),
        "cost": lambda: cost(args.repeats),
        "hang": hang,
        "fidelity": fidelity,
    }
    wanted = [p.strip() for p in args.parts.split(",") if p.strip()]
    if unknown := [p for p in wanted if p not in parts]:
        parser.error(f"unknown part {', '.join(unknown)}; parts: {', '.join(PARTS)}")
    results: dict[str, Any] = {}
    for name in wanted:
        part = parts[name]
        start = time.perf_counter()
        try:
            results[name] = part()
        except Exception as e:  # one part's failure is a figure too; the others still run
            results[name] = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        print(f"{name}: {time.perf_counter() - start:.0f} s", flush=True)
        if args.out:  # after every part, so a run cut short keeps what it measured
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "bench_harness.json").write_text(json.dumps(results, indent=2, default=str))
    print(json.dumps(results, indent=2, default=str))
    print("\n" + table(results))


if __name__ == "__main__":
    main()
