"""The perf pass: where a correct kernel's time goes, beside the baseline library's kernels on the same GPU.

Nsight Compute profiles each launch of the candidate (on the torch-free launcher) and, once per task and GPU
worker, the library's call (tools/gpu/baseline_launch.py, between cudaProfilerStart and Stop). From ncu's
raw CSV page we keep a small fixed set of figures per launch (tools/perf_report.py's KernelPerf: duration; SM
throughput and the tensor pipe's active share of cycles; L2 and DRAM throughput as a share of peak and the
L2 hit rate; shared-memory bank conflicts; achieved occupancy with registers and shared memory per block;
the warp stall reasons, averaged per issued instruction; grid, block, cluster and waves per SM). The stage's
message is one table "yours | the library's", the time split of multi-launch sequences, and the likely
limiter (tools/gpu/limiters.py). Where in the kernel: the candidate's profile also collects the SourceCounters
section, whose per-instruction counters tools/gpu/hot_lines.py sums per line of the answer; the registers each
warpgroup holds after `setmaxnreg`; and the scratch buffers' reset before each run (the time stage measured it) as a
row of the time split.

The sections are the ones recorded on our H200 (ncu 2025.3; tests/fixtures/gpu/recorded/ncu_perf_*.csv):
20 replay passes per launch, about 5 s for one GEMM launch with ncu's start-up.
"""

from __future__ import annotations

import csv
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tasks.schema import Arch, Task
from tools import procs
from tools.evaluation import Stage, StageResult, StageState
from tools.gpu import hot_lines, launcher, ncu
from tools.gpu.base import CompiledModule
from tools.gpu.limiters import limiter
from tools.gpu.profile import kernel_filter
from tools.lineinfo import answer_sources, line_table
from tools.perf_report import HotLine, KernelPerf, PerfReport, longest
from tools.plan import LaunchPlan

SECTIONS = ("SpeedOfLight", "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis", "Occupancy", "LaunchStats",
            "WarpStateStats", "SchedulerStats")  # fmt: skip
EXTRA_METRICS = ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",)  # in no section
COLLECT = [*(arg for s in SECTIONS for arg in ("--section", s)), "--metrics", ",".join(EXTRA_METRICS)]
SOURCE_COUNTERS = ["--section", "SourceCounters"]  # the candidate's per-instruction counters, for its lines
_STALL = ("smsp__average_warps_issue_stalled_", "_per_issue_active.ratio")
_FIGURES = {  # KernelPerf field → ncu metric
    "duration_ms": "gpu__time_duration.sum",
    "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "tensor_pipe_pct": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "l2_throughput_pct": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_throughput_pct": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "smem_bank_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
    "warps_per_scheduler": "smsp__warps_active.avg.per_cycle_active",
    "registers": "launch__registers_per_thread",
    "waves_per_sm": "launch__waves_per_multiprocessor",
}
_TO_MS = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0, "s": 1e3, "second": 1e3}
_TO_BYTES = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "KB": 1e3, "MB": 1e6}


# ----------------------------------------------------------------------------------------- reading


def parse_perf(csv_text: str) -> list[KernelPerf]:
    """One KernelPerf per profiled launch of ncu's `--page raw --csv` output (a header row, a units row,
    then a row per launch); rows of another width (a torn export) are left out."""
    rows = list(csv.reader(line for line in csv_text.splitlines() if line.startswith('"')))
    header_at = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if header_at is None or len(rows) < header_at + 2:
        return []
    header, units = rows[header_at], rows[header_at + 1]
    column = {name: i for i, name in enumerate(header)}
    return [_launch(row, column, units) for row in rows[header_at + 2 :] if len(row) == len(header)]


def _number(cell: str) -> float | None:
    try:
        return float(cell.replace(",", ""))
    except ValueError:  # "n/a", "", and the like
        return None


def _launch(row: list[str], column: dict[str, int], units: list[str]) -> KernelPerf:
    def value(metric: str) -> float | None:
        return _number(row[column[metric]]) if metric in column else None

    def unit(metric: str) -> str:
        return units[column[metric]] if metric in column else ""

    figures: dict[str, Any] = {field: value(metric) for field, metric in _FIGURES.items()}
    if figures["duration_ms"] is not None:
        figures["duration_ms"] *= _TO_MS.get(unit(_FIGURES["duration_ms"]), 1.0)
    if figures["registers"] is not None:
        figures["registers"] = int(figures["registers"])
    shared = [f"launch__shared_mem_per_block_{kind}" for kind in ("static", "dynamic")]
    if all(value(m) is not None for m in shared):  # "Kbyte/block": the unit is before the slash
        figures["shared_bytes"] = round(sum(value(m) * _TO_BYTES.get(unit(m).split("/")[0], 1) for m in shared))
    dims = {kind: [value(f"launch__{kind}_dim_{a}") for a in "xyz"] for kind in ("grid", "block", "cluster")}
    cluster = [int(v or 0) for v in dims["cluster"]]
    stalls = {
        name[len(_STALL[0]) : -len(_STALL[1])]: v
        for name in column
        if name.startswith(_STALL[0]) and name.endswith(_STALL[1]) and (v := value(name)) is not None
    }
    return KernelPerf(
        kernel=row[column["Kernel Name"]],
        grid=[int(v) for v in dims["grid"] if v is not None],
        block=[int(v) for v in dims["block"] if v is not None],
        cluster=cluster if any(cluster) else None,
        stalls=stalls,
        **figures,
    )


# ----------------------------------------------------------------------------------------- the table

ROWS: list[tuple[str, str, str]] = [  # (label, KernelPerf field, format)
    ("time (ms)", "duration_ms", ".3f"),
    ("SM throughput (% of peak)", "sm_throughput_pct", ".0f"),
    ("tensor pipe active (% of cycles)", "tensor_pipe_pct", ".0f"),
    ("L2 throughput (% of peak)", "l2_throughput_pct", ".0f"),
    ("L2 hit rate (%)", "l2_hit_pct", ".0f"),
    ("DRAM throughput (% of peak)", "dram_throughput_pct", ".0f"),
    ("shared-memory bank conflicts", "smem_bank_conflicts", ",.0f"),
    ("warps per scheduler (occupancy)", "warps_per_scheduler", ".2f"),
    ("registers per thread", "registers", "d"),
    ("shared memory per block (bytes)", "shared_bytes", ",d"),
    ("waves per SM", "waves_per_sm", ".2f"),
]
NAME_CHARS = 90  # library kernel names carry their tile and cluster shapes: keep them readable


def short_name(kernel: str) -> str:
    """A kernel's name without a C++ signature's argument list, cut to NAME_CHARS."""
    name = kernel.removeprefix("void ").split("(")[0]
    return name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…"


def _cell(value: float | int | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _dims(values: list[int] | None) -> str:
    return "×".join(map(str, values)) if values else "none"


def _stalls(k: KernelPerf) -> str:
    return ", ".join(f"{name} {v:.1f}" for name, v in k.top_stalls()) or "-"


def comparison_rows(report: PerfReport) -> tuple[list[str], list[list[str]]]:
    """The table's header (the longest launch of each side) and its rows (label, then a cell per side):
    the figures, the launch facts, the top stalls."""
    sides = [("yours", longest(report.launches))]
    if report.baseline:
        sides.append((report.library, longest(report.baseline)))
    header = [f"{who}: `{short_name(k.kernel)}`" for who, k in sides]
    rows = [[label, *(_cell(getattr(k, field), spec) for _, k in sides)] for label, field, spec in ROWS]
    facts = [("grid", lambda k: _dims(k.grid)), ("block", lambda k: _dims(k.block)),
             ("cluster", lambda k: _dims(k.cluster)), ("top stalls (warps/issue)", _stalls)]  # fmt: skip
    rows += [[label, *(show(k) for _, k in sides)] for label, show in facts]
    return header, rows


def comparison_notes(report: PerfReport) -> list[str]:
    """What the table does not hold: the time split of multi-launch sequences, why the library's launches are
    missing, the likely limiter."""
    notes = []
    if len(report.launches) > 1 or report.scratch_init_ms:
        notes.append(f"your launches: {time_split(report.launches, report.scratch_init_ms)}")
    if report.baseline and len(report.baseline) > 1:
        notes.append(f"{report.library}'s launches: {time_split(report.baseline)}")
    if report.baseline_note:
        notes.append(f"{report.library}'s kernels: {report.baseline_note}")
    if report.limiter_says:
        notes.append(f"likely limiter ({report.limiter}): {report.limiter_says}")
    where = hot_lines.hot_lines_text(report.hot_lines, report.hot_lines_note)
    registers = hot_lines.registers_text(report.register_settings, report.launches)
    return notes + [text for text in (where, registers) if text]


def comparison(report: PerfReport) -> str:
    """Markdown for the model: the table, then its notes."""
    header, rows = comparison_rows(report)
    lines = ["| | " + " | ".join(header) + " |", "| --- |" + " ---: |" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines + [f"\n{note}" for note in comparison_notes(report)])


def time_split(launches: list[KernelPerf], scratch_ms: float | None = None) -> str:
    """`name` 0.195 ms (3%), … in launch order, after the scratch buffers' reset when there is one."""
    rows = [("scratch initialisation (before each run)", scratch_ms)] if scratch_ms else []
    rows += [(f"`{short_name(k.kernel)[:48]}`", k.duration_ms) for k in launches]
    total = sum(ms or 0.0 for _, ms in rows) or 1.0
    return ", ".join(f"{name} {_cell(ms, '.3f')} ms ({100 * (ms or 0.0) / total:.0f}%)" for name, ms in rows)


# ----------------------------------------------------------------------------------------- profiling


def candidate_launches(cubin: bytes, plan: LaunchPlan, device: int, timeout_s: float
                       ) -> tuple[list[KernelPerf], ncu.Pages]:  # fmt: skip
    """Every launch of the candidate's sequence, once, on the launcher, and the profile's pages (its source page
    for the per-line counters). Raises ncu.NcuFailed."""
    kernels = sorted({launch.kernel for launch in plan.launches})
    collect = ["-k", kernel_filter(kernels), "-c", str(len(plan.launches)), *COLLECT, *SOURCE_COUNTERS]
    with tempfile.TemporaryDirectory(prefix=procs.temp_prefix("ncu")) as tmp:
        bundle = launcher.write_bundle(Path(tmp) / "bundle", cubin, plan)
        pages = ncu.profile_pages(launcher.command(bundle), collect, env=launcher.environment(device),
                                  timeout_s=timeout_s, source=True)  # fmt: skip
    launches = parse_perf(pages.raw)
    if not launches:
        raise ncu.NcuFailed(f"ncu's report held no launches of {', '.join(kernels)}: {ncu.tail(pages.raw)}")
    return launches, pages


def where_in_kernel(module: CompiledModule, arch: Arch, pages: ncu.Pages, timeout_s: float
                    ) -> tuple[list[HotLine], str | None]:  # fmt: skip
    """The hot lines of the candidate's source page, through its line table (built within `timeout_s`, the static
    stages' limit), and a note on what is missing."""
    if not pages.source:
        return [], f"no per-line counters: {pages.source_error or 'ncu printed no source page'}"
    page = hot_lines.parse_source_page(pages.source)
    if not page:
        return [], f"no per-line counters: ncu's source page listed no instruction ({ncu.tail(pages.source, 200)})"
    table = line_table(module.language, module.ptx, module.cubin, arch, procs.Budget(timeout_s))
    sources = answer_sources(module.language, module.ptx, module.cuda_source)
    kernels = sorted({launch.kernel for launch in module.plan.launches})
    return hot_lines.hot_lines(page, table, sources, kernels)


def library_launches(task: Task, device: int, timeout_s: float) -> list[KernelPerf]:
    """The baseline library's launches for one call on the task's inputs. Raises ncu.NcuFailed (a task without a
    baseline too: its perf report then holds the candidate's side alone)."""
    if task.baseline is None:
        raise ncu.NcuFailed("the task names no baseline library")
    target = [sys.executable, "-m", "tools.gpu.baseline_launch", task.name]
    raw = ncu.profile_raw(target, ["--profile-from-start", "off", *COLLECT], env=launcher.environment(device),
                          timeout_s=timeout_s)  # fmt: skip
    launches = parse_perf(raw)
    if not launches:
        raise ncu.NcuFailed(f"ncu's report held no {task.baseline.library} launches: {ncu.tail(raw)}")
    return launches


class LibraryProfiles:
    """The library's launches per task, profiled the first time a task asks (one GPU worker's cache, as its
    baseline's correctness is); a failure is kept too, so it costs one try."""

    def __init__(self, device: int):
        self.device = device
        self._by_task: dict[str, tuple[list[KernelPerf] | None, str | None]] = {}

    def get(self, task: Task, timeout_s: float) -> tuple[list[KernelPerf] | None, str | None]:
        if task.name not in self._by_task:
            try:
                self._by_task[task.name] = (library_launches(task, self.device, timeout_s), None)
            except ncu.NcuFailed as e:
                self._by_task[task.name] = (None, f"not profiled ({e})")
        return self._by_task[task.name]


def perf_stage(
    task: Task, module: CompiledModule, arch: Arch, library: LibraryProfiles, timeout_s: float,
    static_timeout_s: float, scratch_init_ms: float | None = None,
) -> tuple[StageResult, PerfReport | None]:  # fmt: skip
    """The perf pass of one correct attempt: its stage, and the typed report (None when it was skipped).
    `scratch_init_ms`: the time stage's measure of the scratch reset before each run."""
    start = time.perf_counter()
    try:
        ours, pages = candidate_launches(module.cubin, module.plan, library.device, timeout_s)
    except ncu.NcuFailed as e:
        seconds = time.perf_counter() - start
        return StageResult(name=Stage.PERF, state=StageState.SKIPPED, message=str(e), seconds=seconds), None
    hot, hot_note = where_in_kernel(module, arch, pages, static_timeout_s)
    theirs, note = library.get(task, timeout_s)
    rule = limiter(ours, theirs)
    report = PerfReport(
        launches=ours, library=task.baseline.library if task.baseline else "none", baseline=theirs, baseline_note=note,
        limiter=rule.name if rule else None, limiter_says=rule.says if rule else None,
        seconds=round(time.perf_counter() - start, 3), hot_lines=hot, hot_lines_note=hot_note,
        register_settings=hot_lines.register_settings(module.ptx, module.language), scratch_init_ms=scratch_init_ms,
    )  # fmt: skip
    stage = StageResult(name=Stage.PERF, state=StageState.PASSED, message=comparison(report), seconds=report.seconds)
    return stage, report
