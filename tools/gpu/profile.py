"""Run-time proof that the target instructions executed: Nsight Compute on the torch-free launcher, counting
executed SASS instructions per opcode (warp-level and predicate-true thread-level), then per target group. The
service runs it where the worker's own count (CUPTI, tools/gpu/cupti_counts.py) could not, and for every sm_100a
attempt. A group executed when its predicate-true thread-level count is > 0 (the paper's rule: an instruction
reached with its predicate false for every thread did not execute); the warp-level counts, predicated-off
executions included, are the figures shown.

Without ncu, or when ncu is refused (tools/gpu/ncu.py), the stage is `skipped` with the reason: never a
failure of the kernel."""

from __future__ import annotations

import csv
import re
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tasks.schema import TargetGroup
from tools import procs
from tools.evaluation import Stage, StageResult, StageState
from tools.gpu import launcher, ncu
from tools.gpu.metrics import TargetMetrics
from tools.plan import LaunchPlan

WARP = "sass__inst_executed_per_opcode"
THREAD = "sass__thread_inst_executed_true_per_opcode"
MODIFIERS = "sass__inst_executed_per_opcode_with_modifier_all"
METRICS = (WARP, THREAD, MODIFIERS)
_PAIR = re.compile(r"([A-Z][\w.]*)\s*:\s*([\d,]+)")


def parse_counts(cell: str) -> Counter[str]:
    """`766,464 (IMAD: 103,424; HGMMA: 32,768)` → Counter({'IMAD': 103424, 'HGMMA': 32768})."""
    inner = cell[cell.find("(") + 1 : cell.rfind(")")] if "(" in cell else ""
    return Counter({op: int(n.replace(",", "")) for op, n in _PAIR.findall(inner)})


def parse_report(csv_text: str) -> list[dict[str, Any]]:
    """One entry per profiled launch: kernel name and a Counter per metric."""
    rows = list(csv.reader(line for line in csv_text.splitlines() if line.startswith('"')))
    header_at = next((i for i, r in enumerate(rows) if WARP in r), None)
    if header_at is None:
        return []
    header = rows[header_at]
    name_col = header.index("Kernel Name") if "Kernel Name" in header else None
    launches = []
    for row in rows[header_at + 2 :]:  # skip the units row
        if len(row) != len(header):
            continue
        entry = {"kernel": row[name_col] if name_col is not None else "?"}
        for metric in METRICS:
            if metric in header:
                entry[metric] = parse_counts(row[header.index(metric)])
        launches.append(entry)
    return launches


def summarize(launches: list[dict[str, Any]], groups: list[TargetGroup]) -> dict[str, Any]:
    """Per-group executed counts, targets_met, the paper's tag and a compact opcode mix."""
    warp: Counter[str] = Counter()
    thread: Counter[str] = Counter()
    modifiers: Counter[str] = Counter()
    for launch in launches:
        warp.update(launch.get(WARP, {}))
        thread.update(launch.get(THREAD, {}))
        modifiers.update(launch.get(MODIFIERS, {}))
    counts, thread_counts, variants = {}, {}, {}
    for g in groups:
        match = [op for op in warp if any(re.search(p, op) for p in g.sass_patterns)]
        counts[g.name] = sum(warp[op] for op in match)
        thread_counts[g.name] = sum(thread[op] for op in match)
        variants[g.name] = {
            op: n for op, n in modifiers.most_common() if any(re.search(p, op) for p in g.sass_patterns)
        }
    total = sum(warp.values()) or 1
    mix = [[op, n, round(100 * n / total, 2)] for op, n in warp.most_common(12)]
    executed = thread_counts if thread else counts  # a report without the thread-level metric: warp-level
    return {
        "counter": "ncu",
        "target_counts": counts,
        "target_thread_counts": thread_counts,
        "target_variants": variants,
        "target_executed": {g.name: executed[g.name] > 0 for g in groups},
        "targets_met": all(executed[g.name] > 0 for g in groups if g.required),
        "paper_tag": any(executed[g.name] > 0 for g in groups if g.paper_tag),
        "opcode_mix": mix,
        "instructions": sum(warp.values()),
    }


def profile_stage(
    cubin: bytes, plan: LaunchPlan, groups: list[TargetGroup], device: int, timeout_s: float
) -> tuple[StageResult, TargetMetrics | None]:
    """The profile stage of a correct attempt, and its verdict on the target groups (None when it was skipped)."""
    start = time.perf_counter()
    kernels = sorted({launch.kernel for launch in plan.launches})
    collect = ["-k", kernel_filter(kernels), "-c", str(len(plan.launches)), "--metrics", ",".join(METRICS)]
    with tempfile.TemporaryDirectory(prefix=procs.temp_prefix("ncu")) as tmp:
        bundle = launcher.write_bundle(Path(tmp) / "bundle", cubin, plan)
        try:
            raw = ncu.profile_raw(launcher.command(bundle), collect, env=launcher.environment(device),
                                  timeout_s=timeout_s, instances=True)  # fmt: skip
        except ncu.NcuFailed as e:
            return _skipped(str(e), start), None
    launches = parse_report(raw)
    if not launches:
        return _skipped(f"ncu's report held no launches of {', '.join(kernels)}: {ncu.tail(raw)}", start), None
    summary = summarize(launches, groups)
    stage = StageResult(
        name=Stage.PROFILE,
        state=StageState.PASSED,
        message=message(summary, groups),
        detail={**summary, "launches_profiled": len(launches)},
        seconds=time.perf_counter() - start,
    )
    return stage, targets_of(summary)


def message(summary: dict[str, Any], groups: list[TargetGroup]) -> str:
    """The profile stage's lines for the model, from either counter's summary: per group its count (and its top
    variants, which ncu gives), whether the targets are met, and ncu's opcode mix."""
    lines = []
    for g in groups:
        n = summary["target_counts"][g.name]
        ops = ", ".join(f"{op} {c:,}" for op, c in list(summary.get("target_variants", {}).get(g.name, {}).items())[:3])
        note = ""
        if g.required and not summary["target_executed"][g.name]:
            note = " — required, but none ran" if n == 0 else " — required, but every one ran with its predicate false"
        lines.append(f"{g.name} executed: {n:,} warp instructions" + (f" ({ops})" if ops else "") + note)
    met = f"targets met: {'yes' if summary['targets_met'] else 'NO'}"
    if "opcode_mix" in summary:
        mix = summary["opcode_mix"][:10]
        met += "; opcode mix (warp-level): " + ", ".join(f"{op} {share}%" for op, _, share in mix)
    return "\n".join([*lines, met])


def targets_of(summary: dict[str, Any]) -> TargetMetrics:
    return TargetMetrics(met=summary["targets_met"], counts=summary["target_counts"], paper_tag=summary["paper_tag"],
                         counter=summary["counter"])  # fmt: skip


def kernel_filter(kernels: list[str]) -> str:
    """ncu's -k value matching exactly these kernel names."""
    return "regex:^(" + "|".join(re.escape(k) for k in kernels) + ")$"


def _skipped(reason: str, start: float) -> StageResult:
    return StageResult(
        name=Stage.PROFILE, state=StageState.SKIPPED, message=reason, seconds=time.perf_counter() - start
    )
