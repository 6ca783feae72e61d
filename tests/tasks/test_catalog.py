"""The task catalog as data: every problem of the paper's bf16 GEMM and attention sets at its workload, its fp8
problems and our GQA tasks, under the paper's names, their aliases and former names, shapes, FLOP counts,
baselines and target groups, the groups, and the arch aliases; `python -m tasks` prints them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tasks import baselines, references
from tasks.catalog import (
    CATALOG_VERSION,
    CORE,
    FP8_TARGETS,
    GROUPS,
    TARGETS,
    TASKS,
    get_task,
    renamed,
    resolve_names,
)
from tasks.expr import evaluate
from tasks.schema import Arch, UnknownName

ROOT = Path(__file__).parents[2]
GQA = [f"gqa_{kind}_d128{mask}" for kind in ("with_lse", "bwd") for mask in ("", "_causal")]
ATTENTION = [t.name for t in TASKS.values() if t.family.startswith("attention")]
FP8 = ["fp8_gemm_nt_1d2d_n4096_k7168"] + [f"fp8_mha_with_lse_d{d}{mask}" for d in (64, 96, 128, 256)
                                          for mask in ("", "_causal")]  # fmt: skip


def test_the_catalog_holds_every_problem_of_the_papers_sets():
    assert CORE == [
        "gemm_n7168_k5120", "mha_with_lse_d128", "mha_with_lse_d128_causal", "mha_bwd_d128", "mha_bwd_d128_causal"
    ]  # fmt: skip
    assert (len(GROUPS["gemm"]), len(GROUPS["mha_fwd"]), len(GROUPS["mha_bwd"])) == (82, 14, 24)
    assert GROUPS["fp8"] == FP8 and GROUPS["gqa"] == GQA and GROUPS["core"] == CORE
    assert GROUPS["paper"] == GROUPS["gemm"] + GROUPS["mha_fwd"] + GROUPS["mha_bwd"] + FP8
    assert sorted(TASKS) == sorted(GROUPS["paper"] + GQA) == sorted(GROUPS["all"])
    assert len({(t.definition, tuple(t.dims.items())) for t in TASKS.values()}) == len(TASKS)  # one per workload
    assert len({t.definition for t in TASKS.values() if t.family == "gemm"}) == 17
    assert isinstance(CATALOG_VERSION, int) and CATALOG_VERSION >= 2


@pytest.mark.parametrize(
    ("name", "definition", "dims"),
    [("gemm_n2048_k4096_m93", "gemm_n2048_k4096", {"M": 93, "N": 2048, "K": 4096}),
     ("gemm_n34816_k5120_m8192", "gemm_n34816_k5120", {"M": 8192, "N": 34816, "K": 5120}),
     ("gemm_n7168_k5120_m70", "gemm_n7168_k5120", {"M": 70, "N": 7168, "K": 5120}),
     ("mha_with_lse_d256_causal_s2048", "mha_with_lse_d256_causal", {"B": 4, "H": 48, "HKV": 48, "S": 2048, "D": 256}),
     ("mha_bwd_d96_s16384", "mha_bwd_d96", {"B": 4, "H": 48, "HKV": 48, "S": 16384, "D": 96}),
     ("mha_bwd_d128_causal_s1024", "mha_bwd_d128_causal", {"B": 4, "H": 48, "HKV": 48, "S": 1024, "D": 128})],
)  # fmt: skip
def test_a_problem_is_a_definition_at_one_workload(name, definition, dims):
    task = TASKS[name]
    assert (task.definition, task.dims, task.workload_name) == (definition, dims, name)
    assert task.axis == ("M" if definition.startswith("gemm") else "S") and not task.aliases


@pytest.mark.parametrize(
    ("spelling", "name"),
    [("gemm_n7168_k5120_m8192", "gemm_n7168_k5120"), ("mha_with_lse_d128_s4096", "mha_with_lse_d128"),
     ("mha_with_lse_d128_causal_s4096", "mha_with_lse_d128_causal"), ("mha_bwd_d128_s4096", "mha_bwd_d128"),
     ("MHA_BWD_D128_CAUSAL_S4096", "mha_bwd_d128_causal"), ("gqa_bwd_d128_s4096", "gqa_bwd_d128"),
     ("fp8_gemm_nt_1d2d_n4096_k7168_m4096", "fp8_gemm_nt_1d2d_n4096_k7168"),
     ("fp8_mha_with_lse_d96_causal_s4096", "fp8_mha_with_lse_d96_causal")],
)  # fmt: skip
def test_the_workload_spelling_of_a_plain_named_task_resolves_to_it(spelling, name):
    assert get_task(spelling) is TASKS[name] and TASKS[name].workload_name == spelling.lower()
    assert renamed(spelling) is None


@pytest.mark.parametrize(
    ("alias", "name"),
    [("gemm", "gemm_n7168_k5120"), ("attn_fwd", "mha_with_lse_d128"), ("attn_fwd_causal", "mha_with_lse_d128_causal"),
     ("attn_bwd", "mha_bwd_d128"), ("attn_bwd_causal", "mha_bwd_d128_causal"), ("  GEMM ", "gemm_n7168_k5120"),
     ("mha_with_lse_d64_s2048", "mha_with_lse_d64_s2048"), ("MHA_BWD_D96_CAUSAL_S512", "mha_bwd_d96_causal_s512"),
     ("gqa_bwd_d128", "gqa_bwd_d128")],
)  # fmt: skip
def test_task_names_and_aliases(alias, name):
    assert get_task(alias) is TASKS[name]
    assert renamed(alias) is None


@pytest.mark.parametrize(
    ("former", "name"),
    [("mha_fwd_d128", "mha_with_lse_d128"), ("mha_fwd_d64_causal", "mha_with_lse_d64_causal_s4096"),
     ("mha_fwd_d96", "mha_with_lse_d96_s4096"), ("mha_with_lse_d64", "mha_with_lse_d64_s4096"),
     ("mha_bwd_d96_causal", "mha_bwd_d96_causal_s4096")],
)  # fmt: skip
def test_former_names_resolve_with_a_note(former, name):
    assert get_task(former) is TASKS[name]
    assert renamed(former) == f"note: task {former} is now called {name} (the paper's name)"


@pytest.mark.parametrize(
    ("name", "closest"),
    [("gemm_n2048_k4096_m94", "closest: gemm_n2048_k4096_m93, "), ("mha_bwd_d96_s16385", "closest: mha_bwd_d96_s16384"),
     ("qwertyuiop", "closest: none near it (`python -m tasks` lists every name)")],
)  # fmt: skip
def test_an_unknown_task_is_one_line_naming_the_closest(name, closest):
    with pytest.raises(UnknownName) as refused:
        get_task(name)
    message = str(refused.value)
    assert message.startswith(f"unknown task {name!r}; {closest}") and "\n" not in message


def test_groups_and_names_resolve_in_order_without_repeats():
    assert resolve_names(["core"]) == CORE
    assert resolve_names(["attn_fwd", "core", "gemm_n7168_k5120_m8192"]) == ["mha_with_lse_d128", *CORE[:1], *CORE[2:]]
    assert resolve_names(["gemm"]) == GROUPS["gemm"]  # the group, not the core GEMM's alias
    assert resolve_names(["mha_bwd", "mha_bwd_d96_s512"]) == GROUPS["mha_bwd"]
    with pytest.raises(UnknownName) as refused:
        resolve_names(["core", "mha_fwdd"])
    message = str(refused.value)
    assert message.startswith("unknown task or group 'mha_fwdd'; closest: mha_fwd") and "\n" not in message


def test_fp8_tasks_follow_the_papers_definitions():
    gemm = get_task("fp8_gemm_nt_1d2d_n4096_k7168")
    assert (gemm.family, gemm.dims, gemm.definition, gemm.axis) == (
        "fp8_gemm", {"M": 4096, "N": 4096, "K": 7168}, "fp8_gemm_nt_1d2d_n4096_k7168", "M"
    )  # fmt: skip
    assert [(t.name, t.dtype, t.shape, t.role, t.init) for t in gemm.tensors] == [
        ("A", "float8_e4m3fn", ["M", "K"], "input", "normal"), ("SF_A", "float32", ["M", "K//128"], "input", "derived"),
        ("B", "float8_e4m3fn", ["N", "K"], "input", "normal"),
        ("SF_B", "float32", ["N//128", "K//128"], "input", "derived"), ("D", "bfloat16", ["M", "N"], "output", "none"),
    ]  # fmt: skip
    assert (gemm.baseline.call, gemm.baseline.h200_ms_seen, gemm.tolerance) == ("scaled_mm_blockwise", 0.187, 1e-2)
    assert "DeepGEMM" in gemm.baseline.description and "torch._scaled_mm" in gemm.baseline.description
    for d in (64, 96, 128, 256):
        for causal in (False, True):
            task = get_task(f"fp8_mha_with_lse_d{d}" + ("_causal" if causal else ""))
            assert task.dims == {"B": 4, "H": 48, "S": 4096, "D": d} and task.params == {"causal": causal,
                                                                                      "scale": d**-0.5}  # fmt: skip
            assert {t.name: (t.dtype, t.role) for t in task.tensors} == {
                "Q": ("float8_e4m3fn", "input"), "K": ("float8_e4m3fn", "input"), "V": ("float8_e4m3fn", "input"),
                "descale_q": ("float32", "input"), "descale_k": ("float32", "input"),
                "descale_v": ("float32", "input"), "O": ("float8_e4m3fn", "output"), "LSE": ("float32", "output"),
            }  # fmt: skip
            assert task.baseline.call == "cudnn_fp8_attention_forward" and "sdpa_fp8" in task.baseline.description
            assert task.tolerance == 5e-2 and task.targets == FP8_TARGETS
    assert get_task("fp8_mha_with_lse_d256_causal").baseline.h200_ms_seen == 1.91
    assert get_task("fp8_mha_with_lse_d64").baseline.h200_ms_seen is None


@pytest.mark.parametrize(
    ("arch", "group", "matches", "others"),
    [(Arch.SM_90A, "wgmma", ["QGMMA.64x256x32.F32.E4M3.E4M3"], ["HGMMA.64x128x16.F32.BF16"]),
     (Arch.SM_100A, "tcgen05", ["UTCQMMA", "UTCQMMA.2CTA"], ["UTCHMMA", "UTCIMMA"])],
)  # fmt: skip
def test_fp8_targets_want_the_fp8_mma(arch, group, matches, others):
    [target] = [g for g in FP8_TARGETS[arch] if g.name == group]
    assert all(any(re.search(p, op) for p in target.sass_patterns) for op in matches)
    assert not any(re.search(p, op) for p in target.sass_patterns for op in others)
    mnemonic = {"wgmma": "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3",
                "tcgen05": "tcgen05.mma.cta_group::1.kind::f8f6f4"}[group]  # fmt: skip
    bf16 = {
        "wgmma": "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",
        "tcgen05": "tcgen05.mma.cta_group::1.kind::f16",
    }
    assert any(re.search(p, mnemonic) for p in target.ptx_patterns)
    assert not any(re.search(p, bf16[group]) for p in target.ptx_patterns)


@pytest.mark.parametrize(
    ("alias", "arch"),
    [("sm_90a", Arch.SM_90A), ("sm_90", Arch.SM_90A), ("h100", Arch.SM_90A), ("h200", Arch.SM_90A),
     ("H100", Arch.SM_90A), (" hopper ", Arch.SM_90A), ("sm_100a", Arch.SM_100A), ("sm_100", Arch.SM_100A),
     ("b200", Arch.SM_100A), ("B200", Arch.SM_100A), (Arch.SM_100A, Arch.SM_100A)],
)  # fmt: skip
def test_arch_aliases(alias, arch):
    assert Arch.resolve(alias) is arch


@pytest.mark.parametrize("name", ["sm_80", "sm_120a", "a100", ""])
def test_unknown_arch_lists_the_known_ones(name):
    with pytest.raises(UnknownName, match=rf"unknown arch '{name}'; known: b200, blackwell, h100, h200, hopper"):
        Arch.resolve(name)


def test_arch_properties():
    assert Arch.SM_90A.compute_capability == (9, 0) and Arch.SM_100A.compute_capability == (10, 0)
    assert {a.max_shared_bytes for a in Arch} == {227 * 1024}
    assert {a.max_cluster_blocks for a in Arch} == {16}


def test_gemm_task():
    task = get_task("gemm")
    assert task.family == "gemm" and task.dims == {"M": 8192, "N": 7168, "K": 5120}
    assert [(t.name, t.dtype, t.shape, t.role) for t in task.tensors] == [
        ("A", "bfloat16", ["M", "K"], "input"), ("B", "bfloat16", ["N", "K"], "input"),
        ("C", "bfloat16", ["M", "N"], "output"),
    ]  # fmt: skip
    assert evaluate(task.flops, task.dims) == 2 * 8192 * 7168 * 5120
    assert (task.baseline.library, task.baseline.call, task.baseline.h200_ms_seen) == ("cuBLAS", "cublas_gemm", 0.749)
    assert (task.metric, task.tolerance) == ("rel_l2", 1e-2)


@pytest.mark.parametrize("name", ATTENTION)
def test_attention_tasks_follow_the_papers_definitions(name):
    task = TASKS[name]
    d = int(re.search(r"_d(\d+)", name).group(1))
    causal, backward, gqa = task.definition.endswith("_causal"), "_bwd_" in name, name.startswith("gqa")
    s = task.dims["S"]
    assert task.dims == {"B": 4, "H": 48, "HKV": 8 if gqa else 48, "S": s, "D": d}
    assert task.params == {"causal": causal, "scale": d**-0.5}
    assert task.version == 2 and task.family == ("attention_bwd" if backward else "attention_fwd")
    shapes = {t.name: (t.dtype, t.shape, t.role) for t in task.tensors}
    bhsd, kv, bhs = ["B", "H", "S", "D"], ["B", "HKV" if gqa else "H", "S", "D"], ["B", "H", "S"]
    if backward:
        assert shapes == {
            "Q": ("bfloat16", bhsd, "input"), "K": ("bfloat16", kv, "input"), "V": ("bfloat16", kv, "input"),
            "O": ("bfloat16", bhsd, "input"), "dO": ("bfloat16", bhsd, "input"), "LSE": ("float32", bhs, "input"),
            "dQ": ("bfloat16", bhsd, "output"), "dK": ("bfloat16", kv, "output"), "dV": ("bfloat16", kv, "output"),
        }  # fmt: skip
        assert {t.name for t in task.inputs if t.init == "derived"} == {"O", "LSE"}  # no Delta: the kernel's work
        assert "Delta = rowsum(dO∘O) (computed by the kernel: it is not an input)" in task.description
        assert task.derive == "attention_backward_inputs" and task.reference == "attention_backward"
    else:
        assert shapes == {"Q": ("bfloat16", bhsd, "input"), "K": ("bfloat16", kv, "input"),
                          "V": ("bfloat16", kv, "input"), "O": ("bfloat16", bhsd, "output"),
                          "LSE": ("float32", bhs, "output")}  # fmt: skip
        assert task.derive is None and task.reference == "attention_forward"
    assert all(t.init == "spiky" for t in task.inputs if t.name in ("Q", "K", "V", "dO"))
    forward_flops = 4 * 4 * 48 * s**2 * d // (2 if causal else 1)
    assert evaluate(task.flops, task.dims) == forward_flops * (2.5 if backward else 1)
    assert task.baseline.library == "cuDNN"
    assert task.baseline.call == ("cudnn_attention_backward" if backward else "cudnn_attention_forward")


def test_core_aliases_exist_only_for_d128_mha():
    assert [t.aliases for t in TASKS.values() if t.aliases] == [
        ["gemm"], ["attn_fwd"], ["attn_fwd_causal"], ["attn_bwd"], ["attn_bwd_causal"]
    ]  # fmt: skip
    assert get_task("gemm").version == 1  # unchanged since wave 1


def test_h200_medians_follow_facts():
    seen = {name: TASKS[name].baseline.h200_ms_seen for name in ATTENTION if TASKS[name].baseline.h200_ms_seen}
    assert seen == {
        "mha_with_lse_d128": 2.70, "mha_with_lse_d128_causal": 1.56, "mha_bwd_d128": 7.92, "mha_bwd_d128_causal": 4.50,
        "gqa_with_lse_d128": 2.73, "gqa_with_lse_d128_causal": 1.50, "gqa_bwd_d128": 8.11, "gqa_bwd_d128_causal": 4.63,
    }  # fmt: skip


def test_named_functions_exist():
    for task in TASKS.values():
        for name in filter(None, (task.reference, task.derive)):
            assert callable(getattr(references, name)), name
        assert callable(getattr(baselines, task.baseline.call)), task.baseline.call


def test_target_groups_per_arch():
    assert [g.name for g in TARGETS[Arch.SM_90A]] == ["wgmma", "tma"]
    assert [g.name for g in TARGETS[Arch.SM_100A]] == ["tcgen05", "tmem", "tma"]
    assert all(task.targets == (FP8_TARGETS if name in FP8 else TARGETS) for name, task in TASKS.items())
    # The paper's tag: any *GMMA or TMA on Hopper; tcgen05 or TMEM (not TMA alone) on Blackwell.
    assert {g.name: g.paper_tag for g in TARGETS[Arch.SM_90A]} == {"wgmma": True, "tma": True}
    assert {g.name: g.paper_tag for g in TARGETS[Arch.SM_100A]} == {"tcgen05": True, "tmem": True, "tma": False}


GROUP_OPCODES = {
    "wgmma": (["HGMMA.64x128x16.F32.BF16", "QGMMA.64x256x32.F32.E4M3.E4M3", "IGMMA.64x64x32.S32.S8.S8"],
              ["WARPGROUP.ARRIVE", "WARPGROUP.DEPBAR.LE", "HMMA.16816.F32.BF16"]),
    "tma": (["UTMALDG.2D", "UTMASTG.3D", "UTMAREDG.2D.ADD"], ["UTMACMDFLUSH", "UBLKCP.S.G", "UTMAPF.2D"]),
    "tcgen05": (["UTCHMMA", "UTCQMMA.2CTA", "UTCIMMA"], ["UTCBAR", "UTCATOMSWS.FIND_AND_SET.ALIGN"]),
    "tmem": (["LDTM.x128", "STTM.x16"], ["LDSM.16.M88.4", "STS.128"]),
}  # fmt: skip
GROUP_MNEMONICS = {
    "wgmma": (["wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"], ["wgmma.fence.sync.aligned"]),
    "tma": (["cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
             "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group"],
            ["cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes", "cp.async.ca.shared.global"]),
    "tcgen05": (["tcgen05.mma.cta_group::1.kind::f16"], ["tcgen05.commit.cta_group::1.mbarrier::arrive::one.b64"]),
    "tmem": (["tcgen05.ld.sync.aligned.32x32b.x16.b32", "tcgen05.st.sync.aligned.16x64b.x4.b32"],
             ["tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32"]),
}  # fmt: skip


@pytest.mark.parametrize("group", list(GROUP_OPCODES))
def test_group_patterns_match_the_facts_table(group):
    target = next(g for gs in TARGETS.values() for g in gs if g.name == group)
    matches, others = GROUP_OPCODES[group]
    assert all(any(re.search(p, op) for p in target.sass_patterns) for op in matches)
    assert not any(re.search(p, op) for p in target.sass_patterns for op in others)
    matches, others = GROUP_MNEMONICS[group]
    assert all(any(re.search(p, m) for p in target.ptx_patterns) for m in matches)
    assert not any(re.search(p, m) for p in target.ptx_patterns for m in others)


def test_python_m_tasks_lists_groups_first_then_what_it_names():
    done = subprocess.run([sys.executable, "-m", "tasks", "fp8", "mha_bwd_d96_s16384"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0 and done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0] == "catalog v2; groups:" and lines[1].split()[:3] == ["core", "5", "tasks"]
    assert [line.split()[0] for line in lines[1 : 1 + len(GROUPS)]] == list(GROUPS)
    named = [line.split()[0] for line in lines if line and not line.startswith(" ") and line.split()[0] in TASKS]
    assert named == [*FP8, "mha_bwd_d96_s16384"]
    assert "  mha_bwd_d96 at S=16384; dims B=4 H=48 HKV=48 S=16384 D=96;" in done.stdout
    refused = subprocess.run([sys.executable, "-m", "tasks", "gemmm"], capture_output=True, text=True, timeout=60,
                             cwd=ROOT)  # fmt: skip
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("unknown task or group 'gemmm'; closest: gemm") and refused.stderr.count("\n") == 1


def test_python_m_tasks_prints_the_catalog():
    done = subprocess.run([sys.executable, "-m", "tasks"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0 and done.stderr == ""
    blocks = {block.split()[0]: block for block in done.stdout.split("\n\n")}
    assert [name for name in blocks if name in TASKS] == list(TASKS)
    gqa = blocks["gqa_bwd_d128_causal"].splitlines()
    assert gqa[0] == "gqa_bwd_d128_causal  [definition v2]"
    assert "dims B=4 H=48 HKV=8 S=4096 D=128" in gqa[1] and "baseline cuDNN, 4.63 ms seen on an H200" in gqa[1]
    assert any(line.split()[:4] == ["output", "dK", "bfloat16", "[B,"] and "HKV, S, D]" in line for line in gqa)
    assert not any(" Delta " in line for line in gqa)
    fwd = blocks["mha_with_lse_d128"].splitlines()
    assert fwd[0] == "mha_with_lse_d128  (alias attn_fwd, formerly mha_fwd_d128)  [definition v2]"
    [lse] = [line.split() for line in fwd if " LSE " in line]
    assert lse[:3] == ["output", "LSE", "float32"] and " ".join(lse[3:6]) == "[B, H, S]"
    lines = done.stdout.splitlines()
    assert "  sm_90a: sm_90, sm90, sm90a, hopper, h100, h200; target groups: wgmma, tma" in lines
    assert "  sm_100a: sm_100, sm100, sm100a, blackwell, b200; target groups: tcgen05, tmem, tma" in lines
