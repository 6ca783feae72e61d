"""ptxas's own warnings and info lines, through the real ptxas: each kernel in tests/fixtures/ptx/ptxas_*.ptx
provokes the codes its name gives, every one reaches the diagnostics quoted as ptxas wrote it, attributed to its
kernel and, since each says the kernel runs slowly, with its usual cause; `-v`'s resource report does not;
`python -m tools.compile` prints the serialization message of a conditional wgmma in a loop, and not its fix's."""

from __future__ import annotations

import re

import pytest

from tasks.schema import Arch
from tests.tools.files import PTX
from tools import ptxas_advice
from tools.assemble import compile_ptx
from tools.compile import main

# fixture → (its entry, the codes ptxas 13.0 prints for it, whether it spills)
CASES = {
    "ptxas_c7508_setmaxnreg_ignored": ("setmaxnreg_ignored", {"C7508"}, False),
    "ptxas_c7510_call_in_flight": ("ptxas_c7510_call_in_flight", {"C7510"}, True),
    "ptxas_c7511_register_cap": ("ptxas_c7511_register_cap", {"C7511"}, True),
    "ptxas_c7514_conditional_wgmma": ("conditional_wgmma", {"C7514"}, False),
    "ptxas_c7515_acc_written_in_flight": ("ptxas_c7515_acc_written_in_flight", {"C7515", "C7517"}, False),
    "ptxas_c7517_acc_written_between_wgmmas": ("ptxas_c7517_acc_written_between_wgmmas", {"C7517", "C7519"}, False),
    "ptxas_c7519_no_fence": ("ptxas_c7519_no_fence", {"C7519"}, False),
    "ptxas_c7520_call_between_wgmmas": ("ptxas_c7520_call_between_wgmmas", {"C7520"}, True),
}


def compile_fixture(name: str):
    return compile_ptx((PTX / f"{name}.ptx").read_text(), Arch.SM_90A)


@pytest.mark.parametrize("name", list(CASES))
def test_each_code_reaches_the_diagnostics_with_its_kernel_and_cause(name: str) -> None:
    entry, codes, spills = CASES[name]
    result = compile_fixture(name)
    assert result.ok, result.message()
    seen = {ptxas_advice.code_of(d.message) for d in result.diagnostics} - {None}
    assert seen == codes
    assert all(d.kernel == entry for d in result.diagnostics)
    for d in result.diagnostics:
        assert d.severity in ("info", "warning")
        assert d.performance, d.message  # every one of these says the kernel runs slowly, and we know why
        if code := ptxas_advice.code_of(d.message):
            assert d.severity == "info" and d.message.startswith(f"({code}) ")
            assert d.performance == ptxas_advice.CAUSES[code]
    warnings = [d.message for d in result.diagnostics if d.severity == "warning"]
    if spills:  # the register cap or the call's stack: --warn-on-spills and --warn-on-local-memory-usage say it
        assert any(m.startswith("Registers are spilled to local memory in function") for m in warnings)
        assert any(m.startswith(f"Local memory used for function '{entry}'") for m in warnings)
        assert result.kernels[0].spill_stores > 0
    else:
        assert warnings == []
    # -v's resource report is parsed into the resources, never a diagnostic
    assert not any(re.match(r"Used \d+ registers|Compiling entry|Function properties|Compile time|\d+ bytes gmem",
                            d.message) for d in result.diagnostics)  # fmt: skip


def test_an_injected_instruction_quotes_the_line_ptxas_names() -> None:
    text = (PTX / "ptxas_c7517_acc_written_between_wgmmas.ptx").read_text().splitlines()
    result = compile_fixture("ptxas_c7517_acc_written_between_wgmmas")
    by_code = {ptxas_advice.code_of(d.message): d for d in result.diagnostics}
    for code, quoted in (("C7517", "add.f32"), ("C7519", "wgmma.mma_async")):
        d = by_code[code]
        assert f"around line {d.line} " in d.message
        assert text[d.line - 1].strip().startswith(quoted) and d.source_line.startswith(quoted)


def test_the_peeled_loop_keeps_the_pipeline() -> None:
    result = compile_fixture("ptxas_c7514_peeled")
    assert result.ok and result.diagnostics == []


def test_a_kernel_that_only_uses_local_memory_is_warned_of() -> None:
    [d] = compile_fixture("local_array").diagnostics
    assert (d.severity, d.kernel) == ("warning", "local_array")
    assert d.message == "Local memory used for function 'local_array', size of stack frame: 1024 bytes"
    assert d.performance == ptxas_advice.LOCAL_MEMORY


def test_compile_prints_the_serialization_of_a_conditional_wgmma(capsys) -> None:
    assert main([str(PTX / "ptxas_c7514_conditional_wgmma.ptx"), "--arch", "sm_90a"]) == 0
    out = capsys.readouterr().out
    block = out.split("diagnostics, per kernel as the compilers wrote them", 1)[1]
    serialized = "info: (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non "
    assert f"- kernel conditional_wgmma:\n  {serialized}wgmma instructions reading accumulator registers" in block
    assert f"    usual cause: {ptxas_advice.CAUSES['C7514']}" in block
    assert main([str(PTX / "ptxas_c7514_peeled.ptx"), "--arch", "sm_90a"]) == 0
    assert "diagnostics" not in capsys.readouterr().out


def test_an_unknown_performance_code_counts_with_no_cause_of_ours() -> None:
    assert ptxas_advice.performance_cause("(C7599) Potential Performance Loss: something new") == ""
    assert ptxas_advice.performance_cause("(C7599) something else") is None
    assert ptxas_advice.performance_cause("Registers are spilled to local memory in function 'k', 8 bytes") == (
        ptxas_advice.SPILLS
    )
