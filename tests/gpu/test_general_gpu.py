"""A shape-general task on a real Hopper GPU: the GEMM reference answer passes every workload of gemm_n7168_k5120_all
(speedup the minimum over them, the geomean beside it, the targets executed at each), and an answer with M hard-coded
(tests/fixtures/answers/cuda_gemm_m8192.md) passes at M = 8192 and is reported wrong at the other four, naming them.
Skipped without an sm_90 GPU. `-s` prints the per-workload rows."""

from __future__ import annotations

import math

import pytest

from agent.loop.feedback import feedback_message
from tasks.catalog import get_task
from tasks.schema import Arch
from tasks.solutions import reference_answer
from tests.tools.files import read_answer
from tools.evaluation import Evaluation, Stage, Status
from tools.options import EvalOptions, Profile
from tools.pipeline import evaluate_answer

pytestmark = pytest.mark.hopper

TASK = get_task("gemm_n7168_k5120_all")
ARCH = Arch.SM_90A
MEMBERS = [m.name for m in TASK.workloads]


def show(ev: Evaluation) -> None:
    print(f"\n{ev.task}: {ev.status}, speedup {ev.speedup}, geomean {ev.speedup_geomean}, shown {ev.shown_workload}")
    for w in ev.workloads or []:
        print(f"  {w.name:<24} {w.status:<10} kernel {w.kernel_ms} ms, baseline {w.baseline_ms} ms, "
              f"speedup {w.speedup}, targets {w.targets_met}")  # fmt: skip


def test_the_reference_answer_passes_every_workload(gpu):
    options = EvalOptions(seed=0, profile=Profile.COUNTS)
    ev = evaluate_answer(reference_answer(TASK.name, ARCH), TASK, ARCH, options, gpu)
    show(ev)
    assert ev.status is Status.PASSED, ev.message
    assert [(w.name, w.status) for w in ev.workloads] == [(m, Status.PASSED) for m in MEMBERS]
    assert all(w.targets_met for w in ev.workloads) and ev.targets_met is True
    speedups = [w.speedup for w in ev.workloads]
    assert None not in speedups and ev.speedup == min(speedups)
    assert ev.speedup_geomean == pytest.approx(math.exp(sum(map(math.log, speedups)) / len(speedups)))
    assert ev.shown_workload == MEMBERS[speedups.index(min(speedups))]
    assert ev.device and "H" in ev.device


def test_an_answer_with_m_hard_coded_is_wrong_at_the_other_four_workloads(gpu):
    options = EvalOptions(seed=0, time=False, profile=Profile.OFF)  # correctness is the point: not timed
    ev = evaluate_answer(read_answer("cuda_gemm_m8192.md"), TASK, ARCH, options, gpu)
    show(ev)
    assert ev.status is Status.MISMATCH and not ev.correct and ev.speedup is None
    assert [w.status for w in ev.workloads] == [Status.MISMATCH] * 4 + [Status.PASSED]
    wrong = MEMBERS[:4]
    assert [w.name for w in ev.failing_workloads()] == wrong
    assert ev.message.startswith("wrong at 4 of 5 workloads of gemm_n7168_k5120: ")
    assert all(name in ev.message for name in wrong) and "correct at gemm_n7168_k5120 (M=8192)" in ev.message
    assert ev.shown_workload == "gemm_n7168_k5120_m70"
    assert "never written" in ev.stage(Stage.CHECK).message  # the columns its blocks never reach
    text = feedback_message(ev, TASK, ARCH, turn=1, max_turns=4, target_speedup=1.0)
    assert "Wrong at 4 of 5 workloads: " + ", ".join(wrong) in text
    assert "| gemm_n7168_k5120 | 8192 | passed |" in text
