"""Drawing a task's inputs: seeded, on any device, in the task's dtypes and layouts."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from tasks.expr import evaluate
from tasks.references import run_reference
from tasks.schema import Task

TORCH_DTYPES: dict[str, torch.dtype] = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
    "int32": torch.int32,
    "uint32": torch.uint32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "float8_e4m3fn": torch.float8_e4m3fn,
}

FP8_DTYPES = {"float8_e4m3fn"}
SPIKE_PROBABILITY = 1e-3
SPIKE_STD = 10.0  # the paper's N(0, 100): variance 100


def shape_of(shape: list[int | str], dims: Mapping[str, int]) -> list[int]:
    return [int(evaluate(d, dims)) for d in shape]


def draw_inputs(
    task: Task, dims: Mapping[str, int], seed: int, device: str | torch.device, *, spikes: bool = True
) -> dict[str, torch.Tensor]:
    """The task's inputs for one trial: 'normal' and 'spiky' draws, then what the task's `derive` computes from
    them ('derived' inputs, and an fp8 input's cast: fp8 inputs are drawn in bf16 and quantized there, as the
    paper's are). `spikes=False` draws the 'spiky' inputs plain N(0,1), as the paper's forward does."""
    gen = torch.Generator(device=device).manual_seed(seed)
    tensors: dict[str, torch.Tensor] = {}
    for spec in task.inputs:
        if spec.init == "derived":
            continue
        shape = shape_of(spec.shape, dims)
        x = torch.randn(shape, generator=gen, device=device)
        if spec.init == "spiky" and spikes:
            hit = torch.rand(shape, generator=gen, device=device) < SPIKE_PROBABILITY
            x += hit * torch.randn(shape, generator=gen, device=device) * SPIKE_STD
        tensors[spec.name] = x.to(torch.bfloat16 if spec.dtype in FP8_DTYPES else TORCH_DTYPES[spec.dtype])
    if task.derive:
        tensors |= run_reference(task.derive, tensors, task.params)
    return {spec.name: tensors[spec.name].to(TORCH_DTYPES[spec.dtype]).contiguous() for spec in task.inputs}
