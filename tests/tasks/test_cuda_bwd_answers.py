"""The sm_90a attention-backward answers written in CUDA C++ with inline PTX
(tasks/solutions/sm_90a/, generated from tasks/solutions/dev/cuda/attention_bwd.cu): the generator
reproduces the committed files; each answer lowers through the real NVRTC and ptxas, matches its .entry ABI, plans
at its task's dims, holds HGMMA, UTMALDG and UTMAREDG in SASS, spills nothing and has no wgmma ptxas had to
serialize (its info line C7514, which tools.compile does not show)."""

from __future__ import annotations

import subprocess

import pytest

from tasks.catalog import get_task
from tasks.schema import Arch
from tasks.solutions.dev import cuda_bwd_answers
from tools import procs
from tools.answer import extract_solution
from tools.evaluation import Stage, Status
from tools.nvrtc import lower_to_ptx
from tools.options import EvalOptions
from tools.pipeline import evaluate_answer
from tools.plan import plan_launches
from tools.toolchain import find_tool

TASKS = cuda_bwd_answers.TASKS
SM90 = Arch.resolve("sm_90a")


def _committed(name: str) -> str:
    return (cuda_bwd_answers.OUT / f"{name}.md").read_text()


def test_the_eight_backward_tasks_have_an_answer():
    assert len(TASKS) == 8
    assert {get_task(t).family for t in TASKS} == {"attention_bwd"}


@pytest.mark.parametrize("name", TASKS)
def test_the_generator_reproduces_the_committed_answer(name):
    assert cuda_bwd_answers.build_answer(get_task(name)) == _committed(name)


@pytest.mark.parametrize("name", TASKS)
def test_an_answer_compiles_with_the_targets_and_plans(name):
    task = get_task(name)
    answer = _committed(name)
    ev = evaluate_answer(answer, task, SM90, EvalOptions(time=False, profile=False))
    assert ev.status == Status.UNVERIFIED, ev.message
    targets = ev.stage(Stage.SASS).detail["targets"]
    matches = {m for group in targets.values() for m in group["sass_matches"]}
    assert any(m.startswith("HGMMA.64x64x16.F32.BF16") for m in matches), matches
    assert any(m.startswith("UTMALDG") for m in matches), matches
    assert any(m.startswith("UTMAREDG") for m in matches), matches
    kernels = ev.stage(Stage.COMPILE).detail["kernels"]
    assert {k["name"] for k in kernels} == {"attn_bwd_delta", "attn_bwd_main", "attn_bwd_dq_convert"}
    assert all(k["spill_stores"] == 0 and k["spill_loads"] == 0 for k in kernels), kernels
    plan = plan_launches(extract_solution(answer).launch, task, SM90)
    assert [launch.kernel for launch in plan.launches] == ["attn_bwd_delta", "attn_bwd_main", "attn_bwd_dq_convert"]


@pytest.mark.parametrize("name", ["mha_bwd_d64", "mha_bwd_d96_causal", "gqa_bwd_d128_causal"])
def test_ptxas_serializes_no_wgmma(name, tmp_path):
    source = extract_solution(_committed(name)).source
    ptx, log = lower_to_ptx(source, "sm_90a", procs.Budget(120))
    assert ptx is not None, log
    (tmp_path / "k.ptx").write_text(ptx)
    done = subprocess.run(
        [str(find_tool("ptxas").path), "-arch=sm_90a", "-v", "-o", str(tmp_path / "k.cubin"), str(tmp_path / "k.ptx")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    info = done.stdout + done.stderr
    assert done.returncode == 0, info
    assert "Compiling entry function 'attn_bwd_main'" in info
    assert "C7514" not in info and "serialized" not in info, info
    assert "0 bytes spill stores, 0 bytes spill loads" in info
