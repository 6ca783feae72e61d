"""The task catalog, as data: every problem of the paper's bf16 GEMM (82) and attention (38) sets and its fp8
problems, one task per definition × workload, and our GQA generalisation tasks. The tables below are the
catalog (read from the paper's public repository, 2026-12-01); the builders turn each row into tasks.

The definitions follow the PTXBench paper's task files (its public code, read 2026-12-01): attention tensors
are [B, H, S, D], row-major and contiguous; LSE is [B, H, S] fp32, the natural-log log-sum-exp of the scaled scores; the
softmax scale is 1/√D; the backward gets Q, K, V, O, dO and LSE only and computes Delta = rowsum(dO∘O)
itself, as cuDNN's backward does. References, input derivations and baseline calls are named here and
live in tasks/references.py and tasks/baselines.py.
"""

from __future__ import annotations

import difflib

from tasks.schema import Arch, Baseline, TargetGroup, Task, TensorSpec, UnknownName

# Run records carry this, so results over different catalogs are never pooled. 1: the 17 fixed-shape tasks
# (M 8192, S 4096); 2: the paper's 120 bf16 problems at their workloads, and fp8.
CATALOG_VERSION = 2

# ------------------------------------------------------------------------------------------ the tables
# bf16 GEMM C[M,N] = A[M,K]·B[N,K]ᵀ: (N, K) → the M workloads.
GEMM: dict[tuple[int, int], tuple[int, ...]] = {
    (128, 2048): (93, 289, 492, 952, 8828), (2048, 4096): (93, 289, 952, 969, 8828),
    (2048, 5376): (70, 232, 901, 2379, 8828), (21504, 5376): (70, 232, 901, 2379, 8828),
    (256, 7168): (80, 901), (28672, 4096): (70, 232, 972, 2379, 8192),
    (34816, 5120): (70, 232, 972, 2379, 8192), (4096, 14336): (70, 232, 972, 2379, 8192),
    (4096, 4096): (70, 232, 972, 2379, 8192), (4096, 5376): (70, 232, 901, 2379, 8828),
    (5120, 17408): (70, 232, 972, 2379, 8192), (5120, 2048): (93, 289, 492, 952, 8828),
    (5120, 5120): (70, 232, 972, 2379, 8192), (5376, 21504): (70, 232, 901, 2379, 8828),
    (5376, 4096): (70, 232, 901, 2379, 8828), (6144, 4096): (70, 232, 972, 2379, 8192),
    (7168, 5120): (70, 232, 972, 2379, 8192),
}  # fmt: skip
# bf16 attention, B 4, H 48: head dim D → the S workloads, each definition with and without the causal mask.
MHA_FWD: dict[int, tuple[int, ...]] = {64: (2048, 4096), 128: (2048, 4096), 256: (2048, 4096), 96: (4096,)}
MHA_BWD: dict[int, tuple[int, ...]] = {
    64: (1024, 2048, 4096), 128: (1024, 2048, 4096), 96: (512, 1024, 2048, 4096, 8192, 16384)
}  # fmt: skip
# fp8: the block-scaled GEMM's (N, K) → M, and the attention forward's D → S (one workload each here).
FP8_GEMM: dict[tuple[int, int], tuple[int, ...]] = {(4096, 7168): (4096,)}
FP8_MHA: dict[int, tuple[int, ...]] = {64: (4096,), 96: (4096,), 128: (4096,), 256: (4096,)}
# Ours, beyond the paper: grouped-query attention at S 4096, forward and backward, with and without the mask.
GQA_ATTENTION: dict[int, tuple[int, ...]] = {128: (4096,)}

CORE = ["gemm_n7168_k5120", "mha_with_lse_d128", "mha_with_lse_d128_causal", "mha_bwd_d128", "mha_bwd_d128_causal"]
CORE_GEMM_M, CORE_S = 8192, 4096  # the core five's workloads: they keep their plain names


def _name(definition: str, axis: str, value: int, *, plain: bool) -> str:
    """`<definition>_<axis><value>` (gemm_n2048_k4096_m93), or the definition's name where it is `plain`."""
    return definition if plain else f"{definition}_{axis.lower()}{value}"


def _group(name: str, description: str, ptx: str, sass: str, paper_tag: bool = True) -> TargetGroup:
    return TargetGroup(name=name, description=description, ptx_patterns=[ptx], sass_patterns=[sass],
                       paper_tag=paper_tag)  # fmt: skip


_TMA = ("tma", "bulk tensor copies (cp.async.bulk.tensor → UTMALDG/UTMASTG/UTMAREDG)",
        r"^cp\.(async\.bulk|reduce\.async\.bulk)\.tensor", r"^UTMA(LDG|STG|REDG)\b")  # fmt: skip
TARGETS = {
    Arch.SM_90A: [
        _group("wgmma", "warpgroup MMA (wgmma.mma_async → HGMMA/QGMMA/IGMMA)", r"^wgmma\.mma_async", r"^[HQI]GMMA\b"),
        _group(*_TMA),
    ],
    Arch.SM_100A: [
        _group("tcgen05", "5th-gen tensor core MMA (tcgen05.mma → UTCHMMA/UTCQMMA/UTCIMMA)", r"^tcgen05\.mma",
               r"^UTC\w*MMA\b"),
        _group("tmem", "tensor memory loads/stores (tcgen05.ld/st → LDTM/STTM)", r"^tcgen05\.(ld|st)\b",
               r"^(LDTM|STTM)\b"),
        # On Blackwell TMA alone does not earn the paper's arch-specific tag.
        _group(*_TMA, paper_tag=False),
    ],
}  # fmt: skip

# Published B200 figures, for sm_100a prompts (nothing was measured on a B200 here). FlashAttention-4: Zadouri et
# al., arXiv 2603.05451, whose introduction also quotes NVIDIA's tensor-core peaks.
_FA4 = "the FlashAttention-4 paper, arXiv 2603.05451"
_B200 = {
    "gemm": "not measured here. NVIDIA quotes 2.25 PFLOP/s of dense bf16 tensor-core throughput for the B200 (as "
    f"cited in {_FA4}): the time this GEMM's FLOPs take at that rate is the floor no kernel beats",
    "forward": f"not measured here. In {_FA4}, bf16 attention forward on a B200 reaches up to 1,613 TFLOP/s, up to "
    "1.3× cuDNN 9.13",
    "backward": f"not measured here. The published B200 figures we know of are for the forward ({_FA4}: up to "
    "1,613 TFLOP/s, up to 1.3× cuDNN 9.13); its backward uses 2-CTA MMAs to cut shared-memory traffic and dQ "
    "atomics",
}
ATTENTION_VERSION = 2  # 1: wave 1's [B, S, H, D] layout with Delta handed to the backward (not the paper's)
BATCH, HEADS, KV_HEADS = 4, 48, 8  # the paper's definitions fix B and H
_LAYOUT = "row-major, contiguous: head-major, the head dim innermost"
_LSE = "row-major, contiguous"


def _gemm(n: int, k: int, m: int) -> Task:
    definition = f"gemm_n{n}_k{k}"
    core = definition in CORE and m == CORE_GEMM_M
    return Task(
        name=_name(definition, "M", m, plain=core),
        definition=definition,
        axis="M",
        aliases=["gemm"] if core else [],
        family="gemm",
        description="C[M,N] = A[M,K] · B[N,K]ᵀ in bf16 with fp32 accumulation (B is stored K-major, "
        "as a linear layer's weight).",
        dims={"M": m, "N": n, "K": k},
        tensors=[
            TensorSpec(name="A", dtype="bfloat16", shape=["M", "K"], role="input", init="normal"),
            TensorSpec(name="B", dtype="bfloat16", shape=["N", "K"], role="input", init="normal"),
            TensorSpec(name="C", dtype="bfloat16", shape=["M", "N"], role="output"),
        ],
        reference="gemm",
        flops="2*M*N*K",
        baseline=Baseline(
            library="cuBLAS",
            call="cublas_gemm",
            description="torch: A @ B.T",
            h200_ms_seen=0.749 if core else None,
            b200_reported=_B200["gemm"],
        ),
        targets=TARGETS,
    )


def _heads(name: str, heads: str, role: str, init: str = "none") -> TensorSpec:
    return TensorSpec(name=name, dtype="bfloat16", shape=["B", heads, "S", "D"], role=role, init=init,
                      layout=_LAYOUT)  # fmt: skip


def _lse(role: str, init: str = "none") -> TensorSpec:
    return TensorSpec(name="LSE", dtype="float32", shape=["B", "H", "S"], role=role, init=init, layout=_LSE)


def _attention(d: int, s: int, *, backward: bool, causal: bool, gqa: bool) -> Task:
    kv = "HKV" if gqa else "H"
    kind = "bwd" if backward else "with_lse"
    definition = f"{'gqa' if gqa else 'mha'}_{kind}_d{d}" + ("_causal" if causal else "")
    core = definition in CORE and s == CORE_S
    name = _name(definition, "S", s, plain=core or gqa)
    short = f"attn_{'bwd' if backward else 'fwd'}" + ("_causal" if causal else "")
    # Before the paper's catalog, the D=64/96 definitions were tasks at S 4096 under their plain names; before
    # the paper's names, the forward was mha_fwd_*.
    former = [definition] if name != definition and s == CORE_S else []
    if not (backward or gqa) and s == CORE_S:
        former.append(f"mha_fwd_d{d}" + ("_causal" if causal else ""))
    mask = "causal (key j attends to query i only when j ≤ i)" if causal else "no mask"
    heads = (f"{HEADS} query heads share {KV_HEADS} K/V heads (query head h reads K/V head h // {HEADS // KV_HEADS})"
             if gqa else "one K/V head per query head")  # fmt: skip
    if backward:
        tensors = [
            _heads("Q", "H", "input", "spiky"), _heads("K", kv, "input", "spiky"), _heads("V", kv, "input", "spiky"),
            _heads("O", "H", "input", "derived"), _heads("dO", "H", "input", "spiky"), _lse("input", "derived"),
            _heads("dQ", "H", "output"), _heads("dK", kv, "output"), _heads("dV", kv, "output"),
        ]  # fmt: skip
        description = (
            f"Attention backward, {mask}, softmax scale 1/√D, {heads}. Given Q, K, V, the forward output O, "
            "its upstream gradient dO and LSE (natural-log log-sum-exp of the scaled scores, fp32), compute "
            "dQ, dK, dV: P = exp(scale·QKᵀ − LSE), dV = PᵀdO, dP = dO Vᵀ, Delta = rowsum(dO∘O) (computed by "
            "the kernel: it is not an input), dS = P∘(dP − Delta), dQ = scale·dS K, dK = scale·dSᵀ Q"
            + (", with dK and dV summed over the query heads that share each K/V head." if gqa else ".")
        )
        flops = "5*B*H*S*S*D" if causal else "10*B*H*S*S*D"
        call, what = "cudnn_attention_backward", "backward"
    else:
        tensors = [
            _heads("Q", "H", "input", "spiky"), _heads("K", kv, "input", "spiky"), _heads("V", kv, "input", "spiky"),
            _heads("O", "H", "output"), _lse("output"),
        ]  # fmt: skip
        description = (
            f"Attention forward with LSE, {mask}, softmax scale 1/√D, {heads}: O = softmax(scale·QKᵀ)V per "
            "batch and head, and LSE = natural-log log-sum-exp of each row of scale·QKᵀ (fp32)."
        )
        flops = "2*B*H*S*S*D" if causal else "4*B*H*S*S*D"
        call, what = "cudnn_attention_forward", "forward with LSE"
    return Task(
        name=name,
        definition=definition,
        axis="S",
        aliases=[short] if core else [],
        former_names=former,
        version=ATTENTION_VERSION,
        family="attention_bwd" if backward else "attention_fwd",
        description=description,
        # HKV (K/V heads) is a dim of every attention task, H where each query head has its own, so one
        # launch spec can serve both kinds.
        dims={"B": BATCH, "H": HEADS, "HKV": KV_HEADS if gqa else HEADS, "S": s, "D": d},
        tensors=tensors,
        params={"causal": causal, "scale": d**-0.5},
        reference="attention_backward" if backward else "attention_forward",
        derive="attention_backward_inputs" if backward else None,
        flops=flops,
        baseline=Baseline(
            library="cuDNN",
            call=call,
            description=f"cuDNN SDPA {what} on the same [B, H, S, D] tensors "
            "(torch.ops.aten._scaled_dot_product_cudnn_attention*, which takes the shared K/V heads as they are)",
            h200_ms_seen=_SEEN.get((d, backward, causal, gqa)) if s == CORE_S else None,
            b200_reported=_B200["backward" if backward else "forward"],
        ),
        targets=TARGETS,
    )


# fp8 on the tensor cores: Hopper's wgmma with e4m3 operands (QGMMA), Blackwell's tcgen05.mma kind::f8f6f4 (UTCQMMA).
FP8_TARGETS = {
    Arch.SM_90A: [
        _group("wgmma", "warpgroup MMA on fp8 operands (wgmma.mma_async … .e4m3 → QGMMA)",
               r"^wgmma\.mma_async\S*\.e4m3", r"^QGMMA\b"),
        _group(*_TMA),
    ],
    Arch.SM_100A: [
        _group("tcgen05", "5th-gen tensor core MMA on fp8 operands (tcgen05.mma kind::f8f6f4 → UTCQMMA)",
               r"^tcgen05\.mma\S*\.kind::f8f6f4", r"^UTCQMMA\b"),
        _group("tmem", "tensor memory loads/stores (tcgen05.ld/st → LDTM/STTM)", r"^tcgen05\.(ld|st)\b",
               r"^(LDTM|STTM)\b"),
        _group(*_TMA, paper_tag=False),
    ],
}  # fmt: skip
FP8_BLOCK = 128  # the GEMM's scale granularity along K (A: 1×128 per token, B: 128×128)
# Our rule (rel. L2 against the fp32 reference) with a tolerance above fp8's own rounding: e4m3 keeps 3 mantissa
# bits, so the fp32 reference O itself rounded to e4m3 is off by 2.6–2.8e-2 on the tasks' inputs (S 4096); cuDNN's
# fp8 SDPA reads 2.65e-2 (d64) and 2.77e-2 (d256 causal) on the H200, our reference answers 2.9–3.1e-2 in the
# interpreter (S 256: P is rounded to e4m3 too).
FP8_ATTENTION_TOLERANCE = 5e-2
_FP8_SEEN = {(128, False): 1.63, (128, True): 1.05, (256, False): 2.90, (256, True): 1.91}  # H200, cuDNN fp8, ms


def _fp8_gemm(n: int, k: int, m: int) -> Task:
    """The paper's DeepGEMM-style 1D2D block-scaled fp8 GEMM. Judged by our rule, rel. L2 ≤ 1e-2 against the fp32
    reference computed from the very fp8 inputs and scales a kernel gets: the only error left is the kernel's
    accumulation and D's bf16 rounding (torch._scaled_mm reads 1.7e-3), so the bf16 tasks' rule fits unchanged.
    The paper's DeepGEMM cosine distance 1 − 2·Σxy/Σ(x²+y²) is about half the squared rel. L2: its 1e-3 threshold
    would pass a rel. L2 of 4.5e-2, looser than ours for no reason here."""
    definition = f"fp8_gemm_nt_1d2d_n{n}_k{k}"
    blocks = f"K//{FP8_BLOCK}"
    return Task(
        name=_name(definition, "M", m, plain=True),
        definition=definition,
        axis="M",
        family="fp8_gemm",
        description=f"D[M,N] = Σ over K blocks kb of (A[:, kb]·B[:, kb]ᵀ)·SF_A[m, kb]·SF_B[n//{FP8_BLOCK}, kb] in bf16 "
        f"(A, B float8_e4m3fn, both K-major; kb = {FP8_BLOCK} consecutive K; fp32 accumulation): DeepGEMM's 1D2D "
        f"recipe, one scale per token per K block for A and one per {FP8_BLOCK}×{FP8_BLOCK} block for B.",
        dims={"M": m, "N": n, "K": k},
        tensors=[
            TensorSpec(name="A", dtype="float8_e4m3fn", shape=["M", "K"], role="input", init="normal"),
            TensorSpec(name="SF_A", dtype="float32", shape=["M", blocks], role="input", init="derived"),
            TensorSpec(name="B", dtype="float8_e4m3fn", shape=["N", "K"], role="input", init="normal"),
            TensorSpec(name="SF_B", dtype="float32", shape=[f"N//{FP8_BLOCK}", blocks], role="input", init="derived"),
            TensorSpec(name="D", dtype="bfloat16", shape=["M", "N"], role="output"),
        ],
        reference="fp8_gemm_block_scaled",
        derive="fp8_gemm_inputs",
        flops="2*M*N*K",
        baseline=Baseline(
            library="cuBLAS",
            call="scaled_mm_blockwise",
            description="torch._scaled_mm with block scales (cuBLAS's block-scaled fp8 GEMM: SF_A as given, SF_B "
            "transposed, both M/N-major as it wants them, converted before timing). The paper's baseline, "
            "DeepGEMM's fp8_gemm_nt, is not available on our GPU image",
            h200_ms_seen=0.187,
        ),
        targets=FP8_TARGETS,
    )


def _fp8_attention(d: int, s: int, causal: bool) -> Task:
    """The paper's fp8 attention forward (cuDNN's sdpa_fp8 with scale_o pinned to 1, so O is a plain cast; its
    scale_s = 448 and descale_s = 1/448 only put P into e4m3's range inside the kernel). Judged by our rule, rel. L2
    against the fp32 reference on the dequantized inputs, with the tolerance raised to FP8_ATTENTION_TOLERANCE: an O
    stored in e4m3 cannot get under ~2.7e-2 (its own rounding), so 1e-2 would fail every correct kernel, cuDNN's
    included. The paper's element rule (|Δ| ≤ 1e-2 absolute or
    relative, 99.5% of elements, against cuDNN's output) compares two fp8 roundings of nearly equal values, which
    differ by one e4m3 step (12.5%) wherever the fp32 values straddle a rounding boundary: how many do depends on
    the accumulation order, not on correctness. The L2 rule measures the error's size over the whole output."""
    definition = f"fp8_mha_with_lse_d{d}" + ("_causal" if causal else "")
    mask = "causal (key j attends to query i only when j ≤ i)" if causal else "no mask"

    def fp8(name: str, role: str, init: str = "none") -> TensorSpec:
        return TensorSpec(name=name, dtype="float8_e4m3fn", shape=["B", "H", "S", "D"], role=role, init=init,
                          layout=_LAYOUT)  # fmt: skip

    def descale(name: str) -> TensorSpec:
        return TensorSpec(name=name, dtype="float32", shape=["1"], role="input", init="derived", layout="one value")

    return Task(
        name=_name(definition, "S", s, plain=True),
        definition=definition,
        axis="S",
        family="fp8_attention_fwd",
        description=f"fp8 attention forward with LSE, {mask}: Q, K, V are float8_e4m3fn, each with a per-tensor "
        "descale (the dequantized tensor is X.float()·descale_x). S = scale·(Q·descale_q)(K·descale_k)ᵀ with "
        "scale = 1/√D, O = softmax(S)(V·descale_v) stored as float8_e4m3fn with no output scale (a plain cast), "
        "LSE = natural-log log-sum-exp of each row of S (fp32). The matrix products take fp8 operands.",
        dims={"B": BATCH, "H": HEADS, "S": s, "D": d},
        tensors=[
            fp8("Q", "input", "spiky"),
            fp8("K", "input", "spiky"),
            fp8("V", "input", "spiky"),
            descale("descale_q"),
            descale("descale_k"),
            descale("descale_v"),
            fp8("O", "output"),
            _lse("output"),
        ],
        params={"causal": causal, "scale": d**-0.5},
        reference="fp8_attention_forward",
        derive="fp8_attention_inputs",
        tolerance=FP8_ATTENTION_TOLERANCE,
        flops="2*B*H*S*S*D" if causal else "4*B*H*S*S*D",
        baseline=Baseline(
            library="cuDNN",
            call="cudnn_fp8_attention_forward",
            description="cuDNN's fp8 SDPA forward (cudnn-frontend's graph API, sdpa_fp8, the paper's baseline) on "
            "the same tensors: scale_o 1 (O a plain cast), scale_s 448 and descale_s 1/448 (P, in [0, 1], scaled into "
            "e4m3's range inside the kernel and back)",
            h200_ms_seen=_FP8_SEEN.get((d, causal)) if s == CORE_S else None,
        ),
        targets=FP8_TARGETS,
    )


# H200 medians seen through cuDNN on [B, H, S, D] at S 4096 by our harness, 2026-12-01; (d, backward, causal, gqa).
_SEEN = {
    (128, False, False, False): 2.70, (128, False, True, False): 1.56,
    (128, True, False, False): 7.92, (128, True, True, False): 4.50,
    (128, False, False, True): 2.73, (128, False, True, True): 1.50,
    (128, True, False, True): 8.11, (128, True, True, True): 4.63,
}  # fmt: skip


def _build() -> dict[str, Task]:
    """Every task of the tables above, the paper's definition by definition in its order, then ours (GQA)."""
    tasks = [_gemm(n, k, m) for (n, k), ms in GEMM.items() for m in ms]
    for table, backward in ((MHA_FWD, False), (MHA_BWD, True)):
        tasks += [
            _attention(d, s, backward=backward, causal=causal, gqa=False)
            for d, seqs in table.items()
            for causal in (False, True)
            for s in seqs
        ]
    tasks += [_fp8_gemm(n, k, m) for (n, k), ms in FP8_GEMM.items() for m in ms]
    tasks += [_fp8_attention(d, s, causal) for d, seqs in FP8_MHA.items() for causal in (False, True) for s in seqs]
    tasks += [
        _attention(d, s, backward=backward, causal=causal, gqa=True)
        for d, seqs in GQA_ATTENTION.items()
        for backward in (False, True)
        for causal in (False, True)
        for s in seqs
    ]
    return {t.name: t for t in tasks}


def general_task(members: list[Task]) -> Task:
    """`<definition>_all`: the definition at every workload, judged by one answer. It reads as its largest workload
    (dims, tensors' shapes in the prompt, conservative limits) and holds the members it is judged at. A FlashInfer-Bench
    definition's (tasks/flashinfer_bench.py) is built here too; one without a baseline is timed alone."""
    largest = max(members, key=lambda t: t.dims[t.axis])
    values = ", ".join(str(t.dims[t.axis]) for t in members)
    return largest.model_copy(
        update={
            "name": f"{largest.definition}_all",
            "aliases": [],
            "former_names": [],
            "description": f"{largest.description} Shape-general: one answer must pass every workload of "
            f"{largest.definition}, {largest.axis} ∈ {{{values}}} (the dims shown are the largest's), so its "
            f"kernels take {largest.axis} at run time and its launch spec's expressions are over {largest.axis}.",
            "baseline": largest.baseline.model_copy(update={"h200_ms_seen": None}) if largest.baseline else None,
            "workloads": members,
        }
    )


def _build_general(tasks: dict[str, Task]) -> dict[str, Task]:
    """One general task per definition that has several workloads (ours, beyond the paper), in catalog order."""
    by_definition: dict[str, list[Task]] = {}
    for task in tasks.values():
        by_definition.setdefault(task.definition, []).append(task)
    general = [general_task(members) for members in by_definition.values() if len(members) > 1]
    return {t.name: t for t in general}


TASKS: dict[str, Task] = _build()  # every task at one workload
GENERAL: dict[str, Task] = _build_general(TASKS)  # the shape-general `<definition>_all` tasks
_ALIASES = {alias: t.name for t in TASKS.values() for alias in t.aliases}
_ALIASES |= {t.workload_name: t.name for t in TASKS.values() if t.workload_name != t.name}
_FORMER = {old: t.name for t in TASKS.values() for old in t.former_names}


def _in(*families: str) -> list[str]:
    return [t.name for t in TASKS.values() if t.family in families and not t.name.startswith("gqa_")]


GROUPS: dict[str, list[str]] = {
    "core": CORE,
    "paper": [t.name for t in TASKS.values() if not t.name.startswith("gqa_")],
    "gemm": _in("gemm"),
    "mha_fwd": _in("attention_fwd"),
    "mha_bwd": _in("attention_bwd"),
    "fp8": _in("fp8_gemm", "fp8_attention_fwd"),
    "gqa": [t.name for t in TASKS.values() if t.name.startswith("gqa_")],
    "general": list(GENERAL),
    "all": list(TASKS),
}
GROUP_DESCRIPTIONS = {
    "core": "the paper's five headline problems",
    "paper": "every problem of the paper's bf16 GEMM, attention and fp8 sets",
    "gemm": "bf16 GEMM, 17 N×K definitions at their M workloads",
    "mha_fwd": "bf16 attention forward with LSE, D 64–256, S 2048/4096",
    "mha_bwd": "bf16 attention backward, D 64–128, S 512–16384",
    "fp8": "fp8 GEMM (block-scaled) and fp8 attention forward",
    "gqa": "ours: grouped-query attention, 48 query heads over 8 K/V heads",
    "general": "ours: one answer for every workload of a definition (<definition>_all), scored at each",
    "all": "every task at one workload (general lists the shape-general ones)",
}


def _closest(name: str, candidates: list[str]) -> str:
    """The names nearest to a misspelt one, for a one-line refusal."""
    close = difflib.get_close_matches(name, list(dict.fromkeys(candidates)), n=5, cutoff=0.6)
    return ", ".join(close) if close else "none near it (`python -m tasks` lists every name)"


def get_task(name: str, *, files: bool = False) -> Task:
    """The task called `name`, an alias, its `<definition>_<axis><value>` spelling or a former name of it, or a task
    loaded from a FlashInfer-Bench definition file (tasks/flashinfer_bench.py). With `files` (a name the user typed on
    a command line, and only there: a file's reference is code we run), `name` may be such a file, whose first
    workload it returns; a name from a run folder, a request or a label never opens one. UnknownName names the closest
    names."""
    key = name.strip().lower()
    key = _ALIASES.get(key) or _FORMER.get(key) or key
    if key in GENERAL:
        return GENERAL[key]
    if key not in TASKS:
        from tasks import flashinfer_bench

        if (loaded := flashinfer_bench.lookup(name)) is not None:
            return loaded
        if files and flashinfer_bench.is_file_reference(name):
            return flashinfer_bench.lookup(flashinfer_bench.resolve(name)[0])
        every = [*TASKS, *GENERAL, *_ALIASES, *_FORMER]
        raise UnknownName(f"unknown task {name!r}; closest: {_closest(key, every)}")
    return TASKS[key]


def resolve_names(items: list[str], *, files: bool = False) -> list[str]:
    """Task names for a list of groups, names, aliases, former names and, with `files` (as get_task), FlashInfer-Bench
    definition files or folders (every workload of each), in order and without repeats;
    UnknownName (one line, with the closest task and group names) for the first that is neither."""
    from tasks import flashinfer_bench

    names: list[str] = []
    for item in items:
        key = item.strip().lower()
        if files and flashinfer_bench.is_file_reference(item):  # a FlashInfer-Bench file or folder (get_task)
            names += flashinfer_bench.resolve(item)
            continue
        if key in GROUPS:
            names += GROUPS[key]
            continue
        try:
            names.append(get_task(key).name)
        except UnknownName:
            every = [*GROUPS, *TASKS, *GENERAL, *_ALIASES, *_FORMER]
            raise UnknownName(f"unknown task or group {item!r}; closest: {_closest(key, every)}") from None
    return list(dict.fromkeys(names))


def renamed(name: str) -> str | None:
    """The one-line note for a former task name (None for current names)."""
    new = _FORMER.get(name.strip().lower())
    return f"note: task {name} is now called {new} (the paper's name)" if new else None
