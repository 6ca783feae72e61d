"""SASS through the real nvdisasm: opcode histograms per kernel, static presence of each target group (PTX
mnemonic in the source, SASS opcode in the cubin), and local-memory traffic."""

from __future__ import annotations

import pytest

from tasks.catalog import TARGETS
from tasks.schema import Arch
from tests.tools.files import read_ptx
from tools import sass
from tools.assemble import compile_ptx
from tools.toolchain import ToolNotFound


def test_wgmma_kernel_shows_hgmma_and_tma(opcodes):
    ops = opcodes["wgmma"]["gemm_wgmma_tma"]
    assert ops["HGMMA.64x64x16.F32.BF16"] == 1
    assert ops["UTMALDG.2D"] == 4
    assert ops["WARPGROUP.ARRIVE"] >= 1 and any(op.startswith("WARPGROUP.DEPBAR") for op in ops)
    assert any(op.startswith("SYNCS.PHASECHK") for op in ops)  # the mbarrier wait


def test_tcgen05_kernel_shows_utchmma_and_tensor_memory(opcodes):
    ops = opcodes["tcgen05"]["gemm_tcgen05_tma"]
    assert ops["UTCHMMA"] == 1
    assert ops["LDTM.x16"] == 4
    assert ops["UTCBAR"] >= 1  # tcgen05.commit
    assert ops["UTCATOMSWS.FIND_AND_SET.ALIGN"] + ops["UTCATOMSWS.AND"] >= 1  # tcgen05.alloc / dealloc
    assert ops["UTMALDG.2D"] == 4


@pytest.mark.parametrize(
    ("name", "arch", "expected"),
    [
        ("wgmma", Arch.SM_90A, {"wgmma": ["HGMMA.64x64x16.F32.BF16"], "tma": ["UTMALDG.2D"]}),
        ("triton_sm_90a", Arch.SM_90A, {"wgmma": ["HGMMA.64x128x16.F32.BF16"], "tma": ["UTMALDG.2D", "UTMASTG.2D"]}),
        ("tcgen05", Arch.SM_100A, {"tcgen05": ["UTCHMMA"], "tmem": ["LDTM.x16"], "tma": ["UTMALDG.2D"]}),
        ("triton_sm_100a", Arch.SM_100A,
         {"tcgen05": ["UTCHMMA"], "tmem": ["LDTM.x128", "STTM.x128"], "tma": ["UTMALDG.2D", "UTMASTG.2D"]}),
    ],
)  # fmt: skip
def test_target_groups_present_in_ptx_and_sass(opcodes, name, arch, expected):
    found = sass.target_presence(TARGETS[arch], read_ptx(name), opcodes[name])
    assert set(found) == {g.name for g in TARGETS[arch]}
    for group, ops in expected.items():
        assert found[group].ptx and found[group].sass, (group, found[group])
        assert sorted(found[group].sass_matches) == ops
        assert all(n > 0 for n in found[group].sass_matches.values())
    assert any(m.startswith("cp.async.bulk.tensor") for m in found["tma"].ptx_matches)


def test_kernel_without_target_instructions(opcodes):
    for arch in Arch:
        found = sass.target_presence(TARGETS[arch], read_ptx("local_array"), opcodes["local_array"])
        assert not any(p.ptx or p.sass for p in found.values())
        assert all(p.ptx_matches == [] and p.sass_matches == {} for p in found.values())


def test_ptx_and_sass_are_judged_separately(opcodes):
    # The mnemonics are in the source but the cubin is another kernel's: PTX yes, SASS no.
    found = sass.target_presence(TARGETS[Arch.SM_90A], read_ptx("wgmma"), opcodes["local_array"])
    assert found["wgmma"].ptx and not found["wgmma"].sass
    assert found["wgmma"].ptx_matches == ["wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"]


def test_wgmma_fence_alone_is_not_the_wgmma_group():
    ptx = ".version 8.0\n.target sm_90a\n.visible .entry k()\n{\n\twgmma.fence.sync.aligned;\n\tret;\n}\n"
    found = sass.target_presence(TARGETS[Arch.SM_90A], ptx, {})
    assert not found["wgmma"].ptx


def test_histograms_per_kernel(opcodes):
    [summary] = sass.kernel_summaries(opcodes["wgmma"])
    assert summary.name == "gemm_wgmma_tma"
    assert summary.instructions == sum(summary.opcodes.values()) == sum(opcodes["wgmma"]["gemm_wgmma_tma"].values())
    assert summary.opcodes["HGMMA"] == 1 and summary.opcodes["UTMALDG"] == 4 and summary.opcodes["EXIT"] >= 1
    assert list(summary.opcodes.values()) == sorted(summary.opcodes.values(), reverse=True)
    assert summary.local_memory == {}


def test_local_memory_traffic_is_flagged(opcodes):
    [summary] = sass.kernel_summaries(opcodes["local_array"])
    assert set(summary.local_memory) == {"LDL", "STL"}
    assert summary.local_memory["STL"] >= 1 and summary.local_memory["LDL"] >= 1


def test_two_kernels_in_one_module():
    two = read_ptx("local_array") + read_ptx("local_array").split(".address_size 64", 1)[1].replace(
        "local_array(", "local_array_2("
    )
    result = compile_ptx(two, Arch.SM_90A)
    assert result.ok, result.message()
    assert sorted(k.name for k in result.kernels) == ["local_array", "local_array_2"]
    ops = sass.full_opcodes(sass.disassemble(result.cubin))
    assert sorted(ops) == ["local_array", "local_array_2"]
    assert ops["local_array"] == ops["local_array_2"]


def test_garbage_cubin_is_a_sass_error():
    with pytest.raises(sass.SassError, match="nvdisasm failed"):
        sass.disassemble(b"\x7fELF not really a cubin")


def test_missing_nvdisasm_is_a_sass_error(monkeypatch):
    def not_found(name):
        raise ToolNotFound(f"{name} not found; looked at: nowhere")

    monkeypatch.setattr(sass, "find_tool", not_found)
    with pytest.raises(sass.SassError, match="nvdisasm not found"):
        sass.disassemble(b"")
