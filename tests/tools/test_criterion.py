"""eval.criterion without a GPU: the paper's input draws per family (tasks/paper_protocol.py, tasks/inputs.py), its
trial counts and when a given `trials` overrides them, the setting's way through `python -m tools.evaluate`, the
repair loop's settings and the pipeline to the GPU service, one line for a bad value, and the record: which criterion
judged an evaluation, with a plain ptxbench record unchanged. The rule itself: tests/tools/gpu/test_check_elements.py;
on the H200: tests/gpu/test_criterion_gpu.py."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest
import torch

from agent.loop.config import EvalConfig
from agent.solve import main as solve
from tasks.catalog import get_task
from tasks.inputs import draw_inputs
from tasks.paper_protocol import PAPER, STORED_SEED, paper_check, trial_seed
from tasks.schema import Arch, Task
from tasks.solutions import answer_path, reference_answer
from tests.adversarial.helpers import fill_ok
from tools.evaluate import main as evaluate_main
from tools.evaluation import Evaluation, Stage, StageResult, StageState, Status
from tools.gpu.base import GpuOutcome
from tools.options import Criterion, EvalOptions
from tools.pipeline import build, extract, gpu_stages

ARCH = Arch.SM_90A
SMALL = {"B": 1, "H": 2, "HKV": 2, "S": 256}


def test_every_family_has_the_papers_protocol():
    assert set(PAPER) == set(typing.get_args(Task.model_fields["family"].annotation))
    assert [PAPER[f].trials for f in ("gemm", "attention_fwd", "attention_bwd")] == [3, 3, 1]
    assert PAPER["fp8_attention_fwd"].matched == 0.995 and all(
        c.matched == 1.0 for f, c in PAPER.items() if f != "fp8_attention_fwd"
    )


def _largest(task: str, spikes: bool, seed: int = 5) -> float:
    tensors = draw_inputs(get_task(task), {**get_task(task).dims, **SMALL}, seed, "cpu", spikes=spikes)
    return max(float(tensors[n].float().abs().max()) for n in ("Q", "K", "V"))


def test_the_papers_forward_inputs_are_plain_normal_and_ours_spiky():
    """196,608 values per tensor: plain N(0,1) stays under 6; the spikes (N(0,100), one in a thousand) go past 16."""
    assert not paper_check("attention_fwd").spikes and paper_check("attention_bwd").spikes
    assert _largest("mha_with_lse_d128", spikes=False) < 6
    assert _largest("mha_with_lse_d128", spikes=True) > 16


def test_the_backwards_stored_tensors_are_the_same_for_every_attempt():
    bwd, fwd = paper_check("attention_bwd"), paper_check("attention_fwd")
    assert trial_seed(bwd, 0, seed=11) == trial_seed(bwd, 0, seed=99) == STORED_SEED
    assert trial_seed(bwd, 1, seed=11) == 12  # a trial beyond the paper's one: a fresh draw
    assert [trial_seed(fwd, t, seed=11) for t in range(3)] == [11, 12, 13]  # fresh each trial, as ours
    task = get_task("mha_bwd_d128")
    dims = {**task.dims, **SMALL}
    a, b = (draw_inputs(task, dims, trial_seed(bwd, 0, seed=s), "cpu", spikes=bwd.spikes) for s in (11, 99))
    assert all(torch.equal(a[n], b[n]) for n in a)
    assert float(a["dO"].float().abs().max()) > 16  # spiky, O and LSE derived from them


def test_the_papers_trial_counts_apply_unless_trials_is_given():
    paper = EvalOptions(criterion="paper")
    assert [paper.for_family(f).trials for f in ("gemm", "attention_fwd", "attention_bwd", "fp8_gemm")] == [3, 3, 1, 1]
    assert EvalOptions(criterion="paper", trials=3).for_family("attention_bwd").trials == 3  # given: kept
    assert EvalOptions().for_family("attention_bwd").trials == 3  # ours: unchanged
    resolved = paper.for_family("attention_bwd")
    assert resolved.for_family("attention_bwd") == resolved  # resolved once, it travels as a given count
    sent = EvalOptions.model_validate_json(resolved.model_dump_json())
    assert (sent.criterion, sent.trials) == (Criterion.PAPER, 1)


def test_the_loops_settings_keep_trials_unset_unless_given():
    assert EvalConfig(criterion="paper").options(1.0).for_family("attention_bwd").trials == 1
    assert EvalConfig(criterion="paper", trials=2).options(1.0).for_family("attention_bwd").trials == 2
    assert EvalConfig().options(1.2).perf_below == 1.2  # the run's target still fills profile=auto's bar


class RecordingGpu:
    """Answers every request as passed, keeping the options the pipeline sent."""

    def __init__(self):
        self.options: list[EvalOptions] = []

    def unavailable_reason(self, arch: Arch) -> None:
        return None

    def evaluate(self, task, arch, module, options: EvalOptions) -> GpuOutcome:
        self.options.append(options)
        stages = [StageResult(name=s, state=StageState.PASSED) for s in (Stage.RUN, Stage.CHECK)]
        return GpuOutcome(status=Status.PASSED, message="correct", stages=stages, device="recorded")


@pytest.mark.parametrize(("task", "trials"), [("mha_bwd_d128", 1), ("gemm_n7168_k5120", 3)])
def test_the_pipeline_sends_the_criterion_and_the_papers_count(task, trials):
    t = get_task(task)
    static = build(extract(t, ARCH, answer=reference_answer(task, ARCH)), t, ARCH, EvalOptions())
    gpu = RecordingGpu()
    gpu_stages(static, t, ARCH, EvalOptions(criterion="paper", time=False), gpu)
    assert [(o.criterion, o.trials) for o in gpu.options] == [(Criterion.PAPER, trials)]


def _first_error(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return next(line for line in err.splitlines() if line.startswith("error:"))


def test_a_bad_criterion_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture):
    answer = tmp_path / "answer.md"
    answer.write_text(fill_ok())
    assert evaluate_main([str(answer), "--task", "gemm", "--arch", "sm_90a", "--criterion", "papr"]) == 2
    assert _first_error(capsys) == "error: invalid options: --criterion: Input should be 'ptxbench' or 'paper' " \
        "(got 'papr')"  # fmt: skip
    script = tmp_path / "script.json"
    script.write_text(json.dumps([fill_ok()]))
    runs_dir = tmp_path / "runs"
    args = ["task=gemm", "arch=sm_90a", "eval.gpu=false", f"runs_dir={runs_dir}", "llm=scripted", f"llm.path={script}"]
    assert solve([*args, "eval.criterion=papr"]) == 2
    line = _first_error(capsys)
    assert line.startswith("error: invalid settings: eval.criterion: Input should be 'ptxbench' or 'paper'"), line
    assert not runs_dir.exists()


def test_the_loop_takes_the_criterion_setting(tmp_path: Path, capsys: pytest.CaptureFixture):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([fill_ok()]))
    runs_dir = tmp_path / "runs"
    args = ["task=gemm", "arch=sm_90a", "eval.gpu=false", f"runs_dir={runs_dir}", "llm=scripted", f"llm.path={script}",
            "max_turns=1", "eval.criterion=paper"]  # fmt: skip
    assert solve(args) == 0, capsys.readouterr().err
    (config,) = runs_dir.glob("*/config.json")
    assert json.loads(config.read_text())["eval"]["criterion"] == "paper"


def test_the_evaluate_command_takes_the_criterion(capsys: pytest.CaptureFixture):
    """Without a GPU the static stages run and the GPU stages are skipped; the flag is accepted."""
    path = answer_path("gemm_n7168_k5120", ARCH)
    assert evaluate_main([str(path), "--task", "gemm", "--arch", "sm_90a", "--criterion", "paper", "--json"]) == 0
    ev = Evaluation.model_validate_json(capsys.readouterr().out)
    assert ev.stage(Stage.COMPILE).state is StageState.PASSED


def _judged(detail: dict, state: StageState = StageState.PASSED) -> Evaluation:
    status = Status.PASSED if state is StageState.PASSED else Status.MISMATCH
    return Evaluation(task="gemm", arch=ARCH, status=status,
                      stages=[StageResult(name=Stage.CHECK, state=state, detail=detail)])  # fmt: skip


def test_the_record_says_which_criterion_judged_it():
    assert _judged({"trials": []}).criterion is Criterion.PTXBENCH
    assert _judged({"trials": [], "criterion": "paper"}, StageState.FAILED).criterion is Criterion.PAPER
    assert Evaluation(task="gemm", arch=ARCH, status=Status.UNVERIFIED).criterion is None
    skipped = _judged({}, StageState.SKIPPED).model_copy(update={"status": Status.UNVERIFIED})
    assert skipped.criterion is None
    record = json.loads(_judged({"trials": []}).model_dump_json())
    assert "criterion" not in record and "criterion" not in record["stages"][0]["detail"]  # ours: as before


def test_the_task_prompt_states_the_rule_that_judges():
    from agent.loop.prompts import task_prompt

    def prompt(task: str, criterion: Criterion, trials: int) -> str:
        return task_prompt(get_task(task), ARCH, trials=trials, target_speedup=1.0, max_turns=8, criterion=criterion)

    ours = prompt("mha_with_lse_d128", Criterion.PTXBENCH, 3)
    assert "by its relative L2 error" in ours and "Bernoulli(0.001)" in ours and "paper's rule" not in ours
    forward = prompt("mha_with_lse_d128", Criterion.PAPER, 3)
    assert "element by element with cuDNN's output on the same inputs" in forward
    assert "on 3 runs with fresh random inputs (Q, K, V: N(0, 1))." in forward and "relative L2" not in forward
    backward = prompt("mha_bwd_d128", Criterion.PAPER, 1)
    assert "on 1 run with the same stored inputs (Q, K, V, dO: N(0, 1) + N(0, 100)·Bernoulli(0.001)" in backward
    assert "99.5% of the elements must pass" in prompt("fp8_mha_with_lse_d128", Criterion.PAPER, 1)
    assert "element by element with cuBLAS's output" in prompt("gemm", Criterion.PAPER, 3)


def test_a_service_request_carries_the_criterion_and_leaves_trials_to_it():
    """The HTTP service's request (the MCP server and the RL reward read the same EvalOptions): only the fields the
    request gave are set, so the paper's count still applies."""
    from tools.serve.schema import EvaluateRequest

    body = {"task": "mha_bwd_d128", "arch": "sm_90a", "answer": "x", "options": {"criterion": "paper"}}
    options = EvaluateRequest.model_validate_json(json.dumps(body)).eval_options(default_profile="off")
    assert options.criterion is Criterion.PAPER and options.for_family("attention_bwd").trials == 1
    body["options"] = {"criterion": "paper", "trials": 2}
    assert EvaluateRequest.model_validate(body).eval_options("off").for_family("attention_bwd").trials == 2
