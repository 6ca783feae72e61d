"""How the PTXBench paper's harness (its `packages/fibserve`, read 2026-12-02) draws a family's inputs and judges its
outputs: eval.criterion=paper's data, in one place. tools/gpu/check.py applies the element rule, tools/gpu/worker.py
draws and counts the trials by this table.

The rule: an element fails when |x − y| > atol AND |x − y| / (|y| + 1e-8) > rtol, atol = rtol = 1e-2, where y is the
library's own output on the same inputs (cuBLAS, cuDNN: the task's baseline); all elements must pass, 99.5% for fp8
attention. The inputs: the GEMM and the attention forward draw plain N(0,1), fresh for each of 3 trials; the backward
reads spiky tensors stored once (N(0,1) + N(0,100)·Bernoulli(0.001)), 1 trial. A stored tensor is our fixed seed
STORED_SEED: the same tensors for every attempt, as a file would give, drawn by our generator rather than read from the
paper's safetensors (theirs are not published; only the distribution is).

fp8, the closest honest equivalent. The paper's fp8 GEMM reads stored inputs (N(0,1) in bf16, cast per token and per
block) and compares with stored DeepGEMM outputs by the same element rule; DeepGEMM does not run on our GPU image, so y
is cuBLAS's block-scaled fp8 GEMM (torch._scaled_mm, the task's baseline) on the same stored inputs. Its fp8 attention
reads stored spiky inputs cast to e4m3 and compares with cuDNN's fp8 SDPA (ours too) by the element rule with 99.5%
of elements required. The paper runs 3 trials of each, but stored inputs make them one check repeated: 1 trial here."""

from __future__ import annotations

from typing import NamedTuple

ATOL = 1e-2
RTOL = 1e-2
REL_EPS = 1e-8  # the paper's guard in |x − y| / (|y| + eps)
STORED_SEED = 20_251_202  # "stored tensors": one fixed seed, the same inputs for every attempt (the date it was read)


class PaperCheck(NamedTuple):
    """One family's inputs and verdict under the paper's rule."""

    spikes: bool  # inputs the task draws spiky keep their spikes (False: every input plain N(0,1))
    stored: bool  # the same stored tensors for every attempt (STORED_SEED) rather than fresh draws
    trials: int  # the paper's trial count (replaced by eval.trials when that is set)
    matched: float  # the share of each output's elements that must pass


PAPER = {
    "gemm": PaperCheck(spikes=False, stored=False, trials=3, matched=1.0),
    "attention_fwd": PaperCheck(spikes=False, stored=False, trials=3, matched=1.0),
    "attention_bwd": PaperCheck(spikes=True, stored=True, trials=1, matched=1.0),
    "fp8_gemm": PaperCheck(spikes=False, stored=True, trials=1, matched=1.0),
    "fp8_attention_fwd": PaperCheck(spikes=True, stored=True, trials=1, matched=0.995),
}


def paper_check(family: str) -> PaperCheck:
    return PAPER[family]


def trial_seed(check: PaperCheck, trial: int, seed: int) -> int:
    """The seed of trial `trial` (0-based) of an attempt whose own seed is `seed`: the stored tensors for the paper's
    trials of a stored family, fresh draws after them (more trials than the paper's, when eval.trials asks)."""
    if check.stored and trial < check.trials:
        return STORED_SEED
    return seed + trial
