"""PTX → cubin with the real ptxas: both arches, per-kernel resources, diagnostics on the offending line
with the line quoted, and the refusals that come before ptxas runs (wrong target, size cap, time-out)."""

from __future__ import annotations

import pytest

from tasks.schema import Arch
from tests.tools.files import KERNELS, read_ptx
from tools.assemble import MAX_SOURCE_BYTES, compile_ptx, compile_source


def line_of(text: str, needle: str) -> int:
    """1-based number of the first line holding `needle`."""
    return next(i for i, line in enumerate(text.splitlines(), start=1) if needle in line)


@pytest.mark.parametrize("name", list(KERNELS))
def test_fixture_kernels_compile_for_their_arch(compiled, name):
    result = compiled[name]
    assert result.ok, result.message()
    assert result.arch is KERNELS[name][1]
    assert result.cubin[:4] == b"\x7fELF"
    assert result.errors == []
    assert result.toolchain["ptxas"].startswith("13.0")
    assert result.seconds > 0


def test_resources_per_kernel(compiled):
    hopper = compiled["wgmma"].kernels
    assert [k.name for k in hopper] == ["gemm_wgmma_tma"]
    # smem_a + smem_b (2 KiB each) + one 8-byte mbarrier
    assert hopper[0].shared_bytes == 2048 + 2048 + 8
    assert 32 < hopper[0].registers <= 255  # the 32 accumulators alone need 32
    assert hopper[0].barriers == 1
    assert (hopper[0].stack_bytes, hopper[0].spill_stores, hopper[0].spill_loads) == (0, 0, 0)
    blackwell = compiled["tcgen05"].kernels[0]
    assert blackwell.name == "gemm_tcgen05_tma" and blackwell.shared_bytes == 4096 + 2048 + 8 + 8 + 4
    triton = compiled["triton_sm_90a"].kernels[0]
    assert triton.name == "gemm_tma" and triton.shared_bytes == 0  # Triton uses dynamic shared memory only
    assert triton.registers > 128  # a 128×128 fp32 accumulator over 128 threads
    assert compiled["local_array"].kernels[0].stack_bytes == 1024  # the run-time-indexed table


def test_both_arches_from_one_plain_source():
    plain = read_ptx("local_array").replace(".target sm_90a", ".target sm_90")
    for arch in Arch:
        result = compile_ptx(plain, arch)
        assert result.ok, result.message()
        assert result.arch is arch


@pytest.fixture(scope="module")
def broken():
    """The Hopper kernel with a misspelt instruction and an undeclared register, each on a known line."""
    text = read_ptx("wgmma")
    text = text.replace("wgmma.commit_group.sync.aligned;", "wgmma.comit_group.sync.aligned;")
    text = text.replace("xor.b32 \t%r11, %r11, 1;", "xor.b32 \t%r11, %r99, 1;")
    return text, compile_ptx(text, Arch.SM_90A)


def test_errors_land_on_their_lines(broken):
    text, result = broken
    assert not result.ok and result.cubin is None
    typo, undeclared = line_of(text, "wgmma.comit_group"), line_of(text, "%r99")
    by_line = {}
    for d in result.errors:
        by_line.setdefault(d.line, []).append(d)
    assert set(by_line) == {typo, undeclared}
    assert any("Unknown modifier '.comit_group'" in d.message for d in by_line[typo])
    assert any("Unknown symbol '%r99'" in d.message for d in by_line[undeclared])
    assert {d.source_line for d in by_line[typo]} == {"wgmma.comit_group.sync.aligned;"}
    assert all(d.severity == "error" for d in result.diagnostics)


def test_message_renders_line_and_quote(broken):
    text, result = broken
    message = result.message()
    assert f"line {line_of(text, 'wgmma.comit_group')}: error: Unknown modifier '.comit_group'" in message
    assert "\n    wgmma.comit_group.sync.aligned;" in message
    assert "assembly aborted" not in message  # ptxas's summary line is not a diagnostic
    assert len(result.message(limit=1).splitlines()) == 3  # one error, its quote, and "… and N more"
    assert result.message(limit=1).endswith(f"… and {len(result.errors) - 1} more errors")


def test_wrong_target_for_the_arch_is_refused_before_ptxas():
    result = compile_ptx(read_ptx("tcgen05"), Arch.SM_90A)
    assert not result.ok and "ptxas" not in result.toolchain
    assert result.diagnostics[0].line is None
    assert result.message() == (
        "module: error: the module is written for .target sm_100a, but this task is for sm_90a: write `.target sm_90a`"
    )
    assert (
        "written for .target sm_90a, but this task is for sm_100a"
        in compile_ptx(read_ptx("wgmma"), Arch.SM_100A).message()
    )


def test_generic_target_without_arch_specific_features_is_diagnosed_by_ptxas():
    text = read_ptx("wgmma").replace(".target sm_90a", ".target sm_90")
    result = compile_ptx(text, Arch.SM_90A)
    assert not result.ok
    assert any(
        d.line == line_of(text, "wgmma.fence") and "not supported on .target 'sm_90'" in d.message
        for d in result.errors
    )


def test_missing_target():
    result = compile_ptx(read_ptx("wgmma").replace(".target sm_90a", ""), Arch.SM_90A)
    assert (
        result.message()
        == "module: error: no .target directive: a PTX module starts with .version and `.target sm_90a`"
    )


def test_too_new_version_says_what_to_change():
    text = read_ptx("wgmma").replace(".version 8.0", ".version 9.5")
    result = compile_ptx(text, Arch.SM_90A)
    [error] = result.errors
    assert error.line == line_of(text, ".version 9.5") and error.source_line == ".version 9.5"
    assert "Unsupported .version 9.5; current version is '9.0'" in error.message
    assert "change the .version line" in error.message


def test_size_cap():
    text = read_ptx("local_array") + "//" + "x" * MAX_SOURCE_BYTES
    assert compile_ptx(text, Arch.SM_90A).message() == "module: error: the PTX is over the 16 MB cap"


def test_nul_bytes():
    assert "holds NUL bytes" in compile_ptx(read_ptx("local_array") + "\0", Arch.SM_90A).message()


def test_time_out():
    result = compile_ptx(read_ptx("triton_sm_90a"), Arch.SM_90A, timeout_s=0.001)
    assert not result.ok
    assert "ptxas did not finish within" in result.message()


def test_compile_source_dispatches_on_language():
    result = compile_source("ptx", read_ptx("local_array"), Arch.SM_90A)
    assert result.ok and result.language == "ptx" and result.ptx == read_ptx("local_array")


def test_a_long_quoted_line_keeps_the_operands_after_its_register_list():
    """A 64-register accumulator list would push the wrong immediate out of a cut quote: the list is elided."""
    source = read_ptx("triton_sm_90a")
    bad = source.replace("%rd6, %rd7, %p19, 1, 1, 0, 0;", "%rd6, %rd7, %p19, 1, 1, 0, 2;", 1)
    [error] = compile_ptx(bad, Arch.SM_90A).errors
    assert "unexpected value '2'" in error.message
    assert error.source_line == (
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%r142, %r143, … 60 more …, %r204, %r205}, "
        "%rd6, %rd7, %p19, 1, 1, 0, 2;"
    )
