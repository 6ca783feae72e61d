"""Failures of each kind the notes must tell apart, built from real tool output: ptxas's own errors (the venv's
ptxas on fill_ok.md with one fault put in), the check's mismatch summary (tools/gpu/check.py's OutputCheck), and
compute-sanitizer's memcheck reports recorded on the H200, parsed by tools/gpu/sanitizer.py. `mined_runs` writes
run folders whose failures were repaired next turn; `HELD_OUT` are failures of the same kinds on other tasks."""

from __future__ import annotations

from pathlib import Path

from tasks.catalog import get_task
from tasks.schema import Arch
from tests.fixtures.runs import make_runs
from tools.answer import extract_solution
from tools.evaluation import Evaluation, Stage, StageResult, StageState, Status
from tools.gpu.check import OutputCheck
from tools.gpu.driver import HINTS
from tools.gpu.sanitizer import parse_findings, summary
from tools.pipeline import compile_stage
from tools.solution import Solution

AGENT = Path(make_runs.__file__).parents[1] / "agent"
RECORDED = Path(make_runs.__file__).parents[1] / "gpu" / "recorded"
FIXED = extract_solution((AGENT / "fill_ok.md").read_text())


def broken(old: str, new: str) -> Solution:
    return FIXED.model_copy(update={"source": FIXED.source.replace(old, new, 1)})


def compile_error(task: str, solution: Solution) -> Evaluation:
    stage, _ = compile_stage("ptx", solution.source, Arch.SM_90A, 60)
    assert stage.state is StageState.FAILED, "the fault put in must be one ptxas refuses"
    return _evaluation(task, Status.COMPILE_ERROR, [stage])


def mismatch(task: str, unwritten: int, rows: tuple[int, int]) -> Evaluation:
    """O and LSE wrong over the rows `rows` (a missing causal mask: every row but the last; a tile never
    stored: unwritten elements in one block of rows)."""
    dims = ["B", "H", "S", "D"]
    lines = []
    for name, shape in (("O", 4 * 32 * 4096 * 128), ("LSE", 4 * 32 * 4096)):
        bad = OutputCheck(name=name, passed=False, rel_l2=float("nan") if unwritten else 0.41, tolerance=0.01,
                          max_abs_err=2.5, max_abs_at=[0, 3, rows[0], 0], max_rel_err=9.0, max_rel_at=None,
                          out_of_tolerance=shape // 2, nonfinite=0, unwritten=unwritten and shape // 2,
                          elements=shape, bad_region=[[0, 3], [0, 31], list(rows), [0, 127]])  # fmt: skip
        lines.append(bad.summary(dims))
    return _evaluation(task, Status.MISMATCH, [*_passed_to(Stage.RUN), _failed(Stage.CHECK, "\n".join(lines))])


def fault(task: str, report: str) -> Evaluation:
    """An illegal address, located by memcheck (a report recorded on the H200)."""
    findings = parse_findings((RECORDED / report).read_text())
    run = _failed(Stage.RUN, f"CUDA_ERROR_ILLEGAL_ADDRESS: {HINTS['CUDA_ERROR_ILLEGAL_ADDRESS']}")
    memcheck = _failed(Stage.MEMCHECK, summary(findings, len(findings)))
    return _evaluation(task, Status.RUNTIME_ERROR, [*_passed_to(Stage.ABI), run, memcheck])


def hang(task: str) -> Evaluation:
    said = "no result within 120 s: a hang; warps 0-3 of block (0,0,0) wait at mbarrier.try_wait, line 40"
    return _evaluation(task, Status.TIMEOUT, [*_passed_to(Stage.ABI), _failed(Stage.RUN, said)])


def passed(task: str) -> Evaluation:
    ev = _evaluation(task, Status.PASSED, _passed_to(Stage.PROFILE))
    return ev.model_copy(update={"kernel_ms": 1.0, "baseline_ms": 1.1, "speedup": 1.1, "targets_met": True})


def _passed_to(last: Stage) -> list[StageResult]:
    order = list(Stage)
    return [StageResult(name=s, state=StageState.PASSED) for s in order[: order.index(last) + 1]]


def _failed(stage: Stage, message: str) -> StageResult:
    return StageResult(name=stage, state=StageState.FAILED, message=message)


def _evaluation(task: str, status: Status, stages: list[StageResult]) -> Evaluation:
    return Evaluation(task=get_task(task).name, arch=Arch.SM_90A, status=status, message=status.value, stages=stages)


UNKNOWN_INSTRUCTION = broken("mad.lo.s32", "mda.lo.s32")
UNKNOWN_REGISTER = broken("%r3;", "%r99;")
UNGUARDED = broken("    @%p bra DONE;\n", "")  # the answer a GPU failure came with: fill_ok.md less its guard
MINED_TASK, CAUSAL_TASK = "mha_with_lse_d128", "mha_with_lse_d128_causal"
# kind → (task, the failure, the answer it came with); each repaired next turn by fill_ok.md
KINDS = {
    "unknown instruction": (MINED_TASK, lambda t: compile_error(t, UNKNOWN_INSTRUCTION), UNKNOWN_INSTRUCTION),
    "unknown register": (MINED_TASK, lambda t: compile_error(t, UNKNOWN_REGISTER), UNKNOWN_REGISTER),
    "missing causal mask": (CAUSAL_TASK, lambda t: mismatch(t, 0, (0, 4094)), UNGUARDED),
    "tile never stored": (MINED_TASK, lambda t: mismatch(t, 1, (2048, 4095)), UNGUARDED),
    "out-of-bounds store": (MINED_TASK, lambda t: fault(t, "memcheck_ptx_oob.txt"), UNGUARDED),
    "hang": (MINED_TASK, hang, UNGUARDED),
}
# Failures of the same kinds on tasks no note was mined from, and the kind whose note should come first
HELD_OUT = {
    "unknown instruction": lambda: compile_error("mha_with_lse_d64", broken("mad.lo.s32", "madd.lo.s32")),
    "unknown register": lambda: compile_error("mha_with_lse_d64", broken("%r2,", "%r77,")),
    "missing causal mask": lambda: mismatch("mha_with_lse_d64_causal", 0, (0, 4094)),
    "tile never stored": lambda: mismatch("mha_with_lse_d64", 1, (1024, 2047)),
    "out-of-bounds store": lambda: fault("mha_with_lse_d64", "memcheck_cuda_oob.txt"),
}


def mined_runs(runs_dir: Path) -> dict[str, str]:
    """One run per kind (a failure, then fill_ok.md passing), and a GEMM run with the unknown instruction (another
    family); returns each kind's run id."""
    ids = {}
    for number, (kind, (task, failure, answer)) in enumerate(KINDS.items()):
        turns = [make_runs.turn(1, failure(task), "answer 1", answer), make_runs.turn(2, passed(task), "2", FIXED)]
        ids[kind] = f"{task}-notes-{number}"
        make_runs.write_run(runs_dir, ids[kind], task, 8, turns, "solved")
    gemm = make_runs.GEMM
    turns = [make_runs.turn(1, compile_error(gemm, UNKNOWN_INSTRUCTION), "1", UNKNOWN_INSTRUCTION),
             make_runs.turn(2, passed(gemm), "2", FIXED)]  # fmt: skip
    make_runs.write_run(runs_dir, "gemm-notes", gemm, 8, turns, "solved")
    return ids
