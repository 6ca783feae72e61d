"""Time candidate configs of the solutions' Triton kernels on the GPU against the baselines, at the tasks'
full shapes, and check the generated answers themselves:

    PYTHONPATH=. python -m tasks.solutions.tune_on_gpu [--tasks T ...] [--quick] [--no-answers] [--out F]
    python -m tasks.solutions.tune_on_gpu --dry-run      # no GPU: compile every candidate, list resources

For each task: draw inputs (seeded; the backward's O and LSE come from the cuDNN forward, Delta =
rowsum(dO∘O)), time the baseline, then for each candidate config compile the kernels exactly as
generate.py does (`triton.compile(ASTSource(...))`, same signature) and launch those binaries. Each result
is checked against an fp32 reference on a subset (a few (batch, head) pairs; GEMM rows from the first,
last and random tiles) by ‖out − ref‖₂/‖ref‖₂ ≤ 1e-2, after poisoning the outputs with NaN and checking
that every element was written. Timing: triton.testing.do_bench, median, L2 flushed before each run.
With answers on (default), the committed tasks/solutions/sm_90a/<task>.md is also launched as the
harness would (raw_launch: its PTX, its LaunchSpec through tools.plan, driver tensor maps) and checked
and timed the same way. One failing config is reported and the rest go on.

Prints a table, paste-ready config rows for generate.py, and writes JSON to --out (default
$OUT/tune.json, else ./tune.json). Imports torch, triton, numpy and this repo only (whose tools/ need
pydantic: on the GPU image, carry its wheels). Expected run time on an H200: 2-4 minutes, most of it
compiling (--quick: about half).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from typing import Any

from tasks.catalog import CORE, get_task
from tasks.solutions.kernels.attention_bwd import AttnBwdConfig
from tasks.solutions.kernels.attention_fwd import AttnFwdConfig
from tasks.solutions.kernels.gemm import GemmConfig
from tools.expr import evaluate
from tools.schema import Arch, Task

ARCH = Arch.SM_90A
TOLERANCE = 1e-2

# Candidates per task family; the generator's table entry is always tried first (see `candidates`).
GEMM_CANDIDATES = [
    GemmConfig(128, 256, 64, 8, 8, 4, persistent=True, epilogue_split=True),
    GemmConfig(128, 256, 64, 8, 8, 3, persistent=True, epilogue_split=False),
    GemmConfig(128, 256, 64, 8, 8, 3, persistent=False),
    GemmConfig(256, 128, 64, 8, 8, 4, persistent=True, epilogue_split=True),
    GemmConfig(128, 256, 64, 16, 8, 4, persistent=True, epilogue_split=True),
    GemmConfig(128, 128, 64, 8, 8, 5, persistent=True, epilogue_split=False),
]
FWD_CANDIDATES = [
    AttnFwdConfig(128, 128, 8, 3),
    AttnFwdConfig(128, 128, 8, 2),
    AttnFwdConfig(128, 64, 8, 3),
    AttnFwdConfig(64, 64, 4, 3),
]
# Backward: the two kernels are timed separately as well, so the best of each can be combined.
BWD_CANDIDATES = [
    AttnBwdConfig(128, 64, 8, 2, 128, 64, 8, 2),
    AttnBwdConfig(128, 32, 8, 3, dq_mode="reduce"),
    AttnBwdConfig(128, 32, 8, 3, 128, 32, 8, 3),
    AttnBwdConfig(128, 64, 8, 3, 128, 64, 8, 3),
    AttnBwdConfig(64, 64, 4, 3, 64, 64, 4, 3),
    AttnBwdConfig(64, 32, 4, 3, 128, 128, 8, 2),
    AttnBwdConfig(128, 32, 8, 2, dq_mode="reduce"),
    AttnBwdConfig(64, 32, 4, 3, dq_mode="reduce"),
]
QUICK = 3  # candidates per task with --quick
ONLY: set[int] = set()  # --only: candidate positions to keep (0 = the generator's table entry)


def candidates(task: Task, quick: bool) -> list[Any]:
    from tasks.solutions.generate import CONFIGS

    pool = {"gemm": GEMM_CANDIDATES, "attention_fwd": FWD_CANDIDATES, "attention_bwd": BWD_CANDIDATES}[task.family]
    chosen = CONFIGS.get(task.name, {}).get(ARCH)
    out = [chosen] if chosen is not None else []
    out += [c for c in pool if c != chosen]
    if ONLY:
        out = [c for i, c in enumerate(out) if i in ONLY]
    return out[:QUICK] if quick else out


# ------------------------------------------------------------------------------------------- inputs


def make_inputs(task: Task, seed: int) -> dict[str, Any]:
    """The task's inputs at full dims on the GPU. Derived backward inputs come from cuDNN's forward
    (an fp32 reference forward at full size would take tens of seconds): the reference backward takes
    O, LSE and Delta as given, so any consistent set checks the kernels."""
    import torch

    from tasks.baselines import prepare_baseline
    from tasks.inputs import draw_inputs

    tensors = draw_inputs(task.model_copy(update={"derive": None}), task.dims, seed, "cuda")
    if task.family == "attention_bwd":
        fwd = prepare_baseline("cudnn_attention_forward", tensors, task.params)()
        tensors["O"] = fwd["O"].contiguous()
        tensors["LSE"] = fwd["LSE"].float().contiguous()
        delta = (tensors["dO"].float() * tensors["O"].float()).sum(-1)  # [B,S,H]
        tensors["Delta"] = delta.transpose(1, 2).contiguous()
        torch.cuda.synchronize()
    return tensors


def new_outputs(task: Task) -> dict[str, Any]:
    import torch

    from tasks.inputs import TORCH_DTYPES, shape_of

    return {
        o.name: torch.full(shape_of(o.shape, task.dims), float("nan"), dtype=TORCH_DTYPES[o.dtype], device="cuda")
        for o in task.outputs
    }


class SubsetReference:
    """fp32 reference outputs on a subset: GEMM rows, or whole (batch, head) slices of attention."""

    def __init__(self, task: Task, tensors: dict[str, Any], seed: int):
        import torch

        from tasks.references import run_reference

        self.task = task
        d = task.dims
        if task.family == "gemm":
            gen = torch.Generator(device="cpu").manual_seed(seed)
            rand = torch.randperm(d["M"], generator=gen)[:256]
            self.rows = torch.cat([torch.arange(128), torch.arange(d["M"] - 128, d["M"]), rand]).cuda()
            a = tensors["A"][self.rows].float()
            self.ref = {"C": [a @ tensors["B"].float().T]}
            return
        self.pairs = [(0, 0), (d["B"] - 1, d["H"] - 1), (d["B"] // 2, d["H"] // 2)]
        self.ref = {o.name: [] for o in task.outputs}
        for b, h in self.pairs:
            sub = {n: self._slice(n, t, b, h) for n, t in tensors.items() if n in {i.name for i in task.inputs}}
            for name, value in run_reference(task.reference, sub, task.params).items():
                self.ref[name].append(value)

    def _slice(self, name: str, t: Any, b: int, h: int) -> Any:
        if self.task.tensor(name).shape == ["B", "H", "S"]:
            return t[b : b + 1, h : h + 1].contiguous()
        return t[b : b + 1, :, h : h + 1].contiguous()

    def error(self, outputs: dict[str, Any]) -> dict[str, float]:
        """Rel. L2 error per output over the subset; inf when any element anywhere is NaN/inf (unwritten)."""
        import torch

        errors = {}
        for name, refs in self.ref.items():
            out = outputs[name]
            if not bool(torch.isfinite(out).all()):
                errors[name] = math.inf
                continue
            if self.task.family == "gemm":
                got = [out[self.rows].float()]
            else:
                got = [self._slice(name, out, b, h).float() for b, h in self.pairs]
            num = sum(float((g - r).square().sum()) for g, r in zip(got, refs, strict=True))
            den = sum(float(r.square().sum()) for r in refs)
            errors[name] = math.sqrt(num / den)
        return errors


# ------------------------------------------------------------------------------------------ running


def bench(fn: Callable[[], Any]) -> float:
    """Median ms with a flushed L2 before each run (do_bench's default)."""
    import triton

    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def flops(task: Task) -> float:
    return float(evaluate(task.flops, task.dims))


def row(task: Task, label: str, ms: float | None, base_ms: float | None, errors: dict | None, note: str = "") -> dict:
    err = max(errors.values()) if errors else None
    return {
        "task": task.name,
        "config": label,
        "ms": ms,
        "tflops": flops(task) / ms / 1e9 if ms else None,
        "ratio": base_ms / ms if ms and base_ms else None,
        "rel_err": err,
        "errors": errors,
        "correct": err is not None and err <= TOLERANCE,
        "note": note,
    }


def run_config(task: Task, cfg: Any, tensors: dict, ref: SubsetReference, base_ms: float | None) -> dict:
    import torch

    from tasks.solutions.generate import compile_launch, program_for
    from tasks.solutions.kernels.launch import prepare_program

    program = program_for(task, ARCH, cfg)
    launches = program.launches
    compiled = [compile_launch(launch, task, ARCH, program) for launch in launches]
    outputs = new_outputs(task)
    run = prepare_program(program, {**tensors, **outputs}, task.dims, compiled)
    run()
    torch.cuda.synchronize()
    errors = ref.error(outputs)
    ms = bench(run)
    note = ", ".join(f"{c.metadata.name}: {c.metadata.shared >> 10} KiB smem" for c in compiled)
    result = row(task, cfg.label(), ms, base_ms, errors, note)
    result["config_fields"] = asdict(cfg)
    if len(launches) > 1:  # time each kernel alone too, to combine the best of each
        result["per_kernel_ms"] = {}
        for i, launch in enumerate(launches):
            one = prepare_program(program, {**tensors, **outputs}, task.dims, compiled, only=[i])
            result["per_kernel_ms"][launch.name] = bench(one)
    return result


def run_answer(task: Task, tensors: dict, ref: SubsetReference, base_ms: float | None) -> dict:
    """The committed answer file, launched through its LaunchSpec (the harness's path)."""
    import torch

    from tasks.solutions import reference_answer
    from tasks.solutions.raw_launch import Driver, prepare
    from tools.answer import extract_solution
    from tools.compiler import compile_ptx
    from tools.plan import plan_launches

    text = reference_answer(task.name, ARCH)
    if text is None:
        return row(task, "answer file", None, base_ms, None, "no answer file")
    solution = extract_solution(text)
    plan = plan_launches(solution.launch, task, ARCH)
    compiled = compile_ptx(solution.source, ARCH)
    if compiled.ok:
        image, how = compiled.cubin, f"ptxas {compiled.toolchain.get('ptxas', '')}"
    else:  # no ptxas here (or it failed): let the driver JIT the PTX
        image, how = solution.source.encode() + b"\0", "driver PTX JIT (" + compiled.message(2)[:120] + ")"
    outputs = new_outputs(task)
    buffers = {**tensors, **outputs}
    from tasks.inputs import TORCH_DTYPES

    scratch = []
    for b in plan.buffers:
        if b.role == "scratch":  # zeroed before every run, and timed with it, as the harness does
            if b.init != "zero":
                raise RuntimeError(f"scratch init {b.init!r} is not supported here")
            buffers[b.name] = torch.zeros(b.shape, dtype=TORCH_DTYPES[b.dtype], device="cuda")
            scratch.append(buffers[b.name])
    launch = prepare(Driver(), image, plan, buffers, torch.cuda.current_stream().cuda_stream)

    def run() -> None:
        for buffer in scratch:
            buffer.zero_()
        launch()

    run()
    torch.cuda.synchronize()
    errors = ref.error(outputs)
    return row(task, "answer file (raw launch)", bench(run), base_ms, errors, how)


def tune_task(task: Task, args: argparse.Namespace) -> list[dict]:
    import torch

    from tasks.baselines import prepare_baseline

    results: list[dict] = []
    start = time.perf_counter()
    tensors = make_inputs(task, args.seed)
    ref = SubsetReference(task, tensors, args.seed)
    base_ms = None
    try:
        base = prepare_baseline(task.baseline.call, tensors, task.params)
        errors = ref.error({k: v.contiguous() for k, v in base().items()})
        base_ms = bench(base)
        results.append(row(task, f"baseline {task.baseline.library}", base_ms, base_ms, errors))
    except Exception as e:
        results.append(row(task, f"baseline {task.baseline.library}", None, None, None, _short(e)))
    _print_row(results[-1])
    todo: list[tuple[str, Callable[[], dict]]] = [
        (c.label(), lambda c=c: run_config(task, c, tensors, ref, base_ms)) for c in candidates(task, args.quick)
    ]
    if args.answers:
        todo.append(("answer file", lambda: run_answer(task, tensors, ref, base_ms)))
    for label, fn in todo:
        try:
            results.append(fn())
        except Exception as e:
            if args.verbose:
                traceback.print_exc()
            results.append(row(task, label, None, base_ms, None, _short(e)))
        _print_row(results[-1])
        torch.cuda.synchronize()
    best_bwd = _best_bwd_combination(task, results, base_ms)
    if best_bwd:
        results.append(best_bwd)
        _print_row(best_bwd)
    torch.cuda.empty_cache()
    print(f"  ({task.name}: {time.perf_counter() - start:.0f} s)", flush=True)
    return results


def _best_bwd_combination(task: Task, results: list[dict], base_ms: float | None) -> dict | None:
    """For the backward: the fastest correct dK/dV kernel plus the fastest correct dQ kernel."""
    pair = {"attn_bwd_dkdv_kernel", "attn_bwd_dq_kernel"}  # only the recompute mode's kernels combine freely
    timed = [r for r in results if set(r.get("per_kernel_ms") or ()) == pair and r["correct"]]
    if task.family != "attention_bwd" or not timed:
        return None
    best = {}
    for kernel in timed[0]["per_kernel_ms"]:
        best[kernel] = min(timed, key=lambda r, k=kernel: r["per_kernel_ms"][k])
    ms = sum(b["per_kernel_ms"][k] for k, b in best.items())
    kv, q = best["attn_bwd_dkdv_kernel"]["config_fields"], best["attn_bwd_dq_kernel"]["config_fields"]
    merged = AttnBwdConfig(**{k: (q[k] if k.startswith("q_") else kv[k]) for k in kv})
    result = row(task, f"best per kernel: {merged.label()}", ms, base_ms, None, "sum of separately timed kernels")
    result.update(correct=True, config_fields=asdict(merged))
    return result


def config_repr(task: Task, fields: dict) -> str:
    cls = {"gemm": GemmConfig, "attention_fwd": AttnFwdConfig, "attention_bwd": AttnBwdConfig}[task.family]
    return repr(cls(**fields))


def _short(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".replace("\n", " ")
    return text[:300]


def _fmt(value: float | None, spec: str) -> str:
    return format(value, spec) if value is not None and math.isfinite(value) else "-"


def _print_row(r: dict) -> None:
    ok = "ok" if r["correct"] else ("FAIL" if r["rel_err"] is not None else "ERR")
    print(
        f"{r['task']:<20} {r['config'][:58]:<58} {_fmt(r['ms'], '8.3f')} ms {_fmt(r['tflops'], '6.0f')} TF/s "
        f"{_fmt(r['ratio'], '5.2f')}x err {_fmt(r['rel_err'], '.1e'):>7} {ok:<4} {r['note'][:110]}",
        flush=True,
    )


# ------------------------------------------------------------------------------------------ dry run


def _compile_config(task_name: str, cfg: Any, resources: bool) -> list[dict]:
    """Compile one candidate (in a worker process: warms Triton's cache); with `resources`, also run
    ptxas -v on its PTX for registers and spills."""
    from tasks.solutions.generate import _setup_toolchain, compile_launch, program_for
    from tools.compiler import compile_ptx

    with contextlib.suppress(Exception):  # no ptxas of ours: Triton's own then
        _setup_toolchain()
    task = get_task(task_name)
    out = []
    program = program_for(task, ARCH, cfg)
    for launch in program.launches:
        k = compile_launch(launch, task, ARCH, program)
        res = compile_ptx(k.asm["ptx"], ARCH) if resources else None
        kern = res.kernels[0] if res and res.kernels else None
        out.append({"kernel": launch.name, "shared": k.metadata.shared, "registers": kern.registers if kern else None,
                    "spills": kern.spill_stores if kern else None})  # fmt: skip
    return out


def warm_cache(tasks: list[Task], quick: bool, jobs: int, dry_run: bool) -> None:
    """Compile every candidate in parallel processes so that the timed loop finds Triton's cache warm."""
    work = [(t.name, c) for t in tasks for c in candidates(t, quick)]
    if jobs <= 1 and not dry_run:
        return
    import multiprocessing as mp

    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=mp.get_context("spawn")) as pool:
        futures = [(name, cfg, pool.submit(_compile_config, name, cfg, dry_run)) for name, cfg in work]
        for name, cfg, fut in futures:
            try:
                report = fut.result()
                if dry_run:
                    detail = "; ".join(
                        f"{r['kernel']}: {r['shared']} B smem, {r['registers']} regs, {r['spills']} B spilled"
                        for r in report
                    )
                    print(f"{name:<20} {cfg.label():<52} {detail}", flush=True)
            except Exception as e:
                print(f"{name:<20} {cfg.label():<52} compile failed: {_short(e)}", flush=True)
    print(f"(compiled {len(work)} candidates in {time.perf_counter() - start:.0f} s)", flush=True)


# ------------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="*", default=CORE, help="task names (default: the 5 core tasks)")
    parser.add_argument("--quick", action="store_true", help=f"only the first {QUICK} candidates per task")
    parser.add_argument("--no-answers", dest="answers", action="store_false", help="skip the answer-file check")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: compile the candidates, print resources")
    parser.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1), help="parallel compiles")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "tune.json"))
    parser.add_argument("--verbose", action="store_true", help="print tracebacks of failing configs")
    parser.add_argument("--only", type=int, nargs="*", help="candidate indices to run (0 = the table's)")
    args = parser.parse_args(argv)
    tasks = [get_task(t) for t in args.tasks]
    if args.only is not None:
        ONLY.update(args.only)
    if args.dry_run:
        warm_cache(tasks, args.quick, args.jobs, dry_run=True)
        return 0

    import torch
    import triton

    if not torch.cuda.is_available():
        print("no CUDA device: use --dry-run to compile only", file=sys.stderr)
        return 2
    from tasks.solutions.generate import _setup_toolchain

    try:
        ptxas = _setup_toolchain()
    except Exception as e:
        ptxas = f"Triton's own ({_short(e)[:80]})"
    start = time.perf_counter()
    warm_cache(tasks, args.quick, args.jobs, dry_run=False)
    env = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "ptxas": ptxas}  # fmt: skip
    print(json.dumps(env), flush=True)
    print(f"{'task':<20} {'config':<58} {'time':>11} {'rate':>11} {'ratio':>6} {'rel err':>11}", flush=True)
    results: list[dict] = []
    for task in tasks:
        try:
            results += tune_task(task, args)
        except Exception as e:  # inputs or reference failed: report, go on with the next task
            traceback.print_exc()
            results.append(row(task, "setup", None, None, None, _short(e)))
    print(f"\ntotal {time.perf_counter() - start:.0f} s; best correct config per task:")
    summary = {}
    table_lines = []
    for task in tasks:
        mine = [r for r in results if r["task"] == task.name and r["correct"] and r["ms"] and r.get("config_fields")]
        if mine:
            best = min(mine, key=lambda r: r["ms"])
            summary[task.name] = best
            _print_row(best)
            cfg = config_repr(task, best["config_fields"])
            table_lines.append(f'    "{task.name}": {{H: {cfg}, B: {cfg}}},')
    if table_lines:
        print("\nrows for CONFIGS in tasks/solutions/generate.py (sm_100a reuses them):\n" + "\n".join(table_lines))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"env": env, "results": results, "best": summary}, f, indent=1, default=str)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
