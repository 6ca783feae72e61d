"""The floor of an attempt's GPU memory, by what holds it, and the one-line refusal of a workload whose floor is
more than the GPU has free (the worker checks it before allocating anything: tools/gpu/worker.py)."""

from __future__ import annotations

from tasks.catalog import TASKS, get_task
from tasks.schema import Arch
from tasks.solutions import reference_answer
from tools.answer import extract_solution
from tools.gpu.memory import Footprint, footprint, refusal
from tools.plan import plan_launches
from tools.solution import LaunchSpec


def _plan(task, spec: LaunchSpec | None = None):
    spec = spec or LaunchSpec.model_validate({"launches": [{"kernel": "k", "grid": [1, 1, 1], "block": [32, 1, 1],
                                                            "args": []}]})  # fmt: skip
    return plan_launches(spec, task, Arch.SM_90A)


def test_a_gemm_holds_its_tensors_a_copy_of_its_inputs_and_fp32_copies_of_all():
    task = get_task("gemm_n34816_k5120_m8192")  # the largest GEMM's tensors
    a, b, c = 8192 * 5120, 34816 * 5120, 8192 * 34816
    assert footprint(task, _plan(task)) == Footprint(buffers=2 * (a + b + c), pristine_inputs=2 * (a + b),
                                                     reference=4 * (a + b + c))  # fmt: skip


def test_scratch_counts_with_the_buffers():
    task = get_task("gemm")
    spec = extract_solution(reference_answer("gemm_n7168_k5120", "sm_90a")).launch
    scratch = [{"name": "acc", "dtype": "float32", "shape": ["M", "N"]}]
    with_scratch = LaunchSpec.model_validate({**spec.model_dump(), "scratch": scratch})
    assert footprint(task, _plan(task, with_scratch)).buffers - footprint(task, _plan(task, spec)).buffers == (
        8192 * 7168 * 4
    )


def test_attention_at_s16384_holds_one_heads_score_matrices_at_a_time():
    task = get_task("mha_bwd_d96_s16384")
    bhsd, bhs = 4 * 48 * 16384 * 96, 4 * 48 * 16384
    need = footprint(task, _plan(task))
    assert need.buffers == 2 * 8 * bhsd + 4 * bhs  # Q K V O dO dQ dK dV in bf16, LSE in fp32
    assert need.pristine_inputs == 2 * 5 * bhsd + 4 * bhs
    assert need.reference == 4 * (8 * bhsd + bhs) + 4 * 4 * 16384**2  # fp32 copies, four S×S fp32 matrices
    assert need.total < 64 << 30  # well within an H200's 141 GiB
    assert max(footprint(t, _plan(t)).total for t in TASKS.values()) == need.total  # the catalog's largest


def test_a_workload_that_cannot_fit_is_refused_with_its_bytes_and_the_free_ones():
    need = Footprint(buffers=3 << 30, pristine_inputs=1 << 30, reference=6 << 30)
    assert refusal(need, need.total) is None
    message = refusal(need, 8 << 30)
    assert message == (
        "this workload needs at least 10,737,418,240 bytes of GPU memory (10.0 GiB: 3.0 for the task's tensors and "
        "scratch, 1.0 for the check's copy of the inputs, 6.0 for the fp32 reference) and the GPU has "
        "8,589,934,592 bytes (8.0 GiB) free: it was not launched"
    )
