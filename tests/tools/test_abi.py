"""The launch spec against the .entry parameter lists: count, kind and size of each argument, tensor-map
parameters, .reqntid/.maxntid against the block, static + dynamic shared memory against the arch's limit."""

from __future__ import annotations

import pytest

from tasks.catalog import get_task
from tasks.schema import Arch
from tests.tools.files import read_answer, read_ptx
from tools.abi import check_abi
from tools.answer import extract_solution
from tools.ptx import entries
from tools.solution import LaunchSpec

GEMM = get_task("gemm")
HOPPER_SPEC = extract_solution(read_answer("hopper_gemm.md")).launch.model_dump()


def with_launch(**changes) -> LaunchSpec:
    return LaunchSpec.model_validate({"launches": [{**HOPPER_SPEC["launches"][0], **changes}]})


def with_arg(index: int, arg: dict) -> LaunchSpec:
    args = list(HOPPER_SPEC["launches"][0]["args"])
    args[index] = arg
    return with_launch(args=args)


@pytest.fixture(scope="module")
def hopper_entries():
    return entries(read_ptx("wgmma"))


def check(spec: LaunchSpec, found, compiled=None, arch=Arch.SM_90A) -> list[str]:
    resources = compiled["wgmma"].kernels if compiled else None
    return check_abi(spec, found, arch, GEMM.dims, resources)


def test_entry_parameters_are_read(hopper_entries):
    entry = hopper_entries["gemm_wgmma_tma"]
    assert [p.describe() for p in entry.params] == [
        ".param .align 64 .b8 a_map[128]", ".param .align 64 .b8 b_map[128]", ".param .u64 c_ptr",
        ".param .u32 n_size", ".param .u32 k_size",
    ]  # fmt: skip
    assert entry.reqntid == [128] and entry.maxntid is None


@pytest.mark.parametrize(
    ("answer", "arch"),
    [("hopper_gemm.md", Arch.SM_90A), ("blackwell_gemm.md", Arch.SM_100A),
     ("triton_gemm_sm_90a.md", Arch.SM_90A), ("triton_gemm_sm_100a.md", Arch.SM_100A)],
)  # fmt: skip
def test_fixture_answers_match_their_entries(answer, arch):
    solution = extract_solution(read_answer(answer))
    assert check_abi(solution.launch, entries(solution.source), arch, GEMM.dims) == []


def test_triton_entry_follows_tritons_abi():
    entry = entries(read_ptx("triton_sm_90a"))["gemm_tma"]
    assert len(entry.params) == 3 * 5 + 3 + 2  # 3 × (descriptor, 2 shape, 2 strides), M N K, 2 scratch pointers
    assert [(p.size, p.align) for p in entry.params[:5]] == [(128, 64), (4, 4), (4, 4), (8, 8), (8, 8)]
    assert entry.params[-1].describe() == ".param .u64 gemm_tma_param_19"


def test_argument_count(hopper_entries):
    spec = with_launch(args=HOPPER_SPEC["launches"][0]["args"][:4])
    assert check(spec, hopper_entries) == [
        "launches[0].args: 4 arguments for entry 'gemm_wgmma_tma', which takes 5: .param .align 64 .b8 a_map[128]; "
        ".param .align 64 .b8 b_map[128]; .param .u64 c_ptr; .param .u32 n_size; .param .u32 k_size"
    ]


@pytest.mark.parametrize(
    ("index", "arg", "message"),
    [
        (0, {"tensor": "A"}, "launches[0].args[0] → .param .align 64 .b8 a_map[128]: a 128-byte array parameter "
                             "takes a tensor_map (128 B), not a tensor"),
        (0, {"scalar": "K", "type": "u64"}, "a 128-byte array parameter takes a tensor_map (128 B), not a scalar"),
        (2, {"tensor_map": "C", "box": [64, 64]}, "launches[0].args[2] → .param .u64 c_ptr: a tensor_map needs a "
                                                  "128-byte parameter aligned to 64: `.param .align 64 .b8 name[128]`"),
        (3, {"tensor": "C"}, "launches[0].args[3] → .param .u32 n_size: a tensor is passed as a 64-bit pointer; "
                             "the parameter is 32-bit (.u32)"),
        (3, {"scalar": "N", "type": "u64"}, "a u64 scalar is 8 bytes; the parameter is 4 (.u32)"),
        (4, {"scalar": "K", "type": "f32"}, "the scalar's type f32 does not match the parameter's .u32"),
        (2, {"scalar": "M", "type": "s32"}, "a s32 scalar is 4 bytes; the parameter is 8 (.u64)"),
    ],
)  # fmt: skip
def test_argument_kind_and_size(hopper_entries, index, arg, message):
    found = check(with_arg(index, arg), hopper_entries)
    assert len(found) == 1 and message in found[0], found


@pytest.mark.parametrize(
    ("param", "accepted"),
    [
        (".param .align 64 .b8 tmap[128]", True),
        (".param .align 128 .b8 tmap[128]", True),
        (".param .align 8 .b8 tmap[128]", False),
        (".param .b8 tmap[128]", False),
        (".param .align 64 .b8 tmap[64]", False),
        (".param .align 64 .b64 tmap[16]", True),
        (".param .u64 tmap", False),
    ],
)
def test_tensor_map_needs_a_128_byte_64_aligned_parameter(param, accepted):
    ptx = f".version 8.0\n.target sm_90a\n.visible .entry k(\n\t{param}\n)\n{{\n\tret;\n}}\n"
    spec = LaunchSpec.model_validate(
        {
            "launches": [
                {"kernel": "k", "grid": [1, 1, 1], "block": [32, 1, 1], "args": [{"tensor_map": "A", "box": [64, 64]}]}
            ]
        }
    )
    problems = check_abi(spec, entries(ptx), Arch.SM_90A, GEMM.dims)
    assert (
        problems == []
        if accepted
        else problems and "a tensor_map needs a 128-byte parameter aligned to 64" in problems[0]
    )


def test_block_against_reqntid(hopper_entries):
    assert check(with_launch(block=[256, 1, 1]), hopper_entries) == [
        "launches[0].block: [256, 1, 1], but entry 'gemm_wgmma_tma' declares .reqntid [128]"
    ]
    assert check(with_launch(block=[64, 2, 1]), hopper_entries) != []  # same count, other shape


def test_block_against_maxntid():
    ptx = ".version 8.0\n.target sm_90a\n.visible .entry k(.param .u64 p)\n.maxntid 256, 1, 1\n{\n\tret;\n}\n"
    spec = {"launches": [{"kernel": "k", "grid": [1, 1, 1], "block": [16, 16, 1], "args": [{"tensor": "C"}]}]}
    assert check(LaunchSpec.model_validate(spec), entries(ptx)) == []
    spec["launches"][0]["block"] = [32, 16, 1]
    assert check(LaunchSpec.model_validate(spec), entries(ptx)) == [
        "launches[0].block: 512 threads, over entry 'k''s .maxntid [256, 1, 1]"
    ]


def test_static_plus_dynamic_shared_memory(hopper_entries, compiled):
    # 4104 B of static .shared: 228,344 dynamic bytes fit exactly, one more does not.
    assert check(with_launch(shared_bytes=232448 - 4104), hopper_entries, compiled) == []
    assert check(with_launch(shared_bytes=232448 - 4103), hopper_entries, compiled) == [
        "launches[0]: 4104 B of static .shared plus shared_bytes 228345 is 232449 B, over sm_90a's 232448 B per block"
    ]


def test_unknown_kernel_lists_the_entries(hopper_entries):
    assert check(with_launch(kernel="gemm"), hopper_entries) == [
        "launches[0].kernel: no .entry named 'gemm'; the module has: gemm_wgmma_tma"
    ]
    assert check(with_launch(kernel="gemm"), {}) == ["launches[0].kernel: no .entry named 'gemm'; the module has: none"]


def test_mangled_cuda_names_get_a_hint():
    ptx = ".version 8.0\n.target sm_90a\n.visible .entry _Z4gemmPf(.param .u64 p)\n{\n\tret;\n}\n"
    [problem] = check(with_launch(kernel="gemm"), entries(ptx))
    assert 'the module has: _Z4gemmPf (declare CUDA kernels extern "C" to keep their names)' in problem


def test_entry_without_parameter_list():
    ptx = ".version 8.0\n.target sm_90a\n.visible .entry noargs\n.reqntid 32\n{\n\tret;\n}\n"
    found = entries(ptx)
    assert list(found) == ["noargs"] and found["noargs"].params == [] and found["noargs"].reqntid == [32]
    spec = LaunchSpec.model_validate({"launches": [{"kernel": "noargs", "grid": [1, 1, 1], "block": [32, 1, 1]}]})
    assert check(spec, found) == []


def test_every_launch_is_checked(hopper_entries):
    launch = HOPPER_SPEC["launches"][0]
    spec = LaunchSpec.model_validate({"launches": [launch, {**launch, "block": [64, 1, 1]}, {**launch, "kernel": "x"}]})
    assert [p.split(":")[0] for p in check(spec, hopper_entries)] == ["launches[1].block", "launches[2].kernel"]
