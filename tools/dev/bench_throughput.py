"""`python -m tools.dev.bench_throughput [--out DIR] [--modes full,untimed,static] [--backends local,dask] [--repeat N]
[--budget-s S]`: evaluations per hour on one GPU (issue 32), a script for developers, not a test.

The mix, one round: the core five's reference answers (sm_90a) and every recorded attempt of the fixture runs under
tests/fixtures/runs (failing ones included: extract, compile, ABI errors, mismatches, as a bench records them).
Each round goes through the HTTP service's own queue (tools/serve/runner.py: the static stages on a pool of CPU
threads, the GPU stages queued for the GPU), so the static stages of the next attempts run while one holds the GPU.

- modes: `full` (check, paired timing, executed target counts: eval.profile=counts), `untimed` (check and counts:
  eval.time=false, a reward's needs), `static` (extract, compile, SASS, ABI only; no GPU);
- backends: `local` (one GpuService on GPU 0, behind the local pool) and `dask` (our scheduler and one
  tools.gpu.dask_worker on GPU 0, started here on 127.0.0.1); `static` runs once, without either.

Per row: evaluations, wall seconds, evaluations per hour (all, and those that reached the GPU), the GPU stages'
share of the wall time, and each stage's median and total seconds. Then, for every distinct answer the GPU
passed, the executed counts of both counters once — the worker's CUPTI (the full mode's profile stage) and Nsight
Compute's (tools/gpu/profile.py, on the same module) — and whether they agree: per group the count (CUPTI's against
the ncu count it equals, tools/gpu/cupti_counts.py COUNTERS) and the decisions (targets met, the paper's tag).

A round starts only while the budget (--budget-s, default 300; the agreement and the backends' start-up come on top)
lasts; --repeat rounds per row at most (default 2). Writes
DIR/bench_throughput.json and DIR/bench_throughput.md (DIR: --out, else $OUT, else the current folder) and prints
the Markdown."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import traceback
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tasks import get_task
from tasks.catalog import CORE
from tasks.schema import Arch
from tasks.solutions import reference_answer
from tools.evaluation import Evaluation, Stage, StageState, Status
from tools.gpu.base import Gpu, Unavailable
from tools.options import EvalOptions, Profile
from tools.pipeline import FAILURE_STATUS
from tools.serve.runner import Runner
from tools.serve.schema import EvaluateRequest

REPO = Path(__file__).resolve().parents[2]
FIXTURE_RUNS = REPO / "tests" / "fixtures" / "runs"
ARCH = Arch.SM_90A
MODES = {
    "full": EvalOptions(profile=Profile.COUNTS),
    "untimed": EvalOptions(time=False, profile=Profile.COUNTS),
    "static": EvalOptions(profile=Profile.OFF),
}
BACKENDS = ("local", "dask")
GPU_STAGES = (Stage.RUN, Stage.CHECK, Stage.TIME, Stage.PROFILE)
STATIC_STAGES = tuple(FAILURE_STATUS)  # extract, compile, sass, abi
NCU_S = 300.0  # one Nsight Compute count, however large the kernel


def mix(arch: Arch = ARCH) -> tuple[list[tuple[str, str, str]], list[str]]:
    """One round: (source, task, answer) for the core five's reference answers and the fixture runs' recorded
    attempts on `arch`; and what was left out (a task the catalog no longer has)."""
    items = [(f"reference {name}", name, reference_answer(name, arch)) for name in CORE]
    left_out = []
    for path in sorted(FIXTURE_RUNS.glob("**/trajectory.jsonl")):
        for number, text in enumerate(path.read_text().splitlines(), 1):
            turn = json.loads(text)
            ev = turn.get("evaluation") or {}
            if ev.get("arch") != str(arch) or not turn.get("response"):
                continue
            where = f"{path.parent.relative_to(FIXTURE_RUNS)} turn {number}"
            try:
                get_task(ev["task"])
            except ValueError:
                left_out.append(f"{where}: task {ev['task']} is not in the catalog")
                continue
            items.append((where, ev["task"], turn["response"]))
    return items, left_out


def run_round(gpu: Gpu, items: list[tuple[str, str, str]], options: EvalOptions, static_workers: int) -> dict:
    """Every item through the service's queue at once; the evaluations (in the items' order) and the wall time."""
    runner = Runner(gpu, static_workers=static_workers, gpu_workers=1, max_queued=len(items) + 1)
    requests = [EvaluateRequest(task=task, arch=str(ARCH), answer=text, options=options) for _, task, text in items]
    start = time.perf_counter()
    try:
        evaluations = [f.result() for f in runner.evaluate_all(requests, options.profile)]
    finally:
        runner.close()
    return {"wall_s": time.perf_counter() - start, "evaluations": evaluations}


def row(name: str, mode: str, rounds: list[dict], sources: list[str]) -> dict[str, Any]:
    """A table row from the rounds of one backend and mode: throughput, the GPU's share, seconds per stage."""
    evaluations = [e for r in rounds for e in r["evaluations"]]
    wall = sum(r["wall_s"] for r in rounds)
    on_gpu = [e for e in evaluations if _ran(e, Stage.RUN)]
    seconds: dict[str, list[float]] = defaultdict(list)
    for e in evaluations:
        for s in e.stages:
            if s.state is not StageState.SKIPPED or s.seconds:
                seconds[str(s.name)].append(s.seconds)
    gpu_s = sum(sum(seconds.get(str(s), [])) for s in GPU_STAGES)
    counters = defaultdict(int)
    for e in evaluations:
        if e.target_counter:
            counters[e.target_counter] += 1
    statuses = defaultdict(int)
    for e in evaluations:
        statuses[str(e.status)] += 1
    return {
        "backend": name, "mode": mode, "rounds": len(rounds), "evaluations": len(evaluations),
        "wall_s": round(wall, 2), "per_hour": round(3600 * len(evaluations) / wall, 1) if wall else None,
        "gpu_evaluations": len(on_gpu),
        "gpu_per_hour": round(3600 * len(on_gpu) / wall, 1) if wall and on_gpu else None,
        "gpu_busy": round(gpu_s / wall, 3) if wall else None, "statuses": dict(statuses), "counted_by": dict(counters),
        "stages": {s: {"median_s": round(statistics.median(v), 3), "total_s": round(sum(v), 2), "n": len(v)}
                   for s, v in seconds.items()},
        "attempts": [{"source": src, "task": e.task, "status": str(e.status), "counter": e.target_counter,
                      "targets_met": e.targets_met, "speedup": e.speedup,
                      "stages": {str(s.name): round(s.seconds, 3) for s in e.stages}}
                     for src, e in zip(sources * len(rounds), evaluations, strict=True)],
    }  # fmt: skip


def _ran(e: Evaluation, stage: Stage) -> bool:
    s = e.stage(stage)
    return s is not None and s.state is not StageState.SKIPPED


def agreement(full: list[Evaluation], items: list[tuple[str, str, str]], device: int = 0) -> list[dict[str, Any]]:
    """For each distinct answer the full mode passed: CUPTI's counts (its profile stage) beside Nsight Compute's on the
    same module, per group, and both counters' decisions."""
    from tools.gpu import cupti_counts, profile
    from tools.pipeline import build, extract

    seen, out = set(), []
    for (source, task_name, text), e in zip(items, full, strict=True):
        if e.status is not Status.PASSED or (task_name, text) in seen:
            continue
        seen.add((task_name, text))
        task = get_task(task_name)
        groups = task.targets[ARCH]
        entry: dict[str, Any] = {"source": source, "task": task_name, "worker_counter": e.target_counter}
        module = build(extract(task, ARCH, answer=text), task, ARCH, EvalOptions()).module
        stage, targets = profile.profile_stage(module.cubin, module.plan, groups, device, NCU_S)
        if targets is None:
            entry["ncu"] = f"not counted: {stage.message}"
            out.append(entry)
            continue
        detail = stage.detail
        entry["ncu_decision"] = {"targets_met": targets.met, "paper_tag": targets.paper_tag}
        entry["worker_decision"] = {"targets_met": e.targets_met, "paper_tag": e.paper_tag}
        entry["decisions_agree"] = entry["ncu_decision"] == entry["worker_decision"]
        counters = cupti_counts.COUNTERS.get(ARCH, {})
        groups_out = {}
        for g in groups:
            # the worker's count is ncu's warp-level one where its CUPTI fell back to ncu
            rule = counters[g.name].ncu if g.name in counters and e.target_counter == "cupti" else "warp"
            ncu_count = (
                detail["target_counts"][g.name] if rule == "warp" else detail["target_thread_counts"][g.name] // 32
            )
            worker = (e.target_counts or {}).get(g.name)
            groups_out[g.name] = {"worker": worker, "ncu": ncu_count, "ncu_rule": rule, "agree": worker == ncu_count,
                                  "ncu_warp": detail["target_counts"][g.name],
                                  "ncu_thread": detail["target_thread_counts"][g.name]}  # fmt: skip
        entry["groups"] = groups_out
        entry["counts_agree"] = all(v["agree"] for v in groups_out.values())
        out.append(entry)
    return out


@contextmanager
def backend(name: str) -> Iterator[Gpu]:
    """The GPU side of a row: GPU 0 through the local pool, or a Dask pool of one worker on GPU 0 started here."""
    if name == "local":
        from tools.gpu.service import GpuService
        from tools.pool.local import LocalPool

        pool = LocalPool([GpuService(device=0)])
        try:
            yield pool
        finally:
            pool.close()
        return
    from tests.dask_cluster import Cluster  # a developer's script: the tests' cluster of real processes
    from tools.pool.dask import DaskPool

    cluster = Cluster(Path(tempfile.mkdtemp(prefix="bench-throughput-")))
    try:
        cluster.wait_for(*cluster.start_host("0"))
        pool = DaskPool(cluster.address)
        try:
            yield pool
        finally:
            pool.close()
    finally:
        cluster.close()


def warm(gpu: Gpu, items: list[tuple[str, str, str]]) -> None:
    """The worker started and each task's baseline prepared once, outside the measured rounds (as in a long bench)."""
    refs = [item for item in items if item[0].startswith("reference ")]
    run_round(gpu, refs, EvalOptions(profile=Profile.OFF, trials=1), static_workers=len(refs))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    items, left_out = mix()
    sources = [source for source, _, _ in items]
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "mix": sources,
                               "left_out": left_out, "rows": [], "errors": {}}  # fmt: skip
    deadline = time.monotonic() + args.budget_s
    plan = {"static": ["static"]} if "static" in args.modes else {}
    plan |= {b: [m for m in args.modes if m != "static"] for b in args.backends}
    for name, modes in plan.items():
        if not modes:
            continue
        if time.monotonic() >= deadline:
            results["errors"][name] = "not run: the budget was spent"
            continue
        full: list[Evaluation] | None = None
        try:
            with backend(name) if name != "static" else _unavailable() as gpu:
                if name != "static":
                    warm(gpu, items)
                for mode in modes:
                    rounds = []
                    while len(rounds) < args.repeat and time.monotonic() < deadline:
                        rounds.append(run_round(gpu, items, MODES[mode], args.static_workers))
                        print(f"{name} {mode}: round {len(rounds)} in {rounds[-1]['wall_s']:.1f} s", flush=True)
                    if rounds:
                        results["rows"].append(row(name, mode, rounds, sources))
                        write(args.out, results)  # after every row: a run cut short keeps what it measured
                        full = rounds[0]["evaluations"] if mode == "full" else full
                    else:
                        results["errors"][f"{name} {mode}"] = "not run: the budget was spent"
        except Exception as e:  # one backend's failure is a figure too; the others still run
            results["errors"][name] = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-2000:]}"
        if name == "local" and full is not None and args.agreement:  # the GPU free again: ncu beside the record
            try:
                results["agreement"] = agreement(full, items)
            except Exception as e:
                results["errors"]["agreement"] = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-2000:]}"
            write(args.out, results)
    return results


@contextmanager
def _unavailable() -> Iterator[Gpu]:
    yield Unavailable("static only: no GPU stages")


def markdown(results: dict[str, Any]) -> str:
    """The table README and docs/performance.md quote, then the counters' agreement."""
    lines = [f"Throughput ({results['date']}, one GPU; a round = {len(results['mix'])} evaluations: the core five's "
             "reference answers and the fixture runs' recorded attempts)", "",
             "| backend | mode | evaluations | wall s | evaluations/h | GPU evaluations/h | GPU busy | seconds per "
             "stage (median) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    order = [*STATIC_STAGES, *GPU_STAGES]
    for r in results["rows"]:
        stages = ", ".join(f"{s} {r['stages'][str(s)]['median_s']:.2f}" for s in order if str(s) in r["stages"])
        busy = f"{100 * r['gpu_busy']:.0f}%" if r["gpu_busy"] is not None and r["mode"] != "static" else "-"
        lines.append(f"| {r['backend']} | {r['mode']} | {r['evaluations']} | {r['wall_s']:.0f} | {r['per_hour']:.0f} | "
                     f"{r['gpu_per_hour'] or '-'} | {busy} | {stages} |")  # fmt: skip
    counted = [f"{r['backend']} {r['mode']}: {r['counted_by']}" for r in results["rows"] if r["counted_by"]]
    if counted:
        lines += ["", "Counted by: " + "; ".join(counted)]
    agreement_rows = results.get("agreement")
    if agreement_rows is not None:
        lines += ["", "| answer | worker counter | counts (worker / ncu) | counts agree | decisions agree |",
                  "| --- | --- | --- | --- | --- |"]  # fmt: skip
        for a in agreement_rows:
            if "groups" not in a:
                lines.append(f"| {a['source']} | {a['worker_counter']} | {a.get('ncu')} | - | - |")
                continue
            counts = "; ".join(f"{g} {v['worker']} / {v['ncu']} ({v['ncu_rule']})" for g, v in a["groups"].items())
            lines.append(f"| {a['source']} | {a['worker_counter']} | {counts} | {'yes' if a['counts_agree'] else 'NO'} "
                         f"| {'yes' if a['decisions_agree'] else 'NO'} |")  # fmt: skip
    for what, error in results["errors"].items():
        lines += ["", f"{what}: {error.splitlines()[0]}"]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")), help="folder for the results")
    parser.add_argument("--modes", default="full,untimed,static", help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--backends", default="local,dask", help=f"comma-separated, of {', '.join(BACKENDS)}")
    parser.add_argument("--repeat", type=int, default=2, help="rounds of the mix per backend and mode, at most")
    parser.add_argument("--budget-s", type=float, default=300.0, help="no round starts after this many seconds")
    parser.add_argument("--static-workers", type=int, default=os.cpu_count() or 2, help="threads for static stages")
    parser.add_argument("--no-agreement", dest="agreement", action="store_false",
                        help="skip the CUPTI / Nsight Compute comparison")  # fmt: skip
    args = parser.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not args.modes or set(args.modes) - set(MODES):
        parser.error(f"--modes: of {', '.join(MODES)}")
    if set(args.backends) - set(BACKENDS):
        parser.error(f"--backends: of {', '.join(BACKENDS)}")
    if args.repeat < 1 or args.budget_s <= 0 or args.static_workers < 1:
        parser.error("--repeat, --budget-s and --static-workers must be positive")
    return args


def write(out: Path, results: dict[str, Any]) -> str:
    """DIR/bench_throughput.json and .md as they stand; the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_throughput.json").write_text(json.dumps(results, indent=1, default=str))
    text = markdown(results)
    (out / "bench_throughput.md").write_text(text + "\n")
    return text


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = measure(args)
    print(write(args.out, results))
    return 0 if results["rows"] and not results["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
