"""The knowledge packs as composable parts: every PTX snippet in them assembles with the real ptxas for its arch
(whole modules as written, fragments inside a kernel that declares the registers and parameters they use), every
CUDA snippet compiles with the real NVRTC and ptxas, none draws a warning or info line from either (a
serialized wgmma, a spill, local memory), the target instructions they teach show up in the SASS, and the sm_100a
pack carries no Hopper facts."""

from __future__ import annotations

import json
import re

import pytest

from agent.loop.prompts import PARTS, knowledge, parse_prompt, prompt_name, system_prompt, toolchain
from tasks.catalog import get_task
from tasks.schema import Arch
from tools import sass
from tools.assemble import compile_cuda, compile_ptx
from tools.plan import plan_launches
from tools.solution import LaunchSpec

BLOCK = re.compile(r"^```ptx\n(.*?)^```", re.S | re.M)
CUDA_BLOCK = re.compile(r"^```cuda\n(.*?)^```", re.S | re.M)
# A fragment runs inside this kernel: registers by prefix (%p predicates, %h 16-bit, %r 32-bit, %rd 64-bit, %f
# fp32), the parameters tmap_a, tmap_b, tmap_c (tensor maps), c (a pointer) and n (a count), and `smem`.
KERNEL = """\
.version {version}
.target {arch}
.address_size 64

.extern .shared .align 1024 .b8 smem[];

.visible .entry snippet(
    .param .align 64 .b8 tmap_a[128],
    .param .align 64 .b8 tmap_b[128],
    .param .align 64 .b8 tmap_c[128],
    .param .u64 c,
    .param .u32 n
)
.reqntid 384, 1, 1
.minnctapersm 1
{{
    .reg .pred %p<16>;
    .reg .b16 %h<16>;
    .reg .b32 %r<64>;
    .reg .b64 %rd<16>;
    .reg .f32 %f<64>;
{body}
    ret;
}}
"""
TARGETS = {
    Arch.SM_90A: {"HGMMA", "UTMALDG", "UTMASTG", "UTMAREDG", "USETMAXREG", "SYNCS", "STSM", "ELECT"},
    Arch.SM_100A: {"UTCHMMA", "UTCBAR", "LDTM", "UTMALDG", "UTMASTG", "UTMAREDG", "USETMAXREG", "SYNCS"},
}


def snippets(text: str) -> list[tuple[int, str]]:
    """(line in `text`, code) of every ```ptx block."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in BLOCK.finditer(text)]


def module_of(code: str, arch: Arch) -> str:
    """A whole module as written; an `.entry` with the module header added; a fragment inside KERNEL."""
    if ".version" in code:
        return code
    header = f".version {toolchain().max_ptx_version}\n.target {arch}\n.address_size 64\n"
    if ".entry" in code:
        return header + code
    return KERNEL.format(version=toolchain().max_ptx_version, arch=arch, body=code)


@pytest.fixture(scope="module", params=list(Arch), ids=str)
def assembled(request):
    arch = request.param
    text = knowledge(arch, parse_prompt("full"))
    return arch, text, [(line, compile_ptx(module_of(code, arch), arch)) for line, code in snippets(text)]


def test_every_snippet_assembles_for_its_arch(assembled) -> None:
    _, _, results = assembled
    assert len(results) >= 12
    failed = [f"line {line}: {r.message()}" for line, r in results if not r.ok]
    assert not failed, "\n".join(failed)
    # Not a warning either: setmaxnreg ignored (C7508), an instruction the arch does not have, …
    warned = [f"line {line}: {d.render()}" for line, r in results for d in r.diagnostics]
    assert not warned, "\n".join(warned)


@pytest.mark.parametrize("arch", list(Arch), ids=str)
def test_every_cuda_snippet_compiles_without_a_word_from_the_compilers(arch: Arch) -> None:
    text = knowledge(arch, parse_prompt("full"))
    blocks = [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in CUDA_BLOCK.finditer(text)]
    assert len(blocks) >= (2 if arch is Arch.SM_90A else 1)
    for line, code in blocks:
        result = compile_cuda(code, arch)
        assert result.ok, f"line {line}: {result.message()}"
        assert not result.diagnostics, f"line {line}: " + "\n".join(d.render() for d in result.diagnostics)


INLINE_TENSOR_MAP = re.compile(r'`(\{"tensor_map": [^`…]*\})`')  # whole ones, not those cut short with …
INLINE_GRID = re.compile(r'`"grid": (\[[^`]*\])`')
# The backward's scratch buffers, declared as its worked example declares them.
SCRATCH = [{"name": "delta", "dtype": "float32", "shape": ["B", "H", "S"]},
           {"name": "dq_accum", "dtype": "float32", "shape": ["B", "H", "S", "D"]}]  # fmt: skip


@pytest.mark.parametrize("arch", list(Arch), ids=str)
def test_the_launch_spec_pieces_in_the_pack_plan(arch: Arch) -> None:
    """Each tensor-map argument the pack writes out plans against the attention backward (its view, box and
    alignment pass the harness's checks), and each grid against the GEMM: SpecError would say what fails."""
    text = knowledge(arch, parse_prompt("full"))
    maps, grids = INLINE_TENSOR_MAP.findall(text), INLINE_GRID.findall(text)
    assert len(maps) >= 2 and grids
    for arg in maps:
        launch = {"kernel": "k", "grid": [1, 1, 1], "block": [128, 1, 1], "args": [json.loads(arg)]}
        plan = plan_launches(LaunchSpec.model_validate({"launches": [launch], "scratch": SCRATCH}),
                             get_task("attn_bwd"), arch)  # fmt: skip
        assert plan.launches[0].args[0].tensor_map is not None
    for grid in grids:
        spec = LaunchSpec.model_validate(
            {"launches": [{"kernel": "k", "grid": json.loads(grid), "block": [128, 1, 1]}]}
        )
        assert plan_launches(spec, get_task("gemm"), arch).launches[0].grid[0] == arch.sm_count


def test_the_snippets_execute_what_they_teach(assembled) -> None:
    """Their SASS holds the pack's target instructions: none was optimised away or silently lowered otherwise."""
    arch, _, results = assembled
    opcodes = {op.split(".")[0] for _, r in results for ops in sass.full_opcodes(sass.disassemble(r.cubin)).values()
               for op in ops}  # fmt: skip
    assert TARGETS[arch] <= opcodes, TARGETS[arch] - opcodes


def test_the_blackwell_pack_carries_no_hopper_facts() -> None:
    text = system_prompt(Arch.SM_100A, parse_prompt("full"))
    assert "148 SMs" in text and "148 CTAs" in text
    for hopper in (r"\b132\b", "H200", "H100", r"wgmma\.mma_async", "HGMMA"):
        assert not re.search(hopper, text), hopper
    hopper = system_prompt(Arch.SM_90A, parse_prompt("full"))
    assert "132 SMs" in hopper and not re.search(r"\b148\b", hopper) and "tcgen05.mma" not in hopper


@pytest.mark.parametrize(
    ("choice", "parts", "name"),
    [
        ("full", PARTS, "full"),
        ("base", ("base",), "base"),
        ("none", (), "none"),
        ("backward_dq, base", ("base", "backward_dq"), "base,backward_dq"),
        ("base,warp_specialization,persistent_clusters,attention_pipeline,backward_dq", PARTS, "full"),
    ],
)
def test_prompt_choices(choice: str, parts: tuple[str, ...], name: str) -> None:
    assert parse_prompt(choice) == parts and prompt_name(parts) == name


@pytest.mark.parametrize("bad", ["fast", "base,wgmma", ","])
def test_an_unknown_part_is_refused_naming_the_parts(bad: str) -> None:
    with pytest.raises(ValueError, match="give full, base, none, or a comma list of base, warp_specialization"):
        parse_prompt(bad)


def test_no_knowledge_leaves_the_rules_and_no_empty_section() -> None:
    text = system_prompt(Arch.SM_90A, ())
    assert "# How to answer" in text and "what you need to know" not in text and "wgmma" not in text
