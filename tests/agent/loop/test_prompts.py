"""The prompt templates render for every task, arch and status; the worked examples and the knowledge
packs' PTX are checked by the real harness code and by ptxas."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agent.loop.conversation import build_messages
from agent.loop.feedback import cut, feedback_message
from agent.loop.prompts import (
    parse_prompt,
    reference_source,
    render,
    system_prompt,
    task_prompt,
    toolchain,
    worked_example,
)
from agent.loop.tokens import count_messages, count_text
from tasks.catalog import TASKS, get_task
from tasks.schema import Arch
from tests.agent.helpers import FIXTURES
from tests.fixtures.runs import make_runs
from tools import ptx as ptx_text
from tools.abi import check_abi
from tools.answer import extract_solution
from tools.evaluation import Evaluation, Stage, StageResult, StageState, Status
from tools.pipeline import compile_stage
from tools.plan import plan_launches

PLACEHOLDER = re.compile(r"\$\{?[A-Za-z_]")


@pytest.mark.parametrize("arch", list(Arch))
def test_system_prompt(arch: Arch) -> None:
    text = system_prompt(arch, parse_prompt("full"))
    assert not PLACEHOLDER.search(text)
    assert f".target {arch}" in text and "ptxas 13.0" in text and "up to 9.0" in text
    mma = "wgmma.mma_async" if arch is Arch.SM_90A else "tcgen05.mma.cta_group::1.kind::f16"
    assert mma in text and "mbarrier.try_wait.parity" in text and "setmaxnreg" in text


def test_toolchain_is_asked_of_ptxas() -> None:
    # ptxas 13.0 refuses anything newer: "Unsupported .version 9.5; current version is '9.0'" (seen)
    assert toolchain().max_ptx_version == "9.0"


@pytest.mark.parametrize("name", sorted(TASKS))
@pytest.mark.parametrize("arch", list(Arch))
def test_task_prompt(name: str, arch: Arch) -> None:
    task = get_task(name)
    text = task_prompt(task, arch, trials=3, target_speedup=1.0, max_turns=8)
    assert not PLACEHOLDER.search(text)
    assert f"def {task.reference}(" in text  # the reference code itself
    assert task.baseline.description in text
    for group in task.targets[arch]:
        assert f"`{group.name}`" in text
    for tensor in task.tensors:
        assert f"| {tensor.name} | {tensor.role} | {tensor.dtype} |" in text


def test_reference_source_brings_its_helpers() -> None:
    source = reference_source(get_task("attn_bwd"))
    assert source.index("def _scores(") < source.index("def attention_forward(")
    assert source.index("def attention_backward_inputs(") < source.index("def attention_backward(")


@pytest.mark.parametrize("arch", list(Arch))
@pytest.mark.parametrize("family", ["gemm", "attention_fwd", "attention_bwd"])
def test_worked_examples_plan_and_match_their_entries(family: str, arch: Arch) -> None:
    """Each arch's example for a family (its own, or the family's) plans on every task of the family and matches
    its own .entry lists."""
    tasks = [t for t in TASKS.values() if t.family == family]
    assert tasks
    example = render(worked_example(tasks[0], arch), sm_count=arch.sm_count)
    spec = extract_solution(example).launch
    declared = example.split("```ptx\n", 1)[1].split("```", 1)[0]
    entries = {}
    for chunk in declared.split(".visible .entry")[1:]:
        entries |= ptx_text.entries(".visible .entry" + chunk + "{\n}\n")
    for task in tasks:
        plan_launches(spec, task, arch)
        assert check_abi(spec, entries, arch, task.dims) == []


def test_the_blackwell_gemm_example_is_a_tcgen05_pair_on_every_sm() -> None:
    text = task_prompt(get_task("gemm"), Arch.SM_100A, trials=3, target_speedup=1.0, max_turns=8)
    assert "tcgen05" in text and "wgmma" not in text and "H200" not in text
    # One CTA per SM without hard-coding the count: SMS, which the prompt says is 148 on the B200.
    assert '"grid": ["SMS", 1, 1]' in text and "`SMS` is the GPU's multiprocessor count (148 on the B200;" in text
    assert "On a B200: not measured here. NVIDIA quotes 2.25 PFLOP/s" in text
    hopper = task_prompt(get_task("gemm"), Arch.SM_90A, trials=3, target_speedup=1.0, max_turns=8)
    assert "wgmma" in hopper and "Seen on an H200: 0.749 ms" in hopper and "B200" not in hopper
    forward = task_prompt(get_task("attn_fwd"), Arch.SM_100A, trials=3, target_speedup=1.0, max_turns=8)
    assert "up to 1,613 TFLOP/s, up to 1.3× cuDNN 9.13" in forward and "Seen on an H200" not in forward


def evaluation(status: Status, **fields) -> Evaluation:
    recorded = json.loads((FIXTURES / "evaluations.json").read_text())
    if status.value in recorded:
        return Evaluation.model_validate(recorded[status.value])
    failing = {
        Status.EXTRACT_ERROR: Stage.EXTRACT, Status.COMPILE_ERROR: Stage.COMPILE, Status.ABI_ERROR: Stage.ABI,
        Status.LAUNCH_ERROR: Stage.RUN, Status.RUNTIME_ERROR: Stage.RUN,
    }  # fmt: skip
    if status is Status.PASSED:
        return Evaluation.model_validate(recorded["passed_fast"])
    if status is Status.UNVERIFIED:
        stages = [StageResult(name=Stage.RUN, state=StageState.SKIPPED, message="no GPU here")]
    else:
        stages = [StageResult(name=failing[status], state=StageState.FAILED, message=f"{status.value} detail")]
    return Evaluation(task="gemm_n7168_k5120", arch=Arch.SM_90A, status=status, stages=stages, **fields)


@pytest.mark.parametrize("status", list(Status))
def test_feedback_renders_for_every_status(status: Status) -> None:
    text = feedback_message(evaluation(status), get_task("gemm"), Arch.SM_90A, turn=2, max_turns=8, target_speedup=1.0)
    assert text.startswith(f"Turn 2 of 8: {status.value}.")
    assert "6 turns left." in text
    assert not PLACEHOLDER.search(text)


def test_feedback_content() -> None:
    task = get_task("gemm")
    passed = feedback_message(evaluation(Status.PASSED), task, Arch.SM_90A, turn=1, max_turns=1, target_speedup=1.0)
    assert "| your kernel | 0.7000 | 859 |" in passed and "| cuBLAS baseline | 0.7490 | 803 |" in passed
    assert "Speedup: 1.070× the baseline." in passed
    assert "- wgmma executed: 32,768 (required)" in passed
    assert "Solved: correct, targets executed, and fast enough." in passed
    assert "That was the last turn." in passed
    flag = "noisy — the speedup's interval spans 6.2%; power cap throttling during 40% of the candidate's samples"
    noisy = evaluation(Status.PASSED).model_copy(update={"timing_flags": [flag]})
    text = feedback_message(noisy, task, Arch.SM_90A, turn=1, max_turns=1, target_speedup=1.0)
    assert f"Speedup: 1.070× the baseline.\ntiming: {flag}\n" in text
    assert "timing: " not in passed  # no flag, no line
    timeout = feedback_message(evaluation(Status.TIMEOUT), task, Arch.SM_90A, turn=1, max_turns=3, target_speedup=1)
    assert "no result within 120 s: a hang" in timeout
    unverified = feedback_message(
        evaluation(Status.UNVERIFIED), task, Arch.SM_90A, turn=1, max_turns=3, target_speedup=1
    )
    assert "It could not be run here:\nno GPU here" in unverified


def test_cut_marks_what_it_removes() -> None:
    text = "".join(f"line {i}\n" for i in range(2000))
    short = cut(text, 1000)
    assert len(short) < 1100
    assert short.startswith("line 0\n") and short.endswith("line 1999\n")
    assert re.search(r"\[… [\d,]+ characters cut …\]", short)
    assert cut("short", 1000) == "short"


def test_messages_and_tokens() -> None:
    history = [{"turn": 1, "response": "", "feedback": "f1"}, {"turn": 2, "response": "r2", "feedback": "f2"}]
    full = build_messages("sys", "task", history, "full")
    assert [m.content for m in full] == ["sys", "task", "(empty answer)", "f1", "r2", "f2"]
    assert [m.content for m in build_messages("sys", "task", history, "last")] == ["sys", "task", "r2", "f2"]
    assert count_text("hello world") == 2
    assert count_messages(full) == sum(count_text(m.content) + 4 for m in full) + 2
    assert count_text("<|endoftext|>") > 1  # special tokens in a model's text are counted, not refused


def test_a_located_fault_reaches_the_feedback() -> None:
    task = get_task("gemm")
    run = StageResult(name=Stage.RUN, state=StageState.FAILED, message="the kernel faulted: CUDA_ERROR_ILLEGAL_ADDRESS",
                      detail={"fault": "CUDA_ERROR_ILLEGAL_ADDRESS"})  # fmt: skip
    located = "compute-sanitizer memcheck: memory error(s) (1 reported)\n- Invalid __global__ write at line 26: `st…`"
    memcheck = StageResult(name=Stage.MEMCHECK, state=StageState.FAILED, message=located)
    fault = Evaluation(task=task.name, arch=Arch.SM_90A, status=Status.RUNTIME_ERROR, stages=[run, memcheck])
    text = feedback_message(fault, task, Arch.SM_90A, turn=1, max_turns=2, target_speedup=1.0)
    assert text.index("CUDA_ERROR_ILLEGAL_ADDRESS") < text.index(f"\n\n{located}\n\nStages:")
    quiet = memcheck.model_copy(update={"state": StageState.SKIPPED, "message": "compute-sanitizer is not installed"})
    unlocated = fault.model_copy(update={"stages": [run, quiet]})
    text = feedback_message(unlocated, task, Arch.SM_90A, turn=1, max_turns=2, target_speedup=1.0)
    assert "Not located (memcheck skipped): compute-sanitizer is not installed" in text


def test_a_slow_attempt_is_told_where_its_time_goes() -> None:
    task = get_task("gemm")
    slow = make_runs.profiled(make_runs.GEMM, 0.04)  # the plain-pointer GEMM beside cuBLAS, recorded on the H200
    text = feedback_message(slow, task, Arch.SM_90A, turn=1, max_turns=4, target_speedup=1.0)
    table = slow.stage(Stage.PERF).message
    assert "Where the time goes (Nsight Compute on this GPU" in text and table in text
    assert "likely limiter (memory_stalled)" in text and "\n\n\n" not in text
    skipped = slow.model_copy(update={"perf": None, "stages": [
        s if s.name is not Stage.PERF else StageResult(name=Stage.PERF, state=StageState.SKIPPED, message="no ncu here")
        for s in slow.stages]})  # fmt: skip
    said = feedback_message(skipped, task, Arch.SM_90A, turn=1, max_turns=4, target_speedup=1.0)
    assert "Where the time goes: not measured (no ncu here)." in said
    plain = feedback_message(evaluation(Status.PASSED), task, Arch.SM_90A, turn=1, max_turns=4, target_speedup=1.0)
    assert "Where the time goes" not in plain and "\n\n\n" not in plain


def with_compile_stage_of(fixture: str, status: Status) -> Evaluation:
    """`evaluation(status)` whose compile stage is the real pipeline's on a tests/fixtures/ptx kernel (real ptxas)."""
    ptx = (Path(__file__).parents[2] / "fixtures" / "ptx" / f"{fixture}.ptx").read_text()
    stage, compiled = compile_stage("ptx", ptx, Arch.SM_90A, 60)
    assert compiled.ok, compiled.message()
    recorded = evaluation(status)
    stages = [stage, *(s for s in recorded.stages if s.name is not Stage.COMPILE)]
    return recorded.model_copy(update={"stages": stages})


def test_a_correct_attempt_is_told_ptxas_serialized_its_wgmma() -> None:
    task = get_task("gemm")
    slow = with_compile_stage_of("ptxas_c7514_conditional_wgmma", Status.PASSED)
    text = feedback_message(slow, task, Arch.SM_90A, turn=1, max_turns=4, target_speedup=1.0)
    section = text.split("Performance warnings (ptxas says these make the kernel slower", 1)[1]
    quoted = "- kernel conditional_wgmma:\n  info: (C7514) Potential Performance Loss: wgmma.mma_async instructions"
    assert section.index(quoted) < section.index("usual cause: an accumulator is read before")
    assert "peel the last iteration" in section
    assert "What the compilers said" not in text  # the only message is a performance one, shown once
    fixed = with_compile_stage_of("ptxas_c7514_peeled", Status.PASSED)
    plain = feedback_message(fixed, task, Arch.SM_90A, turn=1, max_turns=4, target_speedup=1.0)
    assert "Performance warnings" not in plain and "What the compilers said" not in plain and "\n\n\n" not in plain


def test_a_failed_run_quotes_the_compilers_too() -> None:
    task = get_task("gemm")
    wrong = with_compile_stage_of("local_array", Status.MISMATCH)
    text = feedback_message(wrong, task, Arch.SM_90A, turn=1, max_turns=4, target_speedup=1.0)
    assert ("What the compilers said, per kernel (quoted):\n- kernel local_array:\n  warning: Local memory used for "
            "function 'local_array', size of stack frame: 1024 bytes") in text  # fmt: skip
