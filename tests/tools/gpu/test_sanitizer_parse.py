"""compute-sanitizer's reports, as recorded on the H200 (tests/fixtures/gpu/recorded/, CUDA 13.0), parsed into
findings — kind, kernel and SASS offset, the source line the cubin's line info names, thread and block, address
and the nearest allocation; host backtraces left out — and told in the answer's terms: the line quoted, the
address placed against the task's buffers, threads at one instruction grouped."""

from __future__ import annotations

from pathlib import Path

from tasks import get_task
from tasks.schema import Arch
from tests.gpu.kernels import OOB_CUDA, OOB_PTX, elementwise_answer, line_of
from tools import pointers
from tools.answer import extract_solution
from tools.assemble import compile_source
from tools.gpu.sanitizer import AccessCode, Allocation, Finding, explain, parse_findings, place, summary
from tools.plan import plan_launches

RECORDED = Path(__file__).parents[2] / "fixtures" / "gpu" / "recorded"
BASE = 0x7F4464800000  # the recorded run's allocation (its report names it)
C = Allocation(name="C", address=BASE, bytes=4096, dtype="float32", shape=[32, 32])
A = Allocation(name="A", address=BASE - (1 << 21), bytes=8192, dtype="bfloat16", shape=[64, 64])
TASK = get_task("gemm")


def findings(name: str):
    return parse_findings((RECORDED / name).read_text())


def source(line: int, text: str) -> list[str]:
    """A stand-in answer whose `line` holds `text` (the recorded kernel's source is not kept)."""
    return [f"// line {i}" if i != line else text for i in range(1, 40)]


def test_an_out_of_bounds_store_in_ptx_with_line_info() -> None:
    found = findings("memcheck_ptx_oob.txt")
    assert len(found) == 5  # --print-limit 5: the first five threads
    first = found[0]
    assert first.kind == "Invalid __global__ write of size 4 bytes" and first.access_bytes == 4
    assert (first.kernel, first.offset, first.file, first.line) == ("oob_store", "0x90", "kernel.ptx", 20)
    assert (first.thread, first.block) == ([0, 0, 0], [3, 0, 0])
    assert first.address == "0x7f4464801000"
    assert first.nearest == {"bytes": 1, "side": "after", "base": "0x7f4464800000", "size": 4096}
    assert [f.thread[0] for f in found] == [0, 1, 2, 3, 4]
    assert "Host Frame" not in first.line_text()


def test_the_finding_is_told_with_its_ptx_line_its_thread_and_the_tensor_it_missed() -> None:
    found = explain(findings("memcheck_ptx_oob.txt"), {"kernel.ptx": source(20, "  st.global.b32 [%rd3], %r5;")},
                    [A, C])  # fmt: skip
    text = found[0].line_text()
    assert text.startswith("Invalid __global__ write of size 4 bytes at line 20: `st.global.b32 [%rd3], %r5;`")
    assert "(oob_store+0x90), thread (0, 0, 0) of block (3, 0, 0)" in text
    assert text.endswith("address 0x7f4464801000, 0 bytes past the end of C (float32 [32, 32], 4,096 bytes)")
    assert found[4].placed.startswith("16 bytes past the end of C")
    told = summary(found, 257)
    assert told.startswith("(5 of 257 reported shown)\n- Invalid __global__ write")
    assert told.count("\n- ") == 1 and "(and 4 more threads at the same instruction)" in told


def test_the_same_fault_in_a_cuda_answer_names_the_cuda_line() -> None:
    first = explain(findings("memcheck_cuda_oob.txt"), {"answer.cu": source(4, "c[i + past] = 0;")}, [C])[0]
    assert (first.file, first.line, first.kernel) == ("answer.cu", 4, "oob_store")
    assert "at answer.cu line 4: `c[i + past] = 0;`" in first.line_text()


def test_addresses_are_placed_inside_before_and_past_the_nearest_buffer() -> None:
    assert place(BASE + 4 * 33, 4, [A, C]) == "inside C (float32 [32, 32], 4,096 bytes), at byte 132 = element [1, 1]"
    assert place(BASE + 4094, 4, [C]).endswith("= element [31, 31], and the access runs past its end")
    assert place(BASE - 64, 4, [A, C]).startswith("64 bytes before the start of C")
    assert place(A.address + A.bytes + 8, 2, [A, C]).startswith("8 bytes past the end of A")
    assert place(BASE, 4, []) is None


def test_a_far_address_is_placed_against_the_pointer_it_came_from_or_outside_every_buffer() -> None:
    far = BASE + (1 << 40)  # what a store 2^40 bytes past C's start reaches (as the H200 run of 2026-12-01 did)
    nearest = place(far, 2, [A, C])
    assert nearest.startswith("outside every task buffer: ") and "wrong base pointer or an index" in nearest
    told = place(far, 2, [A, C], origin="C")
    assert told == (f"{far - BASE - C.bytes:,} bytes past the end of C (float32 [32, 32], 4,096 bytes) — the pointer "
                    "this access is computed from")  # fmt: skip
    assert place(BASE + 4, 4, [A, C], origin="C").startswith("inside C") and place(far, 2, [A, C], "Z") == nearest


def test_the_pointer_an_access_comes_from_is_read_from_the_ptx_and_through_nvrtcs_lines() -> None:
    plan = plan_launches(extract_solution(elementwise_answer("ptx", OOB_PTX, "oob_store")).launch, TASK, Arch.SM_90A)
    store = line_of(OOB_PTX, "st.global")
    assert pointers.origins(OOB_PTX, store) == {"c"} and pointers.origins(OOB_PTX, 1) == set()
    code = AccessCode(language="ptx", ptx=OOB_PTX, plan=plan)
    assert code.tensor_of(Finding(kind="Invalid __global__ write", kernel="oob_store", line=store)) == "C"
    assert code.tensor_of(Finding(kind="Invalid __global__ write", kernel="oob_store", line=store - 1)) is None
    compiled = compile_source("cuda", OOB_CUDA, Arch.SM_90A)  # NVRTC's PTX, with its .loc lines
    cuda_line = line_of(OOB_CUDA, "c[i + past]")
    (ptx_store,) = pointers.cuda_line_statements(compiled.ptx, "answer.cu", cuda_line)
    assert compiled.ptx.splitlines()[ptx_store - 1].strip().startswith("st.global")
    cuda = AccessCode(language="cuda", ptx=compiled.ptx, plan=plan)
    assert cuda.tensor_of(Finding(kind="Invalid __global__ write", kernel="oob_store", file="answer.cu",
                                  line=cuda_line)) == "C"  # fmt: skip


def test_a_shared_memory_race() -> None:
    [race] = findings("racecheck_shared.txt")
    assert race.kind.startswith("Error: Race reported between Write access")
    assert (race.kernel, race.offset, race.file, race.line) == ("race", "0xb0", "kernel.ptx", 16)
    assert race.other == {"access": "Read", "offset": "0xc0", "line": 21} and race.hazards == 256
    lines = source(16, "st.shared.b32 [%r7], %r3;")
    lines[20] = "ld.shared.b32 %r11, [%r10];"
    [race] = explain([race], {"kernel.ptx": lines}, [C])
    assert race.placed is None  # a shared-memory race has no global address
    assert race.line_text() == (
        "Error: Race reported between Write access at line 16: `st.shared.b32 [%r7], %r3;` (race+0xb0) and Read "
        "access at line 21: `ld.shared.b32 %r11, [%r10];` [256 hazards]"
    )


def test_a_clean_report_has_no_findings() -> None:
    assert parse_findings("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == []
