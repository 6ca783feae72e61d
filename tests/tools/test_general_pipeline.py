"""A shape-general task through the pipeline without a GPU: its static stages at each workload (real ptxas, NVRTC,
nvdisasm), its GPU stages as one request per workload (a scripted Gpu here; tests/gpu/test_general_gpu.py on the
H200), the scoring rule (correct only when every workload is, speedup the minimum with the geomean beside it), the
perf pass on the slowest, the feedback's rows, and the record's round trip (plain tasks' records unchanged)."""

from __future__ import annotations

import json
import math
from concurrent.futures import ThreadPoolExecutor

import pytest

from agent.loop.feedback import feedback_message, outcome_summary
from tasks.catalog import get_task
from tasks.schema import Arch
from tasks.solutions import reference_answer
from tests.tools.files import read_answer
from tools.evaluate import render
from tools.evaluation import GENERAL_FIELDS, PAPER_FIGURE_FIELDS, Evaluation, Stage, StageResult, StageState, Status
from tools.gpu.base import CompiledModule, GpuOutcome
from tools.gpu.metrics import GpuMetrics, TargetMetrics, TimingMetrics
from tools.options import EvalOptions, Profile
from tools.pipeline import at_workloads, build, combine, evaluate_answer, evaluation, extract, gpu_stages, on_gpu
from tools.pool.dask import DaskPool

GENERAL = get_task("gemm_n7168_k5120_all")
MEMBERS = [m.name for m in GENERAL.workloads]
ARCH = Arch.SM_90A


@pytest.fixture(scope="module")
def static():
    """The GEMM reference answer's static record for the general task (one compile, a plan per workload)."""
    return build(extract(GENERAL, ARCH, answer=reference_answer(GENERAL.name, ARCH)), GENERAL, ARCH, EvalOptions())


@pytest.fixture(scope="module")
def unverified() -> dict[str, Evaluation]:
    answers = {"reference": reference_answer(GENERAL.name, ARCH), "m8192": read_answer("cuda_gemm_m8192.md")}
    with ThreadPoolExecutor(len(answers)) as pool:
        futures = {k: pool.submit(evaluate_answer, a, GENERAL, ARCH) for k, a in answers.items()}
    return {k: f.result() for k, f in futures.items()}


# ------------------------------------------------------------------------------------------ static stages


def test_the_static_stages_plan_at_every_workload(static):
    assert static.failed is None and static.module is not None
    assert list(static.plans) == MEMBERS
    assert [static.plans[m].buffer("C").shape for m in MEMBERS] == [[m, 7168] for m in (70, 232, 972, 2379, 8192)]
    grids = [static.plans[m].launches[0].grid[0] for m in MEMBERS]
    assert grids == [28, 56, 132, 132, 132]  # min(132, cdiv(M,128)·cdiv(N,256)), M from each workload
    assert static.plan == static.plans["gemm_n7168_k5120"]  # the task reads as its largest workload
    abi = next(s for s in static.stages if s.name is Stage.ABI)
    assert abi.state is StageState.PASSED and abi.detail["workloads"] == MEMBERS


@pytest.mark.parametrize("answer", ["reference", "m8192"])
def test_without_a_gpu_every_workload_is_unverified(unverified, answer):
    ev = unverified[answer]
    assert ev.status is Status.UNVERIFIED and not ev.correct and ev.task == GENERAL.name
    assert [(w.name, w.status) for w in ev.workloads] == [(m, Status.UNVERIFIED) for m in MEMBERS]
    assert [w.dims["M"] for w in ev.workloads] == [70, 232, 972, 2379, 8192]
    assert ev.message == "at every workload (5): compiled and checked statically; GPU stages skipped: no GPU service " \
        "in this process"  # fmt: skip
    assert [s.state for s in ev.stages[:4]] == [StageState.PASSED] * 4
    assert ev.speedup is None and ev.speedup_geomean is None and ev.shown_workload == MEMBERS[0]


def test_a_launch_spec_that_fails_at_some_workloads_names_them():
    answer = read_answer("cuda_gemm_m8192.md").replace('"cdiv(M,64)*cdiv(N,64)"', '"(cdiv(M,512)-1)*cdiv(N,64)"')
    ev = evaluate_answer(answer, GENERAL, ARCH)
    assert ev.status is Status.EXTRACT_ERROR and ev.workloads is None
    message = ev.stage(Stage.EXTRACT).message
    assert message.startswith("the launch spec fails at 2 of 5 workloads:\nat gemm_n7168_k5120_m70 (M=70), "
                              "gemm_n7168_k5120_m232 (M=232): the launch spec cannot run:")  # fmt: skip
    assert "m972" not in message and "M=8192" not in message


def test_per_workload_problems_are_said_once_each_with_where():
    text = at_workloads({"a (M=1)": "grid too small", "b (M=2)": "grid too small", "c (M=3)": "no entry"})
    assert text == "at a (M=1), b (M=2): grid too small\nat c (M=3): no entry"


# ------------------------------------------------------------------------------------------ the GPU stages


class ScriptedGpu:
    """A GPU that answers each workload from a script: member → (status, speedup, targets met); records the requests
    (member, its plan's C shape, the profile asked for)."""

    def __init__(self, script: dict[str, tuple[Status, float | None, bool]]):
        self.script = script
        self.requests: list[tuple[str, list[int], Profile]] = []

    def unavailable_reason(self, arch: Arch) -> None:
        return None

    def evaluate(self, task, arch, module: CompiledModule, options: EvalOptions) -> GpuOutcome:
        self.requests.append((task.name, module.plan.buffer("C").shape, options.profile))
        status, speedup, met = self.script[task.name]
        passed = StageState.PASSED
        if status is not Status.PASSED:
            failed = [StageResult(name=Stage.RUN, state=passed),
                      StageResult(name=Stage.CHECK, state=StageState.FAILED, message=f"C wrong at {task.name}",
                                  detail={"bad_elements": 7})]  # fmt: skip
            return GpuOutcome(status=status, message=f"mismatch at {task.name}", stages=failed, device="scripted")
        timed = speedup is not None  # else not timed: no time stage, no figures
        ran = (Stage.RUN, Stage.CHECK, *((Stage.TIME,) if timed else ()), Stage.PROFILE)
        stages = [StageResult(name=s, state=passed) for s in ran]
        timing = (
            TimingMetrics(kernel_ms=1.0, baseline_ms=speedup, speedup=speedup, interval=[speedup] * 2, tflops=376.0)
            if timed
            else None
        )
        metrics = GpuMetrics(timing=timing, targets=TargetMetrics(met=met, counts={"wgmma": 5}, paper_tag=met))
        return GpuOutcome(status=status, message="correct", stages=stages, metrics=metrics, device="scripted")

    def device_info(self) -> None:
        return None

    def close(self) -> None:
        pass


def passing(speedups: list[float], met: bool = True) -> dict[str, tuple[Status, float | None, bool]]:
    return {m: (Status.PASSED, s, met) for m, s in zip(MEMBERS, speedups, strict=True)}


def test_each_workload_is_one_request_with_its_own_plan(static):
    gpu = ScriptedGpu(passing([1.5, 1.2, 1.1, 1.3, 1.4]))
    ev = gpu_stages(static, GENERAL, ARCH, EvalOptions(profile=Profile.COUNTS), gpu)
    shapes = [[m, 7168] for m in (70, 232, 972, 2379, 8192)]
    assert [(name, shape) for name, shape, _ in gpu.requests] == list(zip(MEMBERS, shapes, strict=True))
    assert ev.status is Status.PASSED and ev.task == GENERAL.name and ev.device == "scripted"


def test_scoring_takes_the_minimum_and_the_geomean(static):
    speedups = [1.5, 1.2, 0.9, 1.3, 2.0]
    ev = gpu_stages(static, GENERAL, ARCH, EvalOptions(profile=Profile.COUNTS), ScriptedGpu(passing(speedups)))
    assert ev.correct and ev.speedup == 0.9 and ev.speedup_interval == [0.9, 0.9]
    assert ev.speedup_geomean == pytest.approx(math.prod(speedups) ** (1 / 5))
    assert ev.shown_workload == "gemm_n7168_k5120_m972"  # the slowest: its stages and figures are the record's
    assert [w.speedup for w in ev.workloads] == speedups and ev.targets_met is True
    assert ev.message == "correct at all 5 workloads of gemm_n7168_k5120; speedup 0.90× at the slowest, " \
        f"gemm_n7168_k5120_m972 (M=972), geomean {ev.speedup_geomean:.2f}×"  # fmt: skip
    assert ev.solved(0.9) and not ev.solved(1.0)  # the minimum decides


def test_targets_are_met_only_when_met_at_every_workload(static):
    script = passing([1.5, 1.2, 1.1, 1.3, 1.4])
    script["gemm_n7168_k5120_m70"] = (Status.PASSED, 1.5, False)
    ev = gpu_stages(static, GENERAL, ARCH, EvalOptions(profile=Profile.COUNTS), ScriptedGpu(script))
    assert ev.correct and ev.targets_met is False and not ev.solved(1.0)


def test_one_wrong_workload_makes_the_attempt_wrong_and_names_the_failures(static):
    script = passing([1.0] * 5)
    for m in MEMBERS[:4]:
        script[m] = (Status.MISMATCH, None, False)
    ev = gpu_stages(static, GENERAL, ARCH, EvalOptions(profile=Profile.COUNTS), ScriptedGpu(script))
    assert ev.status is Status.MISMATCH and not ev.correct
    assert ev.speedup is None and ev.speedup_geomean is None and ev.speedup_interval is None
    assert [w.status for w in ev.failing_workloads()] == [Status.MISMATCH] * 4
    assert ev.message.startswith(
        "wrong at 4 of 5 workloads of gemm_n7168_k5120: gemm_n7168_k5120_m70 (M=70) mismatch, gemm_n7168_k5120_m232 "
        "(M=232) mismatch, gemm_n7168_k5120_m972 (M=972) mismatch, gemm_n7168_k5120_m2379 (M=2379) mismatch; "
        "correct at gemm_n7168_k5120 (M=8192). The first failing one, gemm_n7168_k5120_m70 (M=70): mismatch at "
        "gemm_n7168_k5120_m70"
    )
    assert ev.shown_workload == "gemm_n7168_k5120_m70" and ev.stage(Stage.CHECK).message == "C wrong at " + MEMBERS[0]
    assert ev.workloads[-1].status is Status.PASSED and ev.workloads[-1].speedup == 1.0


def test_an_untimed_workload_leaves_no_minimum(static):
    script = passing([1.5, 1.2, 1.1, 1.3, 1.4])
    script[MEMBERS[2]] = (Status.PASSED, None, True)
    ev = gpu_stages(static, GENERAL, ARCH, EvalOptions(profile=Profile.COUNTS), ScriptedGpu(script))
    assert ev.correct and ev.speedup is None and ev.speedup_geomean is None  # a minimum over four is no minimum
    assert ev.shown_workload == MEMBERS[1]  # the slowest of those timed (an untimed one sorts last)


@pytest.mark.parametrize(
    ("profile", "speedups", "again"),
    [
        (Profile.AUTO, [1.5, 1.2, 0.7, 1.3, 0.9], "gemm_n7168_k5120_m972"),  # below 1: the slowest one re-run with perf
        (Profile.AUTO, [1.5, 1.2, 1.1, 1.3, 1.4], None),  # fast everywhere: counts only
        (Profile.PERF, [1.5, 1.2, 1.1, 1.3, 1.05], "gemm_n7168_k5120"),  # perf asked: on the slowest
        (Profile.COUNTS, [0.5] * 5, None),
    ],
)
def test_the_perf_pass_profiles_the_slowest_workload(static, profile, speedups, again):
    gpu = ScriptedGpu(passing(speedups))
    gpu_stages(static, GENERAL, ARCH, EvalOptions(profile=profile), gpu)
    assert [(name, p) for name, _, p in gpu.requests[:5]] == [(m, Profile.COUNTS) for m in MEMBERS]
    assert gpu.requests[5:] == ([(again, [get_task(again).dims["M"], 7168], Profile.PERF)] if again else [])


def test_the_perf_pass_waits_for_every_workload_to_pass(static):
    script = passing([0.5] * 5)
    script[MEMBERS[1]] = (Status.MISMATCH, None, False)
    gpu = ScriptedGpu(script)
    gpu_stages(static, GENERAL, ARCH, EvalOptions(profile=Profile.AUTO), gpu)
    assert len(gpu.requests) == 5


def test_a_gpu_that_cannot_run_the_arch_leaves_every_workload_unverified(static):
    class Busy(ScriptedGpu):
        def unavailable_reason(self, arch: Arch) -> str:
            return "no sm_90a here"

    gpu = Busy({})
    ev = on_gpu(static, GENERAL, ARCH, EvalOptions(), gpu)
    assert ev.status is Status.UNVERIFIED and gpu.requests == []
    assert all(w.status is Status.UNVERIFIED and "no sm_90a here" in w.message for w in ev.workloads)


def test_combine_keeps_a_plain_failure_ahead_of_an_unverified_one(static):
    member = [static.model_copy(update={"plan": static.plans[m]}) for m in MEMBERS]
    results = [evaluation(s, m, ARCH, "skipped here") for s, m in zip(member, GENERAL.workloads, strict=True)]
    wrong = results[3].model_copy(update={"status": Status.TIMEOUT, "message": "hung", "stages": []})
    ev = combine(GENERAL, [*results[:3], wrong, results[4]])
    assert ev.status is Status.TIMEOUT and ev.shown_workload == MEMBERS[3]
    assert ev.message.startswith("wrong at 1 of 5 workloads of gemm_n7168_k5120: gemm_n7168_k5120_m2379 (M=2379) "
                                 "timeout. The first failing one")  # fmt: skip


# ---------------------------------------------------------------------------------------------- feedback


def test_the_feedback_has_a_row_per_workload_and_the_first_failures_detail(static):
    script = passing([1.0] * 5)
    for m in MEMBERS[:4]:
        script[m] = (Status.MISMATCH, None, False)
    ev = gpu_stages(static, GENERAL, ARCH, EvalOptions(profile=Profile.COUNTS), ScriptedGpu(script))
    text = feedback_message(ev, GENERAL, ARCH, turn=1, max_turns=4, target_speedup=1.0)
    assert text.startswith("Turn 1 of 4: mismatch.")
    table = [line for line in text.splitlines() if line.startswith("| gemm_")]
    assert table == [
        "| gemm_n7168_k5120_m70 | 70 | mismatch | - | - | - |",
        "| gemm_n7168_k5120_m232 | 232 | mismatch | - | - | - |",
        "| gemm_n7168_k5120_m972 | 972 | mismatch | - | - | - |",
        "| gemm_n7168_k5120_m2379 | 2379 | mismatch | - | - | - |",
        "| gemm_n7168_k5120 | 8192 | passed | 1.0000 | 1.0000 | 1.000 |",
    ]
    assert (
        "Wrong at 4 of 5 workloads: gemm_n7168_k5120_m70, gemm_n7168_k5120_m232, gemm_n7168_k5120_m972, "
        "gemm_n7168_k5120_m2379. The detail below is the first failing workload's, gemm_n7168_k5120_m70." in text
    )
    assert "C wrong at gemm_n7168_k5120_m70" in text and '"bad_elements": 7' in text  # the failing one's detail
    assert text.index("| workload |") < text.index("C wrong at")


def test_the_feedback_of_a_correct_attempt_names_the_slowest(static):
    ev = gpu_stages(static, GENERAL, ARCH, EvalOptions(profile=Profile.COUNTS),
                    ScriptedGpu(passing([1.5, 1.2, 0.9, 1.3, 2.0])))  # fmt: skip
    text = feedback_message(ev, GENERAL, ARCH, turn=2, max_turns=4, target_speedup=1.0)
    assert "| gemm_n7168_k5120_m972 | 972 | passed | 1.0000 | 0.9000 | 0.900 |" in text
    assert (
        "Correct at every workload; speedup 0.900× (the minimum over the workloads, the one that counts), geomean "
        f"{ev.speedup_geomean:.3f}×. The detail below is the slowest workload's, gemm_n7168_k5120_m972." in text
    )
    # The timing table's TFLOP/s are the slowest workload's (M=972), not the largest's
    flops = 2 * 972 * 7168 * 5120
    assert f"| your kernel | 1.0000 | {flops / 1.0 / 1e9:,.0f} |" in text
    assert "Not solved yet: the speedup (0.900×) is below the target 1×." in text
    assert outcome_summary(ev, 2) == "turn 2: passed: 0.900× the baseline, targets met"


def test_tools_evaluate_prints_a_line_per_workload(static):
    ev = gpu_stages(static, GENERAL, ARCH, EvalOptions(profile=Profile.COUNTS),
                    ScriptedGpu(passing([1.5, 1.2, 0.9, 1.3, 2.0])))  # fmt: skip
    lines = render(ev).splitlines()
    assert lines[0] == "gemm_n7168_k5120_all on sm_90a: PASSED (scripted)"
    assert lines[3].split() == ["gemm_n7168_k5120_m972", "passed", "1.0000", "ms", "0.900×"]
    assert lines[6] == "stages at gemm_n7168_k5120_m972:"
    assert f"the minimum over the workloads, geomean {ev.speedup_geomean:.3f}×" in lines[-2]


def test_a_plain_tasks_feedback_has_no_workload_rows(unverified):
    ev = evaluate_answer(reference_answer("gemm", ARCH), get_task("gemm"), ARCH)
    assert "| workload |" not in feedback_message(ev, get_task("gemm"), ARCH, turn=1, max_turns=2, target_speedup=1)
    assert "| workload |" in feedback_message(unverified["reference"], GENERAL, ARCH, turn=1, max_turns=2,
                                              target_speedup=1)  # fmt: skip


# ----------------------------------------------------------------------------------------------- records


def test_a_general_record_round_trips(static):
    ev = gpu_stages(static, GENERAL, ARCH, EvalOptions(profile=Profile.COUNTS),
                    ScriptedGpu(passing([1.5, 1.2, 0.9, 1.3, 2.0])))  # fmt: skip
    text = ev.model_dump_json()
    assert set(GENERAL_FIELDS) <= set(json.loads(text))
    again = Evaluation.model_validate_json(text)
    assert again == ev and again.workloads[2].speedup == 0.9 and again.speedup_geomean == ev.speedup_geomean


def test_a_plain_tasks_record_is_unchanged():
    # Its fields as before the shape-general tasks (target_counter came with the worker's CUPTI count, for every task).
    ev = Evaluation(task="gemm", arch=ARCH, status=Status.UNVERIFIED)
    assert list(ev.model_dump()) == [
        "task", "arch", "status", "message", "stages", "solution_hash", "device", "worker", "kernel_ms",
        "baseline_ms", "speedup", "speedup_interval", "timing_flags", "tflops", "targets_met", "target_counts",
        "target_counter", "paper_tag", "perf",
    ]  # fmt: skip
    assert not set(GENERAL_FIELDS) & set(json.loads(ev.model_dump_json()))
    # Nor the headline figure's (eval.speedup): a record timed under the default, paired, is written as before.
    assert not set(PAPER_FIGURE_FIELDS) & set(json.loads(ev.model_dump_json()))


def test_a_geomean_without_a_pass_is_refused():
    with pytest.raises(ValueError, match="only reported for a passed attempt"):
        Evaluation(task="x", arch=ARCH, status=Status.MISMATCH, speedup_geomean=1.0, workloads=[])


def test_on_the_dask_pool_each_workload_is_a_request_of_its_member_task(dask_standins, static):
    """Through a real scheduler and workers (their service a stand-in that passes): five requests, each of a member
    task the worker resolves, their replies' workers in the rows."""
    pool = DaskPool(dask_standins.address)
    taken = len(dask_standins.requests())
    try:
        ev = on_gpu(static, GENERAL, ARCH, EvalOptions(profile=Profile.COUNTS), pool)
    finally:
        pool.close()
    assert len(dask_standins.requests()) - taken == 5
    assert ev.status is Status.PASSED and [w.status for w in ev.workloads] == [Status.PASSED] * 5
    assert {w.worker for w in ev.workloads} <= {"slow-a", "slow-b"} and ev.worker in {"slow-a", "slow-b"}
    assert ev.speedup is None and ev.speedup_geomean is None  # the stand-in does not time
    assert Evaluation.model_validate_json(ev.model_dump_json()) == ev
