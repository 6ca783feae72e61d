"""`python -m tools.dev.paper_rule_calibration [--tasks T,…] [--out FILE.md] [--device N]`: how strict the paper's
element rule is, measured on answers that are right by construction rather than on ours.

On each task's paper draw (tasks/paper_protocol.py: plain N(0,1) for the forward, the stored spiky tensors for the
backward) it takes the baseline library's output y (cuDNN's, as eval.criterion=paper does) and judges by the paper's
rule against y, output by output:
- the exact answer: the fp32 reference (tasks/references.py) rounded once to the output's dtype;
- another library's answer: torch's FlashAttention-2 kernels (aten._scaled_dot_product_flash_attention and its
  backward), given the same inputs (the backward the task's own O and LSE, as cuDNN is).
Beside each verdict: its relative L2 error against the fp32 reference, and cuDNN's own. When the exact answer
fails against cuDNN, an answer can pass only by following cuDNN's own rounding, not by being closer to the truth.
Attention tasks only (FlashAttention-2 has no GEMM); MHA only (FlashAttention-2 wants as many K/V heads as query
heads here)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from tasks.baselines import prepare_baseline
from tasks.catalog import get_task, resolve_names
from tasks.inputs import TORCH_DTYPES, draw_inputs
from tasks.paper_protocol import paper_check, trial_seed
from tasks.references import run_reference
from tasks.schema import UnknownName
from tools.gpu.check import compare, compare_elements

Outputs = dict[str, torch.Tensor]
DEFAULT_TASKS = "mha_with_lse_d128,mha_with_lse_d128_causal,mha_bwd_d128,mha_bwd_d128_causal"
FRESH_SEED = 1  # the first fresh trial's seed (the forward's draws); the backward reads the stored tensors


def unsupported(name: str) -> str | None:
    """Why a task cannot be calibrated here, or None: torch's FlashAttention-2 serves bf16 MHA only."""
    task = get_task(name)
    if task.family not in ("attention_fwd", "attention_bwd"):
        return f"{name} is of family {task.family}; only bf16 attention (attention_fwd, _bwd) can be calibrated"
    if task.dims.get("HKV", task.dims.get("H")) != task.dims.get("H"):
        return f"{name} has {task.dims['HKV']} K/V heads for {task.dims['H']} query heads; only MHA can be calibrated"
    return None


def flash_attention_2(t: dict[str, torch.Tensor], backward: bool, causal: bool, scale: float) -> Outputs:
    """torch's FlashAttention-2 forward, or its backward from the task's O and LSE (the forward call only supplies
    the dense-batch arguments and RNG state the backward's signature wants)."""
    q, k, v = t["Q"], t["K"], t["V"]
    fwd = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
    if not backward:
        return {"O": fwd[0], "LSE": fwd[1]}
    _, _, cum_q, cum_k, max_q, max_k, seed, offset, _ = fwd
    dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_backward(
        t["dO"], q, k, v, t["O"], t["LSE"].float(), cum_q, cum_k, max_q, max_k, 0.0, causal, seed, offset, scale=scale
    )
    return {"dQ": dq, "dK": dk, "dV": dv}


def judged(name: str, out: torch.Tensor, library: torch.Tensor, reference: torch.Tensor, tolerance: float) -> str:
    """The paper's verdict against the library and the distance from the fp32 reference, as table cells."""
    check = compare_elements(name, out, library)
    worst = check.worst[0] if check.worst else None
    where = f"; worst {name}{worst.index}: {worst.value:.5g} vs {worst.expected:.5g}" if worst else ""
    verdict = "passes" if check.passed else f"fails: {check.failed:,} of {check.elements:,}{where}"
    return f"{verdict} | {compare(name, out, reference, tolerance).rel_l2:.2e}"


def calibrate(name: str, device: str) -> list[str]:
    task = get_task(name)
    check = paper_check(task.family)
    backward = task.family == "attention_bwd"
    rows = []
    for trial in range(check.trials):
        seed = trial_seed(check, trial, FRESH_SEED)
        inputs = draw_inputs(task, task.dims, seed, device, spikes=check.spikes)
        library = prepare_baseline(task.baseline.call, inputs, task.params)()
        reference = run_reference(task.reference, inputs, task.params)
        exact = {o.name: reference[o.name].to(TORCH_DTYPES[o.dtype]) for o in task.outputs}
        candidates = {
            "exact (fp32 reference, rounded once)": exact,
            "FlashAttention-2 (torch)": flash_attention_2(inputs, backward, **task.params),
        }
        for who, outs in candidates.items():
            for o in task.outputs:
                lib = library[o.name].reshape(reference[o.name].shape)
                cells = judged(o.name, outs[o.name].reshape(lib.shape).contiguous(), lib, reference[o.name],
                               task.tolerance)  # fmt: skip
                lib_l2 = compare(o.name, lib.contiguous(), reference[o.name], task.tolerance).rel_l2
                rows.append(f"| {name} | {trial + 1} (seed {seed}) | {o.name} | {who} | {cells} | {lib_l2:.2e} |")
                print(rows[-1], file=sys.stderr, flush=True)
        del inputs, library, reference
        torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.dev.paper_rule_calibration", description=__doc__)
    parser.add_argument(
        "--tasks", default=DEFAULT_TASKS, help=f"attention task names, comma-separated [{DEFAULT_TASKS}]"
    )
    parser.add_argument("--out", type=Path, help="also write the table here")
    parser.add_argument("--device", type=int, default=0, help="GPU ordinal")
    args = parser.parse_args(argv)
    try:
        names = resolve_names(args.tasks.split(","))
    except UnknownName as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    refusals = [why for why in map(unsupported, names) if why]
    if refusals:
        print(f"error: {refusals[0]}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: this needs a GPU (cuDNN's and FlashAttention-2's kernels)", file=sys.stderr)
        return 2
    device = f"cuda:{args.device}"
    rows = [r for name in names for r in calibrate(name, device)]
    text = "\n".join([
        f"The paper's element rule (atol = rtol = 1e-2 against cuDNN's output) on answers right by construction, "
        f"on {torch.cuda.get_device_name(device)}.",
        "",
        "| task | trial | output | answer | the paper's rule against cuDNN | rel. L2 vs fp32 "
        "| cuDNN's rel. L2 vs fp32 |",
        "| --- | --- | --- | --- | --- | ---: | ---: |",
        *rows,
    ])  # fmt: skip
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
