"""The hand-written CUDA attention forward's answers (tasks/solutions/sm_90a, written by
tasks/solutions/dev/cuda_answers.py from tasks/solutions/dev/cuda/attention_fwd.cu): the generator reproduces the
committed files; each goes through NVRTC, ptxas 13.0, nvdisasm and the ABI check to `unverified` with wgmma and TMA
in its SASS, no spills, no stack and no ptxas performance warning (wgmma serialized); each plans as a persistent grid
at every workload it serves. The GPU half: tests/gpu/test_cuda_answers_gpu.py; `python -m tasks.solutions.check_all`
times them."""

from __future__ import annotations

import pytest

from tasks.catalog import get_task
from tasks.schema import Arch
from tasks.solutions import answered_by
from tasks.solutions.dev import cuda_answers
from tools.answer import extract_solution
from tools.assemble import compile_cuda
from tools.plan import plan_launches

DEFINITIONS = cuda_answers.DEFINITIONS


def _committed(definition: str) -> str:
    return (cuda_answers.OUT / f"{definition}.md").read_text()


def test_the_generator_reproduces_the_eight_forward_answers(tmp_path):
    assert len(DEFINITIONS) == 8
    assert cuda_answers.main(["--out", str(tmp_path)]) == 0
    for definition in DEFINITIONS:
        assert (tmp_path / f"{definition}.md").read_text() == _committed(definition), definition


@pytest.mark.slow
@pytest.mark.parametrize("definition", DEFINITIONS)
def test_an_answer_compiles_to_wgmma_and_tma_without_spills_or_serialized_wgmma(definition):
    report = cuda_answers.static_report(definition, _committed(definition))
    assert report["status"] == "unverified", report["message"]
    assert {"wgmma", "tma"} <= set(report["targets"]), report
    assert any(op.startswith("HGMMA") for op in report["targets"]["wgmma"])
    assert any(op.startswith("UTMALDG") for op in report["targets"]["tma"])
    assert not report["missing"] and not report["spills"] and not report["stack_bytes"], report
    assert report["performance_warnings"] == []
    # setmaxnreg hands the producer's registers to the consumers: ptxas must not have capped the entry below that.
    assert report["registers"] == {"attention_fwd": 168}


def test_the_source_refuses_a_shared_bytes_that_is_not_its_own():
    task = cuda_answers.task_of("mha_with_lse_d128")
    right = cuda_answers.specialised_source(task)
    wrong = right.replace(f"#define SHARED_BYTES {cuda_answers.shared_bytes(128)}", "#define SHARED_BYTES 1024")
    assert wrong != right
    result = compile_cuda(wrong, Arch.SM_90A)
    assert not result.ok
    assert any("shared_bytes must be this kernel's" in d.message for d in result.diagnostics)


@pytest.mark.parametrize("definition", DEFINITIONS)
def test_an_answer_plans_a_persistent_grid_at_every_workload_it_serves(definition):
    solution = extract_solution(_committed(definition))
    small = {"B": 1, "S": 256}  # 2 query tiles × 48 heads: fewer work items than SMs
    for name in answered_by(definition):
        task = get_task(name)
        for dims in (task.dims, {**task.dims, **small}):
            plan = plan_launches(solution.launch, task, Arch.SM_90A, dims=dims)
            items = dims["S"] // 128 * dims["B"] * dims["H"]
            assert plan.launches[0].grid == [min(132, items), 1, 1], (name, dims)
            assert plan.launches[0].block == [384, 1, 1]
