"""LaunchSpec + task + arch → LaunchPlan: concrete numbers, and a `path: message` line for every limit broken."""

from __future__ import annotations

import pytest

from tasks.catalog import get_task
from tasks.schema import Arch
from tests.tools.files import read_answer
from tools.answer import extract_solution
from tools.plan import SpecError, plan_launches
from tools.solution import LaunchSpec

GEMM = get_task("gemm")  # M=8192, N=7168, K=5120
ATTN = get_task("attn_fwd")  # B=4, S=4096, H=48, D=128
HOPPER_SPEC = extract_solution(read_answer("hopper_gemm.md")).launch


def spec(args=None, scratch=None, **launch) -> LaunchSpec:
    base = {"kernel": "k", "grid": ["cdiv(N,128)", "cdiv(M,128)", 1], "block": [128, 1, 1],
            "args": args if args is not None else [{"tensor": "C"}]}  # fmt: skip
    return LaunchSpec.model_validate({"launches": [{**base, **launch}], "scratch": scratch or []})


def problems(spec: LaunchSpec, task=GEMM, arch=Arch.SM_90A) -> list[str]:
    with pytest.raises(SpecError) as refused:
        plan_launches(spec, task, arch)
    assert str(refused.value).startswith("the launch spec cannot run:\n- ")
    return refused.value.problems


def test_hopper_fixture_plan_is_concrete():
    plan = plan_launches(HOPPER_SPEC, GEMM, Arch.SM_90A)
    launch = plan.launches[0]
    assert launch.grid == [7168 // 64, 8192 // 64, 1]
    assert launch.block == [128, 1, 1] and launch.cluster == [1, 1, 1] and launch.shared_bytes == 0
    a_map = launch.args[0].tensor_map
    # The driver wants innermost first: A[M,K] → dims [K, M], one stride (a row of K bf16), box [8, 64].
    assert (a_map.global_dims, a_map.global_strides, a_map.box) == ([5120, 8192], [10240], [8, 64])
    assert a_map.dtype == "bfloat16" and a_map.element_strides == [1, 1] and a_map.swizzle == "none"
    assert [(a.kind, a.type, a.value) for a in launch.args[3:]] == [("scalar", "u32", 7168), ("scalar", "u32", 5120)]
    assert [(b.name, b.shape, b.role) for b in plan.buffers] == [
        ("A", [8192, 5120], "input"), ("B", [7168, 5120], "input"), ("C", [8192, 7168], "output")
    ]  # fmt: skip


def test_dims_can_be_overridden_for_quick_checks():
    plan = plan_launches(HOPPER_SPEC, GEMM, Arch.SM_90A, dims={"M": 256, "N": 128, "K": 64})
    assert plan.launches[0].grid == [2, 4, 1]
    assert plan.buffer("C").shape == [256, 128]


def test_f32_scalars_and_views():
    launch_args = [{"scalar": "1/sqrt(D)", "type": "f32"},
                   {"tensor_map": "Q", "shape": ["B*S*H", "D"], "box": [64, 64], "swizzle": "128B"}]  # fmt: skip
    plan = plan_launches(spec(args=launch_args, grid=["cdiv(S,128)", "B*H", 1]), ATTN, Arch.SM_100A)
    scale, q_map = plan.launches[0].args
    assert scale.value == pytest.approx(128**-0.5) and isinstance(scale.value, float)
    assert q_map.tensor_map.global_dims == [128, 4 * 4096 * 48]
    assert q_map.tensor_map.global_strides == [256]


def test_unknown_tensor():
    assert problems(spec(args=[{"tensor": "X"}])) == ["launches[0].args[0]: unknown tensor 'X'; known: A, B, C"]
    assert problems(spec(args=[{"tensor_map": "Cx", "box": [64, 64]}])) == [
        "launches[0].args[0].tensor_map: unknown tensor 'Cx'; known: A, B, C"
    ]


def test_unknown_dim():
    assert problems(spec(grid=["cdiv(Q,128)", 1, 1])) == [
        "launches[0].grid[0]: unknown dim 'Q'; this task's dims: K, M, N, SMS"
    ]
    assert problems(spec(args=[{"scalar": "S", "type": "u32"}])) == [
        "launches[0].args[0].scalar: unknown dim 'S'; this task's dims: K, M, N, SMS"
    ]


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        (["M-M", 1, 1], "launches[0].grid[0]: evaluates to 0; it must be in 1..2147483647"),
        ([1, -2, 1], "launches[0].grid[1]: evaluates to -2; it must be in 1..65535"),
        ([1, 1, "M*N"], "launches[0].grid[2]: evaluates to 58720256; it must be in 1..65535"),
    ],
)
def test_grid_out_of_range(grid, message):
    assert problems(spec(grid=grid)) == [message]


def test_more_than_1024_threads():
    assert problems(spec(block=[1024, 2, 1])) == [
        "launches[0].block: [1024, 2, 1] is 2048 threads; a block holds at most 1024"
    ]
    assert problems(spec(block=[0, 1, 1])) == ["launches[0].block[0]: evaluates to 0; it must be in 1..1024"]
    assert problems(spec(block=[1, 1, 128])) == ["launches[0].block[2]: evaluates to 128; it must be in 1..64"]


@pytest.mark.parametrize("arch", list(Arch))
def test_shared_bytes_over_the_arch_limit(arch):
    assert plan_launches(spec(shared_bytes=232448), GEMM, arch).launches[0].shared_bytes == 232448
    assert problems(spec(shared_bytes=232449), arch=arch) == [
        f"launches[0].shared_bytes: 232449 is over {arch}'s limit of 232448 bytes of dynamic shared memory per block"
    ]


def test_grid_not_divisible_by_cluster():
    # 7168/128 = 56 blocks along x: a cluster of 3 does not divide them.
    assert problems(spec(cluster=[3, 1, 1])) == [
        "launches[0].grid[0]: 56 blocks is not divisible by cluster[0] = 3 (grid counts blocks, not clusters)"
    ]
    assert plan_launches(spec(cluster=[2, 2, 1]), GEMM, Arch.SM_90A).launches[0].cluster == [2, 2, 1]


def test_more_than_16_blocks_in_a_cluster():
    assert problems(spec(grid=["cdiv(N,128)", "cdiv(M,128)", 2], cluster=[4, 4, 2])) == [
        "launches[0].cluster: [4, 4, 2] is 32 blocks; a cluster holds at most 16 (8 portably)"
    ]
    assert plan_launches(spec(cluster=[8, 2, 1]), GEMM, Arch.SM_100A).launches[0].cluster == [8, 2, 1]
    assert problems(spec(cluster=[0, 1, 1])) == ["launches[0].cluster: [0, 1, 1]: every extent must be positive"]


def test_every_problem_is_reported_at_once():
    found = problems(spec(grid=[0, 1, 1], block=[512, 4, 1], shared_bytes=10**6, args=[{"tensor": "X"}]))
    assert [p.split(":")[0] for p in found] == [
        "launches[0].grid[0]", "launches[0].block", "launches[0].shared_bytes", "launches[0].args[0]"
    ]  # fmt: skip


def test_scalar_range():
    assert problems(spec(args=[{"scalar": "-M", "type": "u32"}])) == ["launches[0].args[0]: -8192 does not fit in u32"]
    assert problems(spec(args=[{"scalar": "M*N*K", "type": "s32"}])) == [
        "launches[0].args[0]: 300647710720 does not fit in s32"
    ]
    plan = plan_launches(spec(args=[{"scalar": "M*N*K", "type": "u64"}]), GEMM, Arch.SM_90A)
    assert plan.launches[0].args[0].value == 8192 * 7168 * 5120


@pytest.mark.parametrize(
    ("tensor_map", "message"),
    [
        ({"box": [64]}, "launches[0].args[0].box: 1 extents for a rank-2 tensor [8192, 5120]"),
        ({"box": [64, 4]}, "the innermost box extent 4 × 2 B = 8 B must be a multiple of 16 bytes"),
        ({"box": [64, 128], "swizzle": "128B"}, "with swizzle 128B the innermost box row may span at most 128 B, "
                                                "but 128 × 2 B = 256 B"),
        ({"box": [512, 64]}, "launches[0].args[0].box: [512, 64]: every extent must be in 1..256"),
        ({"box": [64, 64], "element_strides": [1, 9]}, "element_strides: [1, 9]: 2 values in 1..8"),
        ({"box": [64, 64], "shape": ["M", "K", 2]}, "is not a contiguous view of A [8192, 5120]"),
        ({"box": [64, 64], "interleave": "32B"}, "an interleaved tensor map needs rank ≥ 3"),
    ],
)  # fmt: skip
def test_tensor_map_limits(tensor_map, message):
    found = problems(spec(args=[{"tensor_map": "A", **tensor_map}]))
    assert any(message in p for p in found), found


def test_tensor_map_global_strides_must_be_16_byte_multiples():
    found = problems(spec(args=[{"tensor_map": "A", "shape": ["M*K//4", 4], "box": [64, 8]}]))
    assert found == ["launches[0].args[0]: global strides [8] B (outermost first) must be multiples of 16 bytes"]


def test_scratch_buffers():
    scratch = [{"name": "partial", "dtype": "float32", "shape": ["cdiv(K,512)", "M", "N"], "init": "zero"}]
    plan = plan_launches(spec(args=[{"tensor": "partial"}], scratch=scratch), GEMM, Arch.SM_90A)
    assert plan.buffer("partial").shape == [10, 8192, 7168] and plan.buffer("partial").role == "scratch"
    assert problems(spec(scratch=[{"name": "C", "dtype": "float32", "shape": [1]}])) == [
        "scratch[0] ('C'): the name is already used by a task tensor or another buffer"
    ]
    assert problems(spec(scratch=[{"name": "s", "dtype": "float32", "shape": ["M-M"]}])) == [
        "scratch[0] ('s').shape: every extent must be positive, got [0]"
    ]
    assert problems(spec(scratch=[{"name": "s", "dtype": "float32", "shape": ["M", "N", "K"]}])) == [
        "scratch[0] ('s'): 1120.0 GiB brings the scratch to 1120.0 GiB, over the 16 GiB cap on all scratch buffers "
        "together"
    ]


# ------------------------------------------------------------------------------------------------ SMS


def test_sms_is_the_arch_nominal_multiprocessor_count_in_the_static_stages():
    persistent = spec(grid=["min(SMS, cdiv(M,128)*cdiv(N,256))", 1, 1],
                      args=[{"tensor": "C"}, {"scalar": "SMS", "type": "u32"}])  # fmt: skip
    hopper, blackwell = plan_launches(persistent, GEMM, Arch.SM_90A), plan_launches(persistent, GEMM, Arch.SM_100A)
    assert (hopper.launches[0].grid[0], hopper.launches[0].args[1].value) == (132, 132)
    assert (blackwell.launches[0].grid[0], blackwell.launches[0].args[1].value) == (148, 148)
    small = plan_launches(persistent, get_task("gemm_n128_k2048_m93"), Arch.SM_90A)
    assert small.launches[0].grid[0] == 1  # fewer tiles than SMs
    other = plan_launches(persistent, GEMM, Arch.SM_90A, sm_count=114)  # a GPU's own count (an H100 PCIe)
    assert other.launches[0].grid[0] == 114 and other.launches[0].args[1].value == 114


def test_sms_is_a_name_only_in_launch_expressions():
    assert problems(spec(grid=["SMS*SMS*SMS*SMS*SMS", 1, 1]), task=GEMM) == [
        "launches[0].grid[0]: evaluates to 40074642432; it must be in 1..2147483647"
    ]
    assert "unknown dim 'SM'; this task's dims: K, M, N, SMS" in problems(spec(grid=["SM", 1, 1]))[0]
