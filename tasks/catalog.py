"""The task catalog: the paper's core tasks and the D=64/96 attention variants, as data.

Shapes, layouts, baselines and FLOP counts follow FACTS.md. References, input derivations and
baseline calls are named here and live in tasks/references.py and tasks/baselines.py.
"""

from __future__ import annotations

from tasks.schema import Arch, Baseline, TargetGroup, Task, TensorSpec, UnknownName

HOPPER_TARGETS = [
    TargetGroup(
        name="wgmma",
        description="warpgroup MMA (wgmma.mma_async → HGMMA/QGMMA/IGMMA)",
        ptx_patterns=[r"^wgmma\.mma_async"],
        sass_patterns=[r"^[HQI]GMMA\b"],
        paper_tag=True,
    ),
    TargetGroup(
        name="tma",
        description="bulk tensor copies (cp.async.bulk.tensor → UTMALDG/UTMASTG/UTMAREDG)",
        ptx_patterns=[r"^cp\.(async\.bulk|reduce\.async\.bulk)\.tensor"],
        sass_patterns=[r"^UTMA(LDG|STG|REDG)\b"],
        paper_tag=True,
    ),
]

BLACKWELL_TARGETS = [
    TargetGroup(
        name="tcgen05",
        description="5th-gen tensor core MMA (tcgen05.mma → UTCHMMA/UTCQMMA/UTCIMMA)",
        ptx_patterns=[r"^tcgen05\.mma"],
        sass_patterns=[r"^UTC\w*MMA\b"],
        paper_tag=True,
    ),
    TargetGroup(
        name="tmem",
        description="tensor memory loads/stores (tcgen05.ld/st → LDTM/STTM)",
        ptx_patterns=[r"^tcgen05\.(ld|st)\b"],
        sass_patterns=[r"^(LDTM|STTM)\b"],
        paper_tag=True,
    ),
    TargetGroup(
        name="tma",
        description="bulk tensor copies (cp.async.bulk.tensor → UTMALDG/UTMASTG/UTMAREDG); "
        "on Blackwell TMA alone does not earn the paper's tag",
        ptx_patterns=[r"^cp\.(async\.bulk|reduce\.async\.bulk)\.tensor"],
        sass_patterns=[r"^UTMA(LDG|STG|REDG)\b"],
    ),
]

TARGETS = {Arch.SM_90A: HOPPER_TARGETS, Arch.SM_100A: BLACKWELL_TARGETS}

_BSHD = "[B, S, H, D], row-major, contiguous (head dim innermost)"
_BHS = "[B, H, S], row-major, contiguous, fp32"


def _gemm() -> Task:
    return Task(
        name="gemm_n7168_k5120",
        aliases=["gemm"],
        family="gemm",
        description="C[M,N] = A[M,K] · B[N,K]ᵀ in bf16 with fp32 accumulation (B is stored K-major, "
        "as a linear layer's weight).",
        dims={"M": 8192, "N": 7168, "K": 5120},
        tensors=[
            TensorSpec(name="A", dtype="bfloat16", shape=["M", "K"], role="input", init="normal"),
            TensorSpec(name="B", dtype="bfloat16", shape=["N", "K"], role="input", init="normal"),
            TensorSpec(name="C", dtype="bfloat16", shape=["M", "N"], role="output"),
        ],
        reference="gemm",
        flops="2*M*N*K",
        baseline=Baseline(library="cuBLAS", call="cublas_gemm", description="torch: A @ B.T", h200_ms_seen=0.749),
        targets=TARGETS,
    )


def _attention(d: int, *, backward: bool, causal: bool, seen_ms: float | None) -> Task:
    kind = "bwd" if backward else "fwd"
    name = f"mha_{kind}_d{d}" + ("_causal" if causal else "")
    aliases = [f"attn_{kind}" + ("_causal" if causal else "")] if d == 128 else []
    mask = "causal (key j attends to query i only when j ≤ i)" if causal else "no mask"
    if backward:
        tensors = [
            TensorSpec(name=n, dtype="bfloat16", shape=["B", "S", "H", "D"], role="input", init="spiky",
                       layout=_BSHD)
            for n in ("Q", "K", "V", "dO")
        ] + [
            TensorSpec(name="O", dtype="bfloat16", shape=["B", "S", "H", "D"], role="input", init="derived",
                       layout=_BSHD),
            TensorSpec(name="LSE", dtype="float32", shape=["B", "H", "S"], role="input", init="derived",
                       layout=_BHS),
            TensorSpec(name="Delta", dtype="float32", shape=["B", "H", "S"], role="input", init="derived",
                       layout=_BHS),
        ] + [
            TensorSpec(name=n, dtype="bfloat16", shape=["B", "S", "H", "D"], role="output", layout=_BSHD)
            for n in ("dQ", "dK", "dV")
        ]  # fmt: skip
        description = (
            f"Multi-head attention backward, {mask}, softmax scale 1/√D. Given Q, K, V, dO, the forward "
            "output O, LSE (natural-log log-sum-exp of the scaled scores, fp32) and Delta = rowsum(dO∘O) "
            "(fp32), compute dQ, dK, dV: P = exp(scale·QKᵀ − LSE), dV = PᵀdO, dP = dO Vᵀ, "
            "dS = P∘(dP − Delta), dQ = scale·dS K, dK = scale·dSᵀ Q."
        )
        flops = "5*B*H*S*S*D" if causal else "10*B*H*S*S*D"
        call = "cudnn_attention_backward"
    else:
        tensors = [
            TensorSpec(name=n, dtype="bfloat16", shape=["B", "S", "H", "D"], role="input", init="spiky",
                       layout=_BSHD)
            for n in ("Q", "K", "V")
        ] + [
            TensorSpec(name="O", dtype="bfloat16", shape=["B", "S", "H", "D"], role="output", layout=_BSHD),
            TensorSpec(name="LSE", dtype="float32", shape=["B", "H", "S"], role="output", layout=_BHS),
        ]  # fmt: skip
        description = (
            f"Multi-head attention forward, {mask}, softmax scale 1/√D: O = softmax(scale·QKᵀ)V per "
            "batch and head, and LSE = natural-log log-sum-exp of each row of scale·QKᵀ (fp32)."
        )
        flops = "2*B*H*S*S*D" if causal else "4*B*H*S*S*D"
        call = "cudnn_attention_forward"
    return Task(
        name=name,
        aliases=aliases,
        family="attention_bwd" if backward else "attention_fwd",
        description=description,
        dims={"B": 4, "S": 4096, "H": 48, "D": d},
        tensors=tensors,
        params={"causal": causal, "scale": d**-0.5},
        reference="attention_backward" if backward else "attention_forward",
        derive="attention_backward_inputs" if backward else None,
        flops=flops,
        baseline=Baseline(
            library="cuDNN",
            call=call,
            description="cuDNN SDPA "
            + ("backward" if backward else "forward with LSE")
            + " (torch.ops.aten._scaled_dot_product_cudnn_attention*)",
            h200_ms_seen=seen_ms,
        ),
        targets=TARGETS,
    )


# H200 medians seen (FACTS.md); D=96 was not measured.
_SEEN = {
    (128, False, False): 2.73, (128, False, True): 1.54, (128, True, False): 7.92, (128, True, True): 4.51,
    (64, False, False): 1.79, (64, False, True): 0.98, (64, True, False): 4.77, (64, True, True): 2.73,
}  # fmt: skip

CORE = ["gemm_n7168_k5120", "mha_fwd_d128", "mha_fwd_d128_causal", "mha_bwd_d128", "mha_bwd_d128_causal"]


def _build() -> dict[str, Task]:
    tasks = [_gemm()]
    for d in (128, 64, 96):
        for backward in (False, True):
            for causal in (False, True):
                seen = _SEEN.get((d, backward, causal))
                tasks.append(_attention(d, backward=backward, causal=causal, seen_ms=seen))
    return {t.name: t for t in tasks}


TASKS: dict[str, Task] = _build()
_ALIASES = {alias: t.name for t in TASKS.values() for alias in t.aliases}


def get_task(name: str) -> Task:
    """The task called `name` (or one of its aliases); UnknownName lists the known names."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in TASKS:
        known = ", ".join(list(TASKS) + sorted(_ALIASES))
        raise UnknownName(f"unknown task {name!r}; known: {known}")
    return TASKS[key]
