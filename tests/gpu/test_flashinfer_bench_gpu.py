"""A FlashInfer-Bench GEMM definition (tests/fixtures/flashinfer_bench: var axis M, three workloads, no baseline) on a
real Hopper GPU: our GEMM's reference answer passes every workload against the definition's own `run` (executed in
the GPU worker, a child process that finds the file task by name), timed alone, with no speedup; through agent.solve
with every stage, its attempt exports as a PASSED trace that FlashInfer-Bench's Trace model reads back (ours, where
their package is not installed). Skipped without an sm_90 GPU."""

from __future__ import annotations

import importlib.util
import json

import pytest

from agent import export_traces
from tasks import flashinfer_bench as fib
from tasks.catalog import get_task, resolve_names
from tasks.schema import Arch
from tasks.solutions import reference_answer
from tests.agent.helpers import solve
from tests.tasks.test_flashinfer_bench import GEMM, their_models
from tools.evaluation import Stage, StageState, Status
from tools.options import EvalOptions
from tools.pipeline import evaluate_answer

pytestmark = pytest.mark.hopper


@pytest.fixture(autouse=True)
def loaded_files_stay_here(monkeypatch):
    monkeypatch.setenv(fib.ENV, "")


def test_the_reference_answer_passes_every_workload_timed_alone(gpu):
    for name in resolve_names([str(GEMM)], files=True):
        task = get_task(name)
        ev = evaluate_answer(reference_answer(name, Arch.SM_90A), task, Arch.SM_90A, EvalOptions(trials=2), gpu)
        assert ev.status is Status.PASSED, ev.message
        assert ev.kernel_ms and ev.kernel_ms > 0 and ev.speedup is None and ev.baseline_ms is None
        assert ev.stage(Stage.TIME).state is StageState.PASSED and "no baseline" in ev.stage(Stage.TIME).message
        assert ev.targets_met is True


def test_solve_with_every_stage_exports_a_passed_trace(tmp_path):
    runs = tmp_path / "runs"
    code, folder = solve([f"task={GEMM}", "arch=sm_90a", "llm=reference", f"runs_dir={runs}", "max_turns=1"])
    assert code == 0
    [turn] = folder.trajectory().turns
    assert turn.evaluation.status is Status.PASSED, turn.evaluation.message
    out = tmp_path / "traces"
    assert export_traces.main([str(runs), f"out={out}", f"tasks={GEMM}"]) == 0
    [line] = (out / "traces" / "ptxbench" / "gemm" / "gemm_bf16_n4096_k4096.jsonl").read_text().splitlines()
    # Their own model where the package is installed (pip install --no-deps flashinfer-bench==0.1.2), else ours.
    model = their_models().Trace if importlib.util.find_spec("flashinfer_bench") else fib.Trace
    trace = model.model_validate(json.loads(line))
    assert trace.evaluation.status.value == "PASSED"
    assert trace.evaluation.performance.latency_ms == pytest.approx(turn.evaluation.kernel_ms)
    assert trace.evaluation.performance.speedup_factor == 0.0  # no baseline: not measured
    assert "H200" in trace.evaluation.environment.hardware or "H100" in trace.evaluation.environment.hardware


def test_the_files_shape_general_task_passes_every_workload(tmp_path):
    """task=FILE#all: one answer judged at M = 256, 248 and 8192, each against the definition's own `run`."""
    code, folder = solve([f"task={GEMM}#all", "arch=sm_90a", "llm=reference", f"runs_dir={tmp_path}", "max_turns=1"])
    assert code == 0
    [turn] = folder.trajectory().turns
    ev = turn.evaluation
    assert ev.status is Status.PASSED, ev.message
    assert [(w.dims["M"], w.status) for w in ev.workloads] == [(256, Status.PASSED), (248, Status.PASSED),
                                                               (8192, Status.PASSED)]  # fmt: skip
    assert ev.speedup is None and all(w.kernel_ms and w.speedup is None for w in ev.workloads)  # timed alone
