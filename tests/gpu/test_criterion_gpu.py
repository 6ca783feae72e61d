"""eval.criterion=paper on a real Hopper GPU: the core GEMM and forward reference answers pass the paper's element rule
against cuBLAS's and cuDNN's own outputs on its input draws (3 fresh trials), the backward ones fail it on a few
rounding disagreements with cuDNN (1 trial on the stored tensors); the two held-out-style broken forwards (a causal
mask off by one; LSE in log2) fail both criteria, the message naming the output and, under the paper's, the rule and
the worst elements; the forward that caps its scores at 12 (log2 units) passes the paper's criterion and fails ours
(tests/fixtures/make_attention_fixtures.py says why). Not timed, not profiled: the check is what is under test.
Skipped without an sm_90 GPU."""

from __future__ import annotations

import re

import pytest

from agent.loop.feedback import feedback_message
from tasks import get_task
from tasks.catalog import CORE
from tasks.paper_protocol import STORED_SEED
from tasks.schema import Arch
from tasks.solutions import reference_answer
from tests.fixtures.make_attention_fixtures import FIXTURES, path
from tools.evaluation import Evaluation, Stage, Status
from tools.gpu.service import GpuService
from tools.options import Criterion, EvalOptions, Profile
from tools.pipeline import evaluate_answer

pytestmark = pytest.mark.hopper

ARCH = Arch.SM_90A
FIXTURE = {f.flaw: f for f in FIXTURES}
LIBRARY = {"gemm": "cuBLAS", "attention_fwd": "cuDNN", "attention_bwd": "cuDNN"}


def judged(gpu: GpuService, text: str, task: str, criterion: str) -> Evaluation:
    options = EvalOptions(criterion=criterion, seed=3, time=False, profile=Profile.OFF, timeout_s=300)
    return evaluate_answer(text, get_task(task), ARCH, options, gpu)


@pytest.mark.parametrize("task", [t for t in CORE if get_task(t).family != "attention_bwd"])
def test_the_core_gemm_and_forward_answers_pass_the_papers_rule(gpu, task):
    ev = judged(gpu, reference_answer(task, ARCH), task, "paper")
    check = ev.stage(Stage.CHECK)
    assert ev.status is Status.PASSED, ev.message
    assert ev.criterion is Criterion.PAPER and check.detail["expected"] == f"{LIBRARY[get_task(task).family]}'s output"
    assert check.detail["seeds"] == [3, 4, 5]  # three trials, each on fresh N(0,1) draws
    print(task, check.message)  # the largest absolute error per output, beside the rule's 1e-2


@pytest.mark.parametrize("task", [t for t in CORE if get_task(t).family == "attention_bwd"])
def test_the_core_backward_answers_fail_the_papers_rule_on_a_few_rounding_disagreements(gpu, task):
    """Measured on the H200 (2026-12-04): our backward, correct by rel. L2, differs from cuDNN's gradients by more
    than 1e-2 both ways on ~1e-5 of the elements (worst 0.5 at |dQ| ≈ 10, a few bf16 steps), on the stored spiky
    tensors: the rule demands bitwise-near agreement with one library's summation order. Pinned so that a change
    of rule or of kernel that moves it is seen."""
    ev = judged(gpu, reference_answer(task, ARCH), task, "paper")
    assert ev.status is Status.MISMATCH and ev.criterion is Criterion.PAPER, ev.message
    [trial] = ev.stage(Stage.CHECK).detail["trials"]
    assert trial["seed"] == STORED_SEED  # one trial, on the stored tensors
    failing = [o for o in trial["outputs"] if not o["passed"]]
    assert failing and all(o["failed"] / o["elements"] < 1e-4 and not o["unwritten"] for o in failing), failing
    assert all(o["max_abs_err"] < 2 for o in trial["outputs"]), "beyond rounding: a real error"
    print(task, ev.stage(Stage.CHECK).message.splitlines()[0])


# What each criterion names: the mask's LSE error is large in the first rows only, which rel. L2 averages away.
NAMED = {("causal_mask_off_by_one", "ptxbench"): {"O"}, ("causal_mask_off_by_one", "paper"): {"O", "LSE"},
         ("lse_in_log2", "ptxbench"): {"LSE"}, ("lse_in_log2", "paper"): {"LSE"}}  # fmt: skip


@pytest.mark.parametrize(("flaw", "criterion"), list(NAMED))
def test_a_broken_forward_fails_both_criteria_naming_its_output(gpu, flaw, criterion):
    fixture = FIXTURE[flaw]
    ev = judged(gpu, path(fixture).read_text(), fixture.task, criterion)
    assert ev.status is Status.MISMATCH, ev.message
    message = ev.stage(Stage.CHECK).message
    wrong = set(re.findall(r"(?:^|: )(\w+): MISMATCH", message, re.M))
    assert wrong == NAMED[(flaw, criterion)], message
    assert ev.criterion is Criterion(criterion)
    text = feedback_message(ev, get_task(fixture.task), ARCH, turn=1, max_turns=8, target_speedup=1.0)
    if criterion == "paper":
        assert "judged by the paper's rule" in message and "expected = cuDNN's output" in message
        assert "worst: LSE[B=" in message and "worst: LSE[B=" in text  # the model sees the elements
        assert "LSE: MISMATCH" in text and "(expected " in text
    else:
        assert "rel L2 error" in message and "paper's rule" not in message
    print(flaw, criterion, message.splitlines()[:4])


def test_the_saturating_forward_passes_the_papers_criterion_and_fails_ours(gpu):
    fixture = FIXTURE["scores_saturated_at_12"]
    text = path(fixture).read_text()
    paper = judged(gpu, text, fixture.task, "paper")
    assert paper.status is Status.PASSED, paper.message
    ours = judged(gpu, text, fixture.task, "ptxbench")
    assert ours.status is Status.MISMATCH, ours.message
    assert "O: MISMATCH" in ours.stage(Stage.CHECK).message
    print(paper.stage(Stage.CHECK).message, ours.stage(Stage.CHECK).message.splitlines()[:3], sep="\n")
