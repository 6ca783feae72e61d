"""The task catalog, as data: the paper's core tasks, the D=64/96 attention variants and the GQA
generalisation tasks, under the paper's definition names.

The definitions follow the PTXBench paper's task files (its public code, read 2026-12-01): attention tensors
are [B, H, S, D], row-major and contiguous; LSE is [B, H, S] fp32, the natural-log log-sum-exp of the scaled scores; the
softmax scale is 1/√D; the backward gets Q, K, V, O, dO and LSE only and computes Delta = rowsum(dO∘O)
itself, as cuDNN's backward does. References, input derivations and baseline calls are named here and
live in tasks/references.py and tasks/baselines.py.
"""

from __future__ import annotations

from tasks.schema import Arch, Baseline, TargetGroup, Task, TensorSpec, UnknownName


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
HEADS, KV_HEADS = 48, 8
_LAYOUT = "row-major, contiguous: head-major, the head dim innermost"
_LSE = "row-major, contiguous"


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
        baseline=Baseline(
            library="cuBLAS",
            call="cublas_gemm",
            description="torch: A @ B.T",
            h200_ms_seen=0.749,
            b200_reported=_B200["gemm"],
        ),
        targets=TARGETS,
    )


def _heads(name: str, heads: str, role: str, init: str = "none") -> TensorSpec:
    return TensorSpec(name=name, dtype="bfloat16", shape=["B", heads, "S", "D"], role=role, init=init,
                      layout=_LAYOUT)  # fmt: skip


def _lse(role: str, init: str = "none") -> TensorSpec:
    return TensorSpec(name="LSE", dtype="float32", shape=["B", "H", "S"], role=role, init=init, layout=_LSE)


def _attention(d: int, *, backward: bool, causal: bool, gqa: bool, seen_ms: float | None) -> Task:
    kv = "HKV" if gqa else "H"
    kind = "bwd" if backward else "with_lse"
    name = f"{'gqa' if gqa else 'mha'}_{kind}_d{d}" + ("_causal" if causal else "")
    mha128 = d == 128 and not gqa
    short = f"attn_{'bwd' if backward else 'fwd'}" + ("_causal" if causal else "")
    former = [f"mha_fwd_d{d}" + ("_causal" if causal else "")] if not (backward or gqa) else []
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
        aliases=[short] if mha128 else [],
        former_names=former,
        version=ATTENTION_VERSION,
        family="attention_bwd" if backward else "attention_fwd",
        description=description,
        # HKV (K/V heads) is a dim of every attention task, H where each query head has its own, so one
        # launch spec can serve both kinds.
        dims={"B": 4, "H": HEADS, "HKV": KV_HEADS if gqa else HEADS, "S": 4096, "D": d},
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
            h200_ms_seen=seen_ms,
            b200_reported=_B200["backward" if backward else "forward"],
        ),
        targets=TARGETS,
    )


# H200 medians seen through cuDNN on [B, H, S, D] by our harness, 2026-12-01; (d, backward, causal, gqa).
_SEEN = {
    (128, False, False, False): 2.70, (128, False, True, False): 1.56,
    (128, True, False, False): 7.92, (128, True, True, False): 4.50,
    (128, False, False, True): 2.73, (128, False, True, True): 1.50,
    (128, True, False, True): 8.11, (128, True, True, True): 4.63,
}  # fmt: skip

CORE = ["gemm_n7168_k5120", "mha_with_lse_d128", "mha_with_lse_d128_causal", "mha_bwd_d128", "mha_bwd_d128_causal"]
GQA = ["gqa_with_lse_d128", "gqa_with_lse_d128_causal", "gqa_bwd_d128", "gqa_bwd_d128_causal"]


def _build() -> dict[str, Task]:
    variants = [(d, False) for d in (128, 64, 96)] + [(128, True)]
    tasks = [_gemm()] + [
        _attention(d, backward=backward, causal=causal, gqa=gqa, seen_ms=_SEEN.get((d, backward, causal, gqa)))
        for d, gqa in variants
        for backward in (False, True)
        for causal in (False, True)
    ]
    return {t.name: t for t in tasks}


TASKS: dict[str, Task] = _build()
_ALIASES = {alias: t.name for t in TASKS.values() for alias in t.aliases}
_FORMER = {old: t.name for t in TASKS.values() for old in t.former_names}


def get_task(name: str) -> Task:
    """The task called `name`, an alias or a former name of it; UnknownName lists the known names."""
    key = name.strip().lower()
    key = _ALIASES.get(key) or _FORMER.get(key) or key
    if key not in TASKS:
        known = ", ".join(list(TASKS) + sorted(_ALIASES))
        raise UnknownName(f"unknown task {name!r}; known: {known}")
    return TASKS[key]


def renamed(name: str) -> str | None:
    """The one-line note for a former task name (None for current names)."""
    new = _FORMER.get(name.strip().lower())
    return f"note: task {name} is now called {new} (the paper's name)" if new else None
