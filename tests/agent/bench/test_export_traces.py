"""`python -m agent.export_traces`: a FlashInfer-Bench GEMM definition with three workloads runs through agent.solve
(real static stages; the GPU's a stand-in replaying recorded stages, or none), and its attempts export as
FlashInfer-Bench traces that their own Trace model reads back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent import export_traces
from tasks import flashinfer_bench as fib
from tests.agent.helpers import recorded_evaluations, solve, write_script
from tests.tasks.test_flashinfer_bench import GEMM, their_models
from tools.evaluation import Evaluation, Status
from tools.gpu.base import GpuOutcome
from tools.gpu.metrics import GpuMetrics
from tools.gpu.stages import GPU_STAGES

DEFINITION = "gemm_bf16_n4096_k4096"


@pytest.fixture(autouse=True)
def loaded_files_stay_here(monkeypatch):
    monkeypatch.setenv(fib.ENV, "")


class StandInGpu:
    """A GPU that answers every module with one recorded evaluation's GPU stages (the static ones are real)."""

    def __init__(self, evaluation: Evaluation):
        self.evaluation = evaluation

    def unavailable_reason(self, arch) -> str | None:
        return None

    def evaluate(self, task, arch, module, options) -> GpuOutcome:
        ev = self.evaluation
        stages = [s for s in ev.stages if s.name in GPU_STAGES]
        return GpuOutcome(status=ev.status, message=ev.message, stages=stages, metrics=GpuMetrics.of(ev),
                          device="NVIDIA H200")  # fmt: skip

    def device_info(self) -> None:
        return None

    def close(self) -> None:
        pass


def timed_alone() -> Evaluation:
    """A passed attempt of a task without a baseline: timed, no baseline time, no speedup."""
    ev = recorded_evaluations()["passed_fast"]
    return ev.model_copy(update={"baseline_ms": None, "speedup": None, "speedup_interval": None})


def export(runs_dir: Path, out: Path, *extra: str) -> int:
    return export_traces.main([str(runs_dir), f"out={out}", f"tasks={GEMM}", *extra])


def read_traces(out: Path) -> list[dict]:
    path = out / "traces" / "ptxbench" / "gemm" / f"{DEFINITION}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_on_cpu_the_static_stages_run_and_unverified_attempts_are_not_traces(runs_dir, tmp_path, capsys):
    code, folder = solve([f"task={GEMM}", "arch=sm_90a", "llm=reference", f"runs_dir={runs_dir}"])
    assert code == 0
    [turn] = folder.trajectory().turns
    assert turn.evaluation.status is Status.UNVERIFIED and turn.evaluation.task == f"{DEFINITION}_m256"
    assert export(runs_dir, tmp_path / "out") == 0
    printed = capsys.readouterr().out
    assert "1 unverified attempt(s) not written" in printed and "no traces written" in printed
    # The definition and its workloads are written as a trace set holds them, and read back as ours and theirs.
    written = tmp_path / "out" / "definitions" / "gemm" / f"{DEFINITION}.json"
    assert fib.load_definition(written).name == DEFINITION
    workloads = (tmp_path / "out" / "workloads" / "gemm" / f"{DEFINITION}.jsonl").read_text().splitlines()
    assert [json.loads(w)["workload"]["axes"]["M"] for w in workloads] == [256, 248, 8192]


def test_the_shape_general_task_of_a_file_runs_its_static_stages_on_cpu(runs_dir):
    """task=FILE#all: one answer for every workload of the definition; without a GPU, judged statically only."""
    code, folder = solve([f"task={GEMM}#all", "arch=sm_90a", "llm=reference", f"runs_dir={runs_dir}"])
    assert code == 0
    [turn] = folder.trajectory().turns
    config = folder.trajectory().config
    assert (config.task, config.definition, config.workload) == (f"{DEFINITION}_all", DEFINITION, "all")
    assert turn.evaluation.status is Status.UNVERIFIED, turn.evaluation.message


def test_every_status_exports_as_theirs_and_reloads(runs_dir, tmp_path):
    theirs = their_models()
    recorded = recorded_evaluations()
    for gpu in (StandInGpu(timed_alone()), StandInGpu(recorded["mismatch"]), StandInGpu(recorded["timeout"])):
        code, _ = solve([f"task={GEMM}", "arch=sm_90a", "llm=reference", f"runs_dir={runs_dir}", "max_turns=1"], gpu)
        assert code == 0
    broken = write_script(tmp_path / "broken.json", ["```ptx\n.version 8.0\nnot ptx\n```\n```json\n{}\n```"])
    code, _ = solve([f"task={GEMM}", "arch=sm_90a", "llm=scripted", f"llm.path={broken}", f"runs_dir={runs_dir}",
                     "max_turns=1"])  # fmt: skip
    assert code == 0
    out = tmp_path / "out"
    assert export(runs_dir, out) == 0
    traces = read_traces(out)
    by_status = {t["evaluation"]["status"]: t for t in traces}
    assert set(by_status) == {"PASSED", "INCORRECT_NUMERICAL", "TIMEOUT", "COMPILE_ERROR"}
    for t in traces:
        parsed = theirs.Trace.model_validate(t)  # their own model reads every one
        assert parsed.definition == DEFINITION and parsed.workload.axes == {"M": 256}
        assert parsed.workload.uuid == "6f1c1a52-4d0e-4a57-9b43-1f6e1f4b0a01"  # the file's own workload
        assert json.loads(fib.Trace.model_validate_json(json.dumps(t)).model_dump_json()) == t  # ours round-trips
    passed = by_status["PASSED"]["evaluation"]
    assert passed["performance"] == {"latency_ms": 0.7, "reference_latency_ms": 0.0, "speedup_factor": 0.0}
    assert "no baseline" in passed["log"] and passed["environment"]["hardware"] == "NVIDIA H200"
    assert 0 < passed["correctness"]["extra"]["rel_l2"]["C"] <= passed["correctness"]["extra"]["tolerance"]
    wrong = by_status["INCORRECT_NUMERICAL"]["evaluation"]
    assert wrong["performance"] is None and wrong["correctness"]["max_relative_error"] == "NaN"  # unwritten output
    assert by_status["COMPILE_ERROR"]["evaluation"]["correctness"] is None
    assert len({t["solution"] for t in traces}) == len(traces)  # one solution name per attempt


def test_a_run_of_a_file_task_needs_its_file(runs_dir, tmp_path, capsys, monkeypatch):
    solve([f"task={GEMM}", "arch=sm_90a", "llm=reference", f"runs_dir={runs_dir}"])
    monkeypatch.setattr(fib, "_REGISTRY", {})
    monkeypatch.setenv(fib.ENV, "")
    assert export_traces.main([str(runs_dir), f"out={tmp_path / 'out'}"]) == 2
    assert "give it with tasks=FILE" in capsys.readouterr().err


def test_catalog_runs_export_with_a_stable_workload(runs_dir, tmp_path):
    theirs = their_models()
    gpu = StandInGpu(recorded_evaluations()["passed_fast"])
    solve(["task=gemm_n4096_k4096_m8192", "arch=sm_90a", "llm=reference", f"runs_dir={runs_dir}"], gpu)
    out = tmp_path / "out"
    assert export_traces.main([str(runs_dir), f"out={out}"]) == 0
    [trace] = [json.loads(x) for x in (out / "traces" / "ptxbench" / "gemm" / "gemm_n4096_k4096.jsonl").open()]
    parsed = theirs.Trace.model_validate(trace)
    assert parsed.workload.axes == {"M": 8192} and set(parsed.workload.inputs) == {"A", "B"}
    assert parsed.evaluation.performance.speedup_factor == pytest.approx(1.07)
    assert not (out / "definitions").exists()  # a catalog task has no FlashInfer-Bench file to copy


def test_correctness_is_the_worst_over_trials_and_outputs():
    from agent.bench.traces import correctness
    from tasks.catalog import get_task
    from tools.evaluation import Stage, StageResult, StageState

    def out(name: str, rel_l2: float, abs_err: float, rel_err: float) -> dict:
        return {"name": name, "rel_l2": rel_l2, "max_abs_err": abs_err, "max_rel_err": rel_err}

    trials = [{"seed": 0, "outputs": [out("O", 1e-3, 0.5, 0.01), out("LSE", 2e-2, 0.1, 0.2)]},
              {"seed": 1, "outputs": [out("O", 4e-3, 0.25, 0.03), out("LSE", 1e-3, 0.75, 0.1)]}]  # fmt: skip
    stages = [StageResult(name=Stage.CHECK, state=StageState.FAILED, detail={"trials": trials})]
    ev = Evaluation(task="attn_fwd", arch="sm_90a", status=Status.MISMATCH, stages=stages)
    c = correctness(ev, get_task("attn_fwd"))
    assert (c.max_absolute_error, c.max_relative_error) == (0.75, 0.2)
    assert c.extra["rel_l2"] == {"O": 4e-3, "LSE": 2e-2}


def test_correctness_under_the_papers_rule_gives_its_failing_elements():
    from agent.bench.traces import correctness
    from tasks.catalog import get_task
    from tools.evaluation import Stage, StageResult, StageState

    def out(name: str, failed: int, abs_err: float, rel_err: float) -> dict:  # an ElementCheck as the worker dumps it
        return {"name": name, "failed": failed, "elements": 1000, "required": 1.0, "atol": 0.01, "rtol": 0.01,
                "max_abs_err": abs_err, "max_rel_err": rel_err}  # fmt: skip

    trials = [{"seed": 3, "outputs": [out("O", 0, 0.005, 0.01), out("LSE", 7, 0.5, 0.2)]}]
    detail = {"trials": trials, "criterion": "paper", "expected": "cuDNN's output"}
    stages = [StageResult(name=Stage.CHECK, state=StageState.FAILED, detail=detail)]
    ev = Evaluation(task="attn_fwd", arch="sm_90a", status=Status.MISMATCH, stages=stages)
    c = correctness(ev, get_task("attn_fwd"))
    assert (c.max_absolute_error, c.max_relative_error) == (0.5, 0.2)
    assert c.extra["criterion"].startswith("paper") and (c.extra["atol"], c.extra["rtol"]) == (0.01, 0.01)
    assert c.extra["failed_elements"] == {"O": 0, "LSE": 7} and "rel_l2" not in c.extra
