"""Where in the kernel, without a GPU (tools/gpu/hot_lines.py): Nsight Compute's source page (`--page source --csv
--print-source sass`), constructed in its format — a `"Kernel Name"` row, the header, a row per SASS instruction at
its address with ncu's counter columns — for the real SASS that the real NVRTC and ptxas make of the GEMM answer
whose tiles lost their padding (16-way bank conflicts on its two shared stores), read and summed per line of the
answer through the real line table; the few hottest lines told per counter; setmaxnreg read from PTX; the scratch
reset as a row of the time split; what is said when something is missing."""

from __future__ import annotations

import csv
import io
import re

import pytest

from tasks import get_task
from tasks.schema import Arch
from tests.gpu.kernels import answer, line_of
from tools import procs, sass
from tools.gpu import hot_lines, ncu, perf
from tools.gpu.base import CompiledModule
from tools.lineinfo import LineTable, answer_sources, line_table
from tools.options import EvalOptions
from tools.perf_report import KernelPerf, PerfReport
from tools.pipeline import build, extract

GEMM = get_task("gemm")
BASE = 0x7F3A5C012300  # where the kernel's code starts, as ncu's Address column gives it
HEADER = ["Address", "Source", "Live Registers", "Warp Stall Sampling (All Samples)",
          "Warp Stall Sampling (Not-issued Samples)", "# Samples", "Instructions Executed",
          "Thread Instructions Executed", "L1 Conflicts Shared N-Way", "L1 Wavefronts Shared Excessive",
          "L1 Wavefronts Shared", "L1 Wavefronts Shared Ideal"]  # fmt: skip
_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;")


@pytest.fixture(scope="module")
def module() -> CompiledModule:
    static = build(extract(GEMM, Arch.SM_90A, answer=answer("bank_conflicts")), GEMM, Arch.SM_90A, EvalOptions())
    assert static.module is not None, [s.message for s in static.stages]
    return static.module


@pytest.fixture(scope="module")
def table(module) -> LineTable:
    found = line_table(module.language, module.ptx, module.cubin, Arch.SM_90A, procs.Budget(60))
    assert found.lines, found.note
    return found


def instructions(module: CompiledModule) -> list[tuple[int, str]]:
    return [(int(m.group(1), 16), m.group(2)) for text in sass.disassemble(module.cubin).splitlines()
            if (m := _INSTRUCTION.match(text))]  # fmt: skip


def counters(offset: int, text: str, stores: dict[int, int]) -> dict[str, float]:
    """Made-up but shaped like the kernel: every instruction executed, the two stores 16-way conflicted (the As
    store's the most), the LDS the most stalled."""
    executed = 71_680 if text.startswith(("LDS", "FFMA")) else 4_480
    excessive = stores.get(offset, 0)
    stalls = 900 if text.startswith("LDS") else 12
    return {"Warp Stall Sampling (All Samples)": stalls, "Instructions Executed": executed,
            "Thread Instructions Executed": 32 * executed, "L1 Wavefronts Shared Excessive": excessive,
            "L1 Conflicts Shared N-Way": 16 if excessive else 0}  # fmt: skip


def page(module: CompiledModule, launches: int = 1, store_conflicts: tuple[int, int] = (67_200, 60_000)) -> str:
    """The source page ncu would print for `launches` profiled launches of the kernel."""
    code = instructions(module)
    stores = [offset for offset, text in code if text.startswith("STS")]
    conflicted = dict(zip(stores, store_conflicts, strict=True))
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    for _ in range(launches):
        writer.writerow(["Kernel Name", "gemm_bt"])
        writer.writerow(HEADER)
        for offset, text in code:
            values = counters(offset, text, conflicted)
            writer.writerow([f"{BASE + offset:#x}", text, "32"] + [f"{values.get(h, 0):,.0f}" for h in HEADER[3:]])
    return out.getvalue()


def test_the_page_is_read_per_instruction_by_offset_and_summed_over_launches(module) -> None:
    code = instructions(module)
    once = hot_lines.parse_source_page(page(module))["gemm_bt"]
    assert [(i.offset, i.sass) for i in once] == code  # offsets from the first address, the SASS as printed
    nameless = hot_lines.parse_source_page("\n".join(page(module).splitlines()[1:]))  # no "Kernel Name" row
    assert list(nameless) == [""] and [i.offset for i in nameless[""]] == [offset for offset, _ in code]
    assert hot_lines.plan_kernel("", ["gemm_bt"]) == "gemm_bt"
    twice = hot_lines.parse_source_page(page(module, launches=2))["gemm_bt"]
    store = next(i for i in twice if i.sass.startswith("STS"))
    assert store.counts == {"bank_conflicts": 2 * 67_200, "stall_samples": 24, "executed": 2 * 4_480}


def test_the_bank_conflicting_store_is_the_top_line_quoted_as_the_answer_wrote_it(module, table) -> None:
    sources = answer_sources(module.language, module.ptx, module.cuda_source)
    hot, note = hot_lines.hot_lines(hot_lines.parse_source_page(page(module)), table, sources, ["gemm_bt"])
    assert note is None
    store_a = line_of(module.cuda_source, "As[kk][r] =")
    ranked = sorted(hot, key=lambda h: -h.bank_conflicts)
    assert [(h.file, h.line) for h in ranked[:2]] == [("answer.cu", store_a), ("answer.cu", store_a + 1)]
    assert ranked[0].bank_conflicts == 67_200 and ranked[0].quoted.startswith("As[kk][r] = __bfloat162float(")
    text = hot_lines.hot_lines_text(hot, note)
    assert f"- shared-memory bank conflicts (excess wavefronts): answer.cu line {store_a} `As[kk][r] =" in text
    assert "67,200 (53%)" in text  # its share of the conflicts on the lines shown
    lds_line = line_of(module.cuda_source, "a[i] = As[kk][ty * 4 + i]")
    assert f"- warp stall samples: answer.cu line {lds_line} " in text  # every LDS sits on that one line


def test_without_a_line_table_or_a_page_the_note_says_why(module) -> None:
    parsed = hot_lines.parse_source_page(page(module))
    sources = answer_sources(module.language, module.ptx, module.cuda_source)
    none = LineTable(note="the copy with line information did not assemble (ptxas: …)")
    assert hot_lines.hot_lines(parsed, none, sources, ["gemm_bt"]) == (
        [],
        "no per-line counters: the copy with line information did not assemble (ptxas: …)",
    )
    assert hot_lines.hot_lines_text([], "no per-line counters: x") == "Where in the kernel: no per-line counters: x."
    missing = ncu.Pages(raw="", source_error="ncu's source page: unknown option")
    assert perf.where_in_kernel(module, Arch.SM_90A, missing, 60) == ([], "no per-line counters: ncu's source "
                                                                       "page: unknown option")  # fmt: skip
    assert perf.where_in_kernel(module, Arch.SM_90A, ncu.Pages(raw="", source='"Kernel Name","gemm_bt"\n'), 60)[
        1
    ].startswith("no per-line counters: ncu's source page listed no instruction")


def test_a_kernel_name_with_its_signature_is_the_plans_kernel() -> None:
    assert hot_lines.plan_kernel("void gemm_bt(const bf16*, int)", ["gemm_bt", "other"]) == "gemm_bt"
    assert hot_lines.plan_kernel("something_else", ["gemm_bt", "other"]) is None
    assert hot_lines.plan_kernel("something_else", ["gemm_bt"]) == "gemm_bt"  # the only one profiled


SPECIALIZED_PTX = """\
.version 8.0
.target sm_90a
.address_size 64

.visible .entry ws(.param .u64 out)
.maxntid 384, 1, 1
{
    .reg .pred %p;
    .reg .b32 %r<3>;
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p, %r1, 128;
    @%p bra PRODUCER;
    setmaxnreg.inc.sync.aligned.u32 232;
    bra DONE;
PRODUCER:
    setmaxnreg.dec.sync.aligned.u32 40;
DONE:
    ret;
}
"""
NVRTC_LIKE_PTX = """\
.version 8.0
.target sm_90a
.address_size 64

.visible .entry ws(.param .u64 out)
{
	.loc	1 12 3
	// begin inline asm
	setmaxnreg.dec.sync.aligned.u32 40;
	// end inline asm
	ret;
}
	.file	1 "/some/folder/answer.cu"
"""


def test_setmaxnreg_is_read_at_the_answers_line() -> None:
    settings = hot_lines.register_settings(SPECIALIZED_PTX, "ptx")
    assert [(s.kernel, s.action, s.registers, s.file, s.line) for s in settings] == [
        ("ws", "inc", 232, "kernel.ptx", line_of(SPECIALIZED_PTX, "setmaxnreg.inc")),
        ("ws", "dec", 40, "kernel.ptx", line_of(SPECIALIZED_PTX, "setmaxnreg.dec")),
    ]
    cuda = hot_lines.register_settings(NVRTC_LIKE_PTX, "cuda")
    assert [(s.action, s.registers, s.file, s.line) for s in cuda] == [("dec", 40, "answer.cu", 12)]
    text = hot_lines.registers_text(settings, [KernelPerf(kernel="ws", registers=168)])
    assert text == (
        "Registers per warpgroup: `ws` launches with 168 per thread; setmaxnreg.inc 232 at line 13, setmaxnreg.dec "
        "40 at line 16: a warpgroup past each holds that many registers per thread."
    )


def test_the_report_tells_the_scratch_reset_the_hot_lines_and_the_registers() -> None:
    launch = KernelPerf(kernel="gemm_bt", duration_ms=4.34, registers=168)
    hot = [hot_lines.HotLine(kernel="gemm_bt", file="answer.cu", line=30, quoted="As[kk][r] = x;",
                             bank_conflicts=54e6, stall_samples=10, executed=100)]  # fmt: skip
    report = PerfReport(launches=[launch], library="cuBLAS", hot_lines=hot, scratch_init_ms=0.56,
                        register_settings=hot_lines.register_settings(SPECIALIZED_PTX, "ptx"))  # fmt: skip
    text = perf.comparison(report)
    assert "your launches: scratch initialisation (before each run) 0.560 ms (11%), `gemm_bt` 4.340 ms (89%)" in text
    assert "answer.cu line 30 `As[kk][r] = x;` 54,000,000 (100%)" in text
    assert "Registers per warpgroup: `ws` setmaxnreg.inc 232" in text  # no launch of `ws`: no count beside it
    assert PerfReport.model_validate_json(report.model_dump_json()) == report  # the record keeps them
    old = PerfReport.model_validate({"launches": [launch.model_dump()], "library": "cuBLAS"})  # a record before
    assert old.hot_lines == [] and old.scratch_init_ms is None
