"""The evaluator's stages that need no GPU (extract → compile → sass → abi): each failure gets its status and
a model-readable message; a clean answer is `unverified` with the GPU stages skipped, never `passed`."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from pydantic import ValidationError

from tasks.catalog import get_task
from tasks.schema import Arch
from tests.tools.files import read_answer
from tools.answer import extract_solution
from tools.evaluation import Evaluation, Stage, StageResult, StageState, Status
from tools.pipeline import evaluate_answer, evaluate_solution

GEMM = get_task("gemm")
STATIC = [Stage.EXTRACT, Stage.COMPILE, Stage.SASS, Stage.ABI]
SKIPPED = [Stage.RUN, Stage.CHECK, Stage.TIME, Stage.PROFILE]  # what a default attempt runs before it is timed


def states(evaluation: Evaluation) -> list[tuple[Stage, StageState]]:
    return [(s.name, s.state) for s in evaluation.stages]


@pytest.fixture(scope="module")
def clean() -> dict[str, Evaluation]:
    answers = {"hopper_gemm.md": Arch.SM_90A, "blackwell_gemm.md": Arch.SM_100A,
               "triton_gemm_sm_90a.md": Arch.SM_90A, "triton_gemm_sm_100a.md": Arch.SM_100A,
               "cuda_gemm_naive.md": Arch.SM_90A}  # fmt: skip
    with ThreadPoolExecutor(len(answers)) as pool:  # the work is in ptxas, NVRTC and nvdisasm subprocesses
        futures = {name: pool.submit(evaluate_answer, read_answer(name), GEMM, arch) for name, arch in answers.items()}
    return {name: future.result() for name, future in futures.items()}


@pytest.mark.parametrize(
    ("answer", "targets"),
    [("hopper_gemm.md", {"wgmma", "tma"}), ("blackwell_gemm.md", {"tcgen05", "tmem", "tma"}),
     ("triton_gemm_sm_90a.md", {"wgmma", "tma"}), ("triton_gemm_sm_100a.md", {"tcgen05", "tmem", "tma"})],
)  # fmt: skip
def test_clean_answer_is_unverified_without_a_gpu(clean, answer, targets):
    evaluation = clean[answer]
    assert evaluation.status is Status.UNVERIFIED and not evaluation.correct
    assert states(evaluation) == [(s, StageState.PASSED) for s in STATIC] + [(s, StageState.SKIPPED) for s in SKIPPED]
    assert all(evaluation.stage(s).message == "no GPU service in this process" for s in SKIPPED)
    assert evaluation.message == "compiled and checked statically; GPU stages skipped: no GPU service in this process"
    detail = evaluation.stage(Stage.SASS).detail
    assert set(detail["targets"]) == targets
    assert all(p["ptx"] and p["sass"] for p in detail["targets"].values())
    assert evaluation.stage(Stage.SASS).message == ""  # nothing missing, no local memory
    assert evaluation.solution_hash == extract_solution(read_answer(answer)).content_hash
    assert evaluation.speedup is None and evaluation.targets_met is None


def test_stage_details(clean):
    evaluation = clean["hopper_gemm.md"]
    extract = evaluation.stage(Stage.EXTRACT).detail
    assert extract["language"] == "ptx" and extract["launches"] == 1
    compile_detail = evaluation.stage(Stage.COMPILE).detail
    assert compile_detail["ok"] is True and compile_detail["kernels"][0]["shared_bytes"] == 4104
    assert "cubin" not in compile_detail  # bytes stay out of the record
    assert evaluation.stage(Stage.ABI).detail["entries"]["gemm_wgmma_tma"][2] == ".param .u64 c_ptr"
    assert all(s.seconds >= 0 for s in evaluation.stages)
    Evaluation.model_validate_json(evaluation.model_dump_json())  # the record round-trips


def test_missing_targets_are_noted_not_failed(clean):
    evaluation = clean["cuda_gemm_naive.md"]
    assert evaluation.status is Status.UNVERIFIED
    assert evaluation.stage(Stage.SASS).message == "not in the SASS: wgmma, tma (required at run time)"
    assert evaluation.stage(Stage.EXTRACT).detail["language"] == "cuda"


def test_extract_error():
    evaluation = evaluate_answer("I would use wgmma here.", GEMM, Arch.SM_90A)
    assert evaluation.status is Status.EXTRACT_ERROR
    assert states(evaluation) == [(Stage.EXTRACT, StageState.FAILED)]
    assert evaluation.message.startswith("extract failed: no ```ptx or ```cuda source block found")
    assert evaluation.solution_hash is None


def test_spec_that_cannot_run_is_an_extract_error():
    answer = read_answer("hopper_gemm.md").replace('"cdiv(M,64)"', '"cdiv(Q,64)"')
    evaluation = evaluate_answer(answer, GEMM, Arch.SM_90A)
    assert evaluation.status is Status.EXTRACT_ERROR
    assert "launches[0].grid[1]: unknown dim 'Q'; this task's dims: K, M, N" in evaluation.message


def test_compile_error_names_the_line():
    answer = read_answer("hopper_gemm.md").replace("wgmma.wait_group.sync.aligned 0;", "wgmma.wait_group 0;")
    evaluation = evaluate_answer(answer, GEMM, Arch.SM_90A)
    assert evaluation.status is Status.COMPILE_ERROR
    assert states(evaluation)[-1] == (Stage.COMPILE, StageState.FAILED)
    source = extract_solution(answer).source.splitlines()
    line = next(i for i, text in enumerate(source, 1) if "wgmma.wait_group 0;" in text)
    assert f"compile failed: line {line}: error:" in evaluation.message
    assert "\n    wgmma.wait_group 0;" in evaluation.message


def test_answer_for_the_other_arch_is_a_compile_error():
    evaluation = evaluate_answer(read_answer("blackwell_gemm.md"), GEMM, Arch.SM_90A)
    assert evaluation.status is Status.COMPILE_ERROR
    assert "written for .target sm_100a, but this task is for sm_90a" in evaluation.message


def test_abi_error():
    answer = read_answer("hopper_gemm.md").replace(
        '{\n          "scalar": "K",\n          "type": "u32"\n        }',
        '{\n          "scalar": "K",\n          "type": "u64"\n        }',
    )
    evaluation = evaluate_answer(answer, GEMM, Arch.SM_90A)
    assert evaluation.status is Status.ABI_ERROR
    assert states(evaluation)[-1] == (Stage.ABI, StageState.FAILED)
    assert evaluation.message == (
        "abi failed: launches[0].args[4] → .param .u32 k_size: a u64 scalar is 8 bytes; the parameter is 4 (.u32)"
    )


def test_evaluate_solution_skips_extraction_parsing():
    solution = extract_solution(read_answer("hopper_gemm.md"))
    evaluation = evaluate_solution(solution.model_copy(update={"source": solution.source + "\n}"}), GEMM, Arch.SM_90A)
    assert evaluation.status is Status.COMPILE_ERROR
    assert evaluation.solution_hash != solution.content_hash


def test_status_and_metrics_must_agree():
    with pytest.raises(ValidationError, match="a speedup is only reported for a passed attempt"):
        Evaluation(task=GEMM.name, arch=Arch.SM_90A, status=Status.UNVERIFIED, speedup=1.2)
    with pytest.raises(ValidationError, match="a speedup is only reported for a passed attempt"):
        Evaluation(task=GEMM.name, arch=Arch.SM_90A, status=Status.MISMATCH, speedup_interval=[1.1, 1.3])
    with pytest.raises(ValidationError, match="status 'passed' needs a passed check stage"):
        Evaluation(task=GEMM.name, arch=Arch.SM_90A, status=Status.PASSED)
    check = StageResult(name=Stage.CHECK, state=StageState.PASSED)
    with pytest.raises(ValidationError, match="timing_flags needs a passed time stage"):
        Evaluation(task=GEMM.name, arch=Arch.SM_90A, status=Status.PASSED, stages=[check], timing_flags=["noisy — x"])
    assert Evaluation(task=GEMM.name, arch=Arch.SM_90A, status=Status.PASSED, stages=[check], speedup=0.9).correct
