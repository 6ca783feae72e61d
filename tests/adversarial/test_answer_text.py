"""Answer text built to be slow or nosy: every scan of it is linear, the static stages (NVRTC, ptxas,
nvdisasm) share one time limit, ptxas has a memory cap, what one compile stores is capped, and the CUDA
include sandbox holds for __has_include too (macro-built tests included)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tasks import get_task
from tasks.schema import Arch
from tests.adversarial.helpers import answer, fill_ok
from tools import assemble, ptx
from tools.answer import extract_solution
from tools.crosscheck import cross_check
from tools.evaluation import Stage, Status
from tools.options import EvalOptions
from tools.pipeline import build, evaluate_answer, extract
from tools.plan import plan_launches

GEMM = get_task("gemm")
FILL = fill_ok()
PTX = FILL.split("```ptx\n", 1)[1].split("```", 1)[0]
SPEC = FILL.split("```json\n", 1)[1].split("```", 1)[0]
HEADER = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def timed_evaluation(text: str, **options: float) -> tuple[float, object]:
    start = time.perf_counter()
    evaluation = evaluate_answer(text, GEMM, Arch.SM_90A, EvalOptions(**options))
    return time.perf_counter() - start, evaluation


def test_150000_unclosed_comment_openers_are_refused_at_once() -> None:
    # Each unclosed `/*` once made the comment scan run to the end again: 355 s before ptxas ever ran.
    seconds, evaluation = timed_evaluation(answer(PTX + "/* " * 150_000, SPEC))
    assert evaluation.status is Status.COMPILE_ERROR
    assert seconds < 10


def test_150000_blank_lines_compile_quickly() -> None:
    # `^\s*` at every line start crossed all the blank lines after it: 18 s with eval.timeout_s=5.
    padded = PTX.replace(".address_size 64\n", ".address_size 64\n" + "\n" * 150_000, 1)
    seconds, evaluation = timed_evaluation(answer(padded, SPEC), static_timeout_s=5)
    assert evaluation.status is Status.UNVERIFIED, evaluation.message
    assert seconds < 10


def test_thousands_of_entries_are_cut_off_by_the_static_limit() -> None:
    entries = "".join(f".visible .entry k{i}()\n{{\nret;\n}}\n" for i in range(10_000))
    start = time.perf_counter()
    evaluation = evaluate_answer(answer(HEADER + entries, SPEC), GEMM, Arch.SM_90A, EvalOptions(static_timeout_s=2))
    assert time.perf_counter() - start < 6
    assert evaluation.status is Status.COMPILE_ERROR
    assert "ptxas did not finish within the 2 s limit of the static stages" in evaluation.message


def test_entries_that_never_close_are_read_in_linear_time() -> None:
    text = HEADER + "".join(f".visible .entry k{i}(.param .u64 p{i}\n.reqntid 128\n" for i in range(20_000))
    start = time.perf_counter()
    found = ptx.entries(text)
    assert time.perf_counter() - start < 2
    assert len(found) == 20_000 and found["k7"].params == [] and found["k7"].reqntid == [128]


def test_the_sass_stage_shares_what_the_compile_left() -> None:
    # The limit covers the static stages together: what ptxas used is not there for nvdisasm again.
    static = extract(GEMM, Arch.SM_90A, answer=FILL)
    built = build(static, GEMM, Arch.SM_90A, EvalOptions(static_timeout_s=60))
    assert built.module is not None
    starved = build(static, GEMM, Arch.SM_90A, EvalOptions(static_timeout_s=1e-6))
    assert starved.failed is not None and starved.failed.name is Stage.COMPILE
    assert "limit of the static stages" in starved.failed.message


def test_ptxas_has_a_memory_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    body = "\n".join(f"add.f32 %f{i % 100 + 1}, %f{(i + 1) % 100 + 1}, %f{(i + 7) % 100 + 1};" for i in range(60_000))
    module = HEADER + f".visible .entry k(.param .u64 p)\n{{\n.reg .f32 %f<102>;\n{body}\nret;\n}}\n"
    assert assemble.compile_ptx(module, Arch.SM_90A).ok  # it needs about 120 MB
    monkeypatch.setattr(assemble, "PTXAS_MEMORY_BYTES", 64 << 20)
    result = assemble.compile_ptx(module, Arch.SM_90A)
    assert not result.ok
    assert "Memory allocation failure (ptxas may use 0.0625 GiB here: make the module smaller)" in result.message()


def test_a_compile_keeps_at_most_50_diagnostics() -> None:
    body = "\n".join("mvo.u32 %r1, %r2;" for _ in range(300))
    result = assemble.compile_ptx(HEADER + f".visible .entry k()\n{{\n.reg .b32 %r<3>;\n{body}\nret;\n}}\n",
                                  Arch.SM_90A)  # fmt: skip
    assert len(result.diagnostics) == 50 and result.diagnostics_omitted == 250
    assert result.message().endswith("… and 250 more diagnostics, not kept")


CUDA = 'extern "C" __global__ void k(float* x) {{ x[0] = 1.0f; }}\n'
NOSY = {
    "host_file": '#if __has_include("/etc/shadow")\n#error exists\n#endif\n',
    "angle_brackets": "#if __has_include(</etc/passwd>)\n#endif\n",
    "include_next": '#if __has_include_next("/etc/hostname")\n#endif\n',
    "macro_operand": '#define F "/etc/hostname"\n#if __has_include(F)\n#endif\n',
    "macro_operator": "#define H __has_include\n",
    "pasted_operator": '#define CAT(a, b) a##b\n#if CAT(__has_, include)("/etc/hostname")\n#endif\n',
    "pasted_through_another": (
        "#define CAT(a, b) a%:%:b\n#define X(a, b) CAT(a, b)\n#if X(__has_, include)(<a>)\n#endif\n"
    ),
    "spliced": '#if __has_inc\\\nlude("/etc/hostname")\n#endif\n',
}


@pytest.mark.parametrize("case", NOSY)
def test_has_include_sees_only_the_shipped_headers(case: str) -> None:
    text = f"```cuda\n{NOSY[case]}{CUDA}```\n\n```json\n{SPEC.replace('fill_kernel', 'k')}```\n"
    evaluation = evaluate_answer(text, GEMM, Arch.SM_90A)
    assert evaluation.status is Status.COMPILE_ERROR
    # Refused before NVRTC runs, so no #error can say whether the host file exists.
    assert "refused" in evaluation.message or "may not use" in evaluation.message or "literally" in evaluation.message
    assert "#error directive" not in evaluation.message


def test_has_include_of_a_shipped_header_still_works() -> None:
    source = "#if __has_include(<cuda_bf16.h>)\n#include <cuda_bf16.h>\n#endif\n" + CUDA
    result = assemble.compile_cuda(source, Arch.SM_90A)
    assert result.ok, result.message()


def test_a_register_chain_built_to_be_exponential_is_cross_checked_at_once() -> None:
    """Each register defined from the previous one twice: followed naively, 2^400 paths to the descriptor, and 400
    frames deep. Followed at most 64 definitions back, that descriptor is "could not check", at once."""
    text = (Path(__file__).parents[1] / "fixtures" / "answers" / "hopper_gemm.md").read_text()
    chain = "".join(f"\tor.b64 \t%rd{100 + i + 1}, %rd{100 + i}, %rd{100 + i};\n" for i in range(400))
    text = text.replace("\tor.b64 \t%rd2, %rd2, 34363932672;\n",
                        "\tor.b64 \t%rd2, %rd2, 34363932672;\n\tmov.b64 \t%rd100, %rd2;\n" + chain)  # fmt: skip
    text = text.replace("}, %rd2, %rd3, %p2, 1, 1, 0, 0;", "}, %rd500, %rd3, %p2, 1, 1, 0, 0;")
    solution = extract_solution(text)
    start = time.perf_counter()
    [swizzle, _] = cross_check(solution.source, plan_launches(solution.launch, GEMM, Arch.SM_90A), GEMM, Arch.SM_90A)
    assert time.perf_counter() - start < 2
    assert "could not check the MMA at line" in swizzle.message  # B's descriptor alone was checked
    short = text.replace("%rd500, %rd3", "%rd140, %rd3")  # 40 deep: followed, and each register evaluated once
    [swizzle, _] = cross_check(extract_solution(short).source, plan_launches(solution.launch, GEMM, Arch.SM_90A),
                               GEMM, Arch.SM_90A)  # fmt: skip
    assert swizzle.verdict == "consistent" and "could not check" not in swizzle.message
